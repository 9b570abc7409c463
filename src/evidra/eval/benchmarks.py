"""Benchmark sources of the harness by name: published benchmarks (``evidra.data.loaders``) and
synthetic ones generated on the fly (rendered documents, Tunnel-Vision-style and TRACER-style).

``synthetic_samples("tunnel.chain", out_dir, n=8, seed=0)`` writes the images under
``out_dir`` and returns the samples; the same name, n and seed give the same benchmark.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path

from evidra.data.synth.tracer import TASKS as TRACER_TASKS
from evidra.data.synth.tracer import generate_tracer
from evidra.data.synth.tunnel import TASKS as TUNNEL_TASKS
from evidra.data.synth.tunnel import generate_tunnel
from evidra.registry import Registry
from evidra.types import Sample

SyntheticSource = Callable[[Path, int, int, str], list[Sample]]  # (out_dir, n, seed, split)
SYNTHETIC: Registry[SyntheticSource] = Registry("synthetic benchmark")


def _documents(out: Path, n: int, seed: int, split: str) -> list[Sample]:
    """Rendered documents with gold boxes; ``n`` questions from enough 1-page documents."""
    from evidra.data.synth.documents import generate_documents

    n_docs = max(1, (n + 1) // 2)
    root = out / f"documents_{split}_{seed}"
    corpus = generate_documents(root, n_docs=n_docs, seed=seed, dpi=72, max_pages=1, unanswerable_per_doc=0)
    return list(corpus.samples(dataset="synth_documents"))[:n]


def _tunnel(task: str, out: Path, n: int, seed: int, split: str) -> list[Sample]:
    return generate_tunnel(out, task, n, seed=seed, split=split)


def _tracer(task: str, out: Path, n: int, seed: int, split: str) -> list[Sample]:
    return generate_tracer(out, task, n, seed=seed, split=split)


SYNTHETIC.add("documents", _documents)
for _task in TUNNEL_TASKS:
    SYNTHETIC.add(f"tunnel.{_task}", partial(_tunnel, _task))
for _task in TRACER_TASKS:
    SYNTHETIC.add(f"tracer.{_task}", partial(_tracer, _task))


def synthetic_samples(
    name: str, out_dir: str | Path, n: int, seed: int = 0, split: str = "test"
) -> list[Sample]:
    return SYNTHETIC.get(name)(Path(out_dir), n, seed, split)

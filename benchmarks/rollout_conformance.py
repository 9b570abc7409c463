"""Multimodal rollouts that never mismatch: randomized episodes on tiny Qwen2-VL, Qwen2.5-VL, Qwen3-VL.

Each episode runs through evidra's rollout loop and real environments: a VRAG-RL search over a
BM25 index of synthetic pages (a search inserts a page, a ``<bbox>`` a crop of the last image)
or a CAVE zoom into one page (each tool call inserts a crop), random boxes making crops of random
sizes, 1 to 6 images per context. A random script drives the turns so that tools are called; the
ids and log-probs of every turn come from the model (``evidra.rollout.scripted``). Every episode
then goes through the trainer's path and three checks (``evidra.rl.conformance``): image tokens
match the processor's grid and the vision tower's features, image by image; the trainer's
teacher-forced ids are the sampler's ids after the same contexts; the log-prob gap between the
sampler and the trainer's recomputation stays within the tolerance (float32 on CPU).

    OMP_NUM_THREADS=1 python benchmarks/rollout_conformance.py --episodes 10000
    OMP_NUM_THREADS=1 python benchmarks/rollout_conformance.py --episodes 10000 --minutes 7

The text path runs the same way with ``--families qwen2`` (a tiny text-only Qwen2 in multi-turn
key-value episodes, text observations); ``--backend vllm`` samples its free turns with a colocated
vLLM engine (the venv of ``make test-vllm``; vLLM's CPU kernels sum in another order, so give it
``--tolerance 1e-3``):

    OMP_NUM_THREADS=1 .venv-vllm/bin/python benchmarks/rollout_conformance.py --families qwen2 \\
        --backend vllm --tolerance 1e-3 --episodes 1000

``--minutes`` stops each family after that long (the rate and the time 10,000 episodes would take
are printed). ``--workers N`` runs the families' episodes in N processes, each family split into
N shards (shard k draws its episodes from seed + k); with N free cores it can finish up to N times
sooner (on cores already busy with other jobs it gains nothing):

    OMP_NUM_THREADS=1 python benchmarks/rollout_conformance.py --episodes 10000 --workers 2

The vision-language families run on the run's own tiny checkpoints
(``rl.conformance_run.conformance_model``: half the default tiny width; the checks count tokens
and compare log-probs, which no width changes). One line per family,
``RESULT family=<arch> episodes=<n> mismatches=<m>``, and last ``RESULT episodes=<n> mismatches=<m>``
over all families.
"""

from __future__ import annotations

import argparse
import multiprocessing
import tempfile
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

    from evidra.models.loading import VLM
    from evidra.rl.conformance import EpisodeCheck
    from evidra.rollout import GenerationBackend

FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")
TEXT_FAMILIES = ("qwen2",)  # the text path: a text-only policy, text observations


@dataclass
class Tally:
    """What one family's run saw."""

    episodes: int = 0
    mismatches: int = 0
    by_kind: Counter[str] = field(default_factory=Counter)
    images: Counter[int] = field(default_factory=Counter)
    policy_tokens: int = 0
    image_tokens: int = 0
    max_gap: float = 0.0
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0  # wall time (summed over shards when the family ran in several)
    cpu_seconds: float = 0.0  # this process's CPU time (summed likewise)

    def add(self, checks: Sequence[EpisodeCheck]) -> None:
        for c in checks:
            self.episodes += 1
            self.images[c.images] += 1
            self.policy_tokens += c.policy_tokens
            self.image_tokens += c.image_tokens
            if c.max_gap == c.max_gap:  # not nan: the episode was scored
                self.max_gap = max(self.max_gap, c.max_gap)
            if not c.ok:
                self.mismatches += 1
                self.by_kind.update(c.kinds)
                self.problems.extend(
                    f"episode {self.episodes - 1}: {kind}: {p}" for kind, p in c.problems[:2]
                )

    def merge(self, other: Tally, shard: int) -> None:
        """Add a shard's tally (its episode numbers are its own, so its problems say which shard)."""
        self.episodes += other.episodes
        self.mismatches += other.mismatches
        self.by_kind.update(other.by_kind)
        self.images.update(other.images)
        self.policy_tokens += other.policy_tokens
        self.image_tokens += other.image_tokens
        self.max_gap = max(self.max_gap, other.max_gap)
        self.problems.extend(f"shard {shard} {p}" for p in other.problems)
        self.seconds += other.seconds
        self.cpu_seconds += other.cpu_seconds


def model_path(arch: str, workdir: Path) -> Path:
    """The family's tiny checkpoint under ``workdir`` (built on first use)."""
    from evidra.models.references import resolve_model_ref
    from evidra.rl.conformance_run import conformance_model

    if arch in TEXT_FAMILIES:
        return resolve_model_ref(f"tiny:{arch}", tiny_cache=workdir / "models")
    return conformance_model(arch, workdir / "models")


def run_family(
    arch: str, workdir: Path, args: argparse.Namespace, shard: int = 0, episodes: int = 0
) -> Tally:
    """Run ``episodes`` (default ``--episodes``) of ``arch``, drawn from seed ``--seed + shard``."""
    from evidra.models.loading import load_vlm
    from evidra.rl.conformance_run import ConformanceSettings, conformance_batches, text_batches

    episodes, seed = episodes or args.episodes, args.seed + shard
    vlm = load_vlm(model_path(arch, workdir))
    settings = replace(ConformanceSettings(), tolerance=args.tolerance)
    if arch in TEXT_FAMILIES:
        sampler = _vllm(vlm) if args.backend == "vllm" else None
        batches = text_batches(vlm, episodes, seed=seed, settings=settings, sampler=sampler)
    else:
        pages = workdir / f"pages-{arch}-{shard}"
        batches = conformance_batches(vlm, pages, episodes, seed=seed, settings=settings)
    tally = Tally()
    start, cpu = time.perf_counter(), time.process_time()
    for checks in batches:
        tally.add(checks)
        tally.seconds = time.perf_counter() - start
        tally.cpu_seconds = time.process_time() - cpu
        if args.minutes and tally.seconds > args.minutes * 60:
            break
    return tally


def run_parallel(workdir: Path, args: argparse.Namespace) -> dict[str, Tally]:
    """Every family in ``--workers`` shards, all shards in a pool of ``--workers`` processes."""
    for arch in args.families:  # built once here, so no two shards build the same checkpoint
        model_path(arch, workdir)
    jobs = [
        (arch, shard, args.episodes // args.workers + (shard < args.episodes % args.workers))
        for arch in args.families
        for shard in range(args.workers)
    ]
    tallies = {arch: Tally() for arch in args.families}
    # fork: the workers inherit the loaded libraries (and this module, however it was imported)
    with ProcessPoolExecutor(args.workers, mp_context=multiprocessing.get_context("fork")) as pool:
        futures = [
            (arch, shard, pool.submit(run_family, arch, workdir, args, shard, n))
            for arch, shard, n in jobs
            if n
        ]
        for arch, shard, future in futures:
            tallies[arch].merge(future.result(), shard)
    return tallies


def _vllm(vlm: VLM) -> GenerationBackend:
    """A colocated vLLM engine on the policy's checkpoint (float32, as the trainer computes)."""
    from evidra.models.vllm_backend import VLLMBackend, VLLMConfig

    return VLLMBackend(vlm, VLLMConfig(max_model_len=4096, enforce_eager=True))


def report(arch: str, tally: Tally, episodes: int, workers: int = 1) -> None:
    rate = tally.episodes / tally.seconds if tally.seconds else 0.0
    hist = " ".join(f"{k}:{tally.images[k]}" for k in sorted(tally.images))
    kinds = " ".join(f"{k}={tally.by_kind[k]}" for k in ("images", "ids", "logprobs"))
    projected = episodes / rate if rate else float("inf")
    one = " on one worker" if workers > 1 else ""  # a family's shards' seconds, summed
    print(
        f"{arch}: {tally.episodes} episodes in {tally.seconds:.0f} s{one} ({rate:.2f} episodes/s; "
        f"{episodes} would take {projected / 60:.1f} min here{one})"
    )
    print(
        f"  images per context {hist}; {tally.image_tokens} image tokens, {tally.policy_tokens} policy "
        f"tokens; max |sampler - trainer| log-prob {tally.max_gap:.2e}; mismatches {kinds}"
    )
    cpu_rate = tally.episodes / tally.cpu_seconds if tally.cpu_seconds else 0.0
    print(f"  CPU {tally.cpu_seconds:.0f} s ({cpu_rate:.2f} episodes per CPU second)")
    for line in tally.problems[:5]:
        print(f"  {line}")
    print(f"RESULT family={arch} episodes={tally.episodes} mismatches={tally.mismatches}")


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--episodes", type=int, default=10_000, help="episodes per family")
    parser.add_argument("--families", nargs="+", default=list(FAMILIES), choices=FAMILIES + TEXT_FAMILIES)
    sampler_help = "what samples the text family's free turns (vllm: the venv of make test-vllm)"
    parser.add_argument("--backend", choices=("hf", "vllm"), default="hf", help=sampler_help)
    parser.add_argument(
        "--minutes", type=float, default=0.0, help="stop each family after this long (0: never)"
    )
    parser.add_argument("--tolerance", type=float, default=1e-4, help="largest |sampler - trainer| log-prob")
    parser.add_argument("--seed", type=int, default=0)
    workers_help = "processes; each family runs in this many shards (shard k uses seed --seed + k)"
    parser.add_argument("--workers", type=int, default=1, help=workers_help)
    args = parser.parse_args()
    if args.workers < 1:
        parser.error(f"--workers must be at least 1, got {args.workers}")
    if args.workers > 1 and args.backend == "vllm":
        parser.error(
            "--workers runs one process per shard; a vLLM engine takes the whole machine: use --workers 1"
        )
    torch.manual_seed(args.seed)
    total = Tally()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="evidra-conformance-") as tmp:
        if args.workers > 1:
            tallies = run_parallel(Path(tmp), args)
        else:
            tallies = {}
            for arch in args.families:
                tallies[arch] = run_family(arch, Path(tmp), args)
                report(arch, tallies[arch], args.episodes)
        for arch, tally in tallies.items():
            if args.workers > 1:
                report(arch, tally, args.episodes, args.workers)
            total.episodes += tally.episodes
            total.mismatches += tally.mismatches
    wall = time.perf_counter() - start
    # each family's episodes at its measured rate, its shards spread over the workers
    one_worker = sum(args.episodes * t.seconds / t.episodes if t.episodes else 0.0 for t in tallies.values())
    print(
        f"all families: {total.episodes} episodes in {wall:.0f} s with {args.workers} worker(s), "
        f"models included; {args.episodes} per family would take "
        f"{one_worker / args.workers / 60:.1f} min here"
    )
    print(f"RESULT episodes={total.episodes} mismatches={total.mismatches}")


if __name__ == "__main__":
    main()

"""Does evidra's machinery teach a model to read? A tiny Qwen2.5-VL on pages it has not seen.

Per seed: a tiny random Qwen2.5-VL is built from a config (``evidra.models.tiny``), trained
from scratch on the ``reading`` synthetic suite (``evidra.data.synth.reading``: a few large
labels and numbers, a table or a bar chart on small pages) with evidra's SFT (``SFTTrainer`` on
the LAT method's oracle chains of evidence), then with GRPO and LAT's own rewards (``RLTrainer``
with the registered ``lat`` method, recipe ``configs/tiny/lat.yaml``). Held-out pages (the
suite's ``test`` split: other layouts, numbers and label combinations) are answered greedily
before training, after SFT and after RL:

* ``acc``: the answer equals the number asked for (normalised exact match);
* ``iou50``: the answer's box overlaps the gold box with IoU >= 0.5 (on the right page).

    OMP_NUM_THREADS=2 python benchmarks/learning.py                # 3 seeds, the measured setting
    OMP_NUM_THREADS=1 python benchmarks/learning.py --quick        # a smoke run of a minute or two

It prints a table per phase (mean and spread over seeds), writes ``learning.png`` (held-out
numbers per phase, and the RL reward per step) and ``learning.json`` into ``--out``, and ends with
``RESULT heldout_acc_sft=<a> heldout_acc_rl=<b> heldout_iou50_sft=<c> heldout_iou50_rl=<d>
seeds=<n> minutes=<m>`` (means over seeds; minutes of wall time for the whole run).
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from evidra.core.config import load_config
from evidra.core.geometry import iou
from evidra.core.types import Sample
from evidra.data.synth.sources import synthetic_samples
from evidra.methods import build_task
from evidra.metrics.text import exact_match
from evidra.models.generation import SamplingParams
from evidra.models.loading import VLM, load_vlm
from evidra.models.tiny import build_tiny
from evidra.models.vision_warmup import warm_up_vision
from evidra.rl.run_config import RLConfig, SFTConfig
from evidra.rl.sft.finetune import SFTTrainer
from evidra.rl.tasks import Task
from evidra.rl.trainer import RLTrainer
from evidra.rollout import HFBackend, RolloutLimits, rollout

RECIPE = Path(__file__).parents[1] / "configs" / "tiny" / "lat.yaml"
PAGE = 168  # the suite's page side in pixels: 36 image tokens, no resize
PHASES = ("before", "sft", "rl")
WATCHED = ("reward/", "advantage/", "loss", "kl", "episode/length", "episode/truncated")


@dataclass(frozen=True)
class Setting:
    """Sizes of one run; ``--quick`` shrinks them to a smoke test."""

    seeds: int = 3
    source: str = "reading.grid"  # the pages (evidra.data.synth.reading): glyphs inside image tokens
    hidden: int = 128
    layers: int = 4  # of the language model (the vision tower has two)
    train: int = 4096  # training pages (SFT examples and RL prompts): about one pass, nothing memorised
    test: int = 32  # held-out pages
    vision_steps: int = 150  # the tower's glyph warm-up before SFT (0: none, the tower trains in SFT)
    vision_batch: int = 16
    sft_steps: int = 600
    sft_batch: int = 8
    sft_lr: float = 2e-3
    rl_steps: int = 8
    rl_batch: int = 4
    group: int = 4
    rl_lr: float = 2e-4
    temperature: float = 1.0
    max_new_tokens: int = 176  # the oracle chain of evidence is about 150 tokens


QUICK = Setting(
    seeds=1,
    hidden=64,
    layers=2,
    train=16,
    test=6,
    vision_steps=3,
    sft_steps=4,
    sft_batch=4,
    rl_steps=2,
    rl_batch=2,
    group=2,
)


@dataclass(frozen=True)
class Scores:
    acc: float
    iou50: float
    parsed: float  # answers that parse (both tags, an answer box)


@dataclass
class SeedRun:
    seed: int
    scores: dict[str, Scores] = field(default_factory=dict)
    vision_loss: list[float] = field(default_factory=list)
    sft_loss: list[float] = field(default_factory=list)
    rl_reward: list[float] = field(default_factory=list)
    # per RL step: reward spread and components, advantages, loss and KL (why RL moved, or not)
    rl_metrics: list[dict[str, float]] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)


def held_out_scores(vlm: VLM, task: Task, samples: Sequence[Sample], max_new_tokens: int) -> Scores:
    """Greedy answers to ``samples`` through the task's environment: accuracy and IoU >= 0.5 rate."""
    params = SamplingParams(max_new_tokens=max_new_tokens, temperature=0)
    limits = RolloutLimits(max_turns=1, max_new_tokens=max_new_tokens, max_response_tokens=max_new_tokens)
    vlm.model.eval()
    episodes = rollout(HFBackend(vlm), task.make_env, samples, 1, params, limits)
    acc = hit = ok = 0
    for episode in episodes:
        sample = episode.sample
        parsed = task.parse(episode.trajectory.texts[-1] if episode.trajectory.texts else "")
        acc += parsed.answer is not None and exact_match(parsed.answer, sample.answers[0]) == 1.0
        gold = sample.gold_boxes[0]
        page_ok = parsed.answer_page == sample.page_index(gold.page_id)
        box = parsed.answer_box
        hit += box is not None and page_ok and iou(box, gold.box) >= 0.5
        ok += box is not None and not parsed.errors
    n = max(1, len(episodes))
    return Scores(acc / n, hit / n, ok / n)


def _overrides(s: Setting, data: Path, seed: int) -> list[str]:
    """What both stages change in the tiny LAT recipe: the data, float32, full fine-tuning (of the
    language model and merger once the tower is warmed; of every weight without the warm-up)."""
    return [
        f"model.freeze_vision={str(s.vision_steps > 0).lower()}",
        f"data.synthetic=[{s.source}]",
        f"data.path={data}",
        f"data.size={s.train}",
        f"data.seed={seed}",
        "model.cold_start.steps=0",  # the benchmark runs its own SFT stage, measured between phases
        "model.dtype=float32",
        "model.lora.enabled=false",
        "model.gradient_checkpointing=false",
        f"model.min_pixels={PAGE * PAGE}",
        f"model.max_pixels={PAGE * PAGE}",
        f"run.seed={seed}",
        "run.save_every=0",
    ]


def _sft(s: Setting, model: Path, out: Path, common: list[str], task: Task, run: SeedRun) -> SFTTrainer:
    cfg = load_config(
        SFTConfig,
        RECIPE,
        [
            *common,
            f"model.path={model}",
            f"run.output_dir={out / 'sft'}",
            f"run.steps={s.sft_steps}",
            f"run.batch_size={s.sft_batch}",
            f"run.micro_batch_size={s.sft_batch}",
            f"optim.lr={s.sft_lr}",
            "optim.schedule=cosine",
            "optim.warmup_steps=5",
        ],
    )
    trainer = SFTTrainer(cfg, task=task)
    run.sft_loss = [m["loss"] for m in trainer.train()]
    return trainer


def _rl(s: Setting, model: Path, out: Path, common: list[str], task: Task, run: SeedRun) -> RLTrainer:
    cfg = load_config(
        RLConfig,
        RECIPE,
        [
            *common,
            f"model.path={model}",
            f"run.output_dir={out / 'rl'}",
            f"run.steps={s.rl_steps}",
            f"run.batch_size={s.rl_batch}",
            f"run.micro_batch_size={s.rl_batch * s.group}",
            f"rollout.group_size={s.group}",
            f"rollout.temperature={s.temperature}",
            f"rollout.max_new_tokens={s.max_new_tokens}",
            f"rollout.max_response_tokens={s.max_new_tokens}",
            f"optim.lr={s.rl_lr}",
            "optim.schedule=constant",
            "algo.mini_batch_size=0",
        ],
    )
    trainer = RLTrainer(cfg, task=task)
    for m in trainer.train():
        run.rl_reward.append(m.get("reward/mean", float("nan")))
        run.rl_metrics.append({k: float(v) for k, v in m.items() if k.startswith(WATCHED)})
    return trainer


def run_seed(s: Setting, seed: int, root: Path, test: Sequence[Sample], log: logging.Logger) -> SeedRun:
    """Build, score, SFT, score, GRPO, score: one seed."""
    run = SeedRun(seed)
    out = root / f"seed{seed}"
    task = build_task({"name": "lat"})
    clock = time.perf_counter()
    model = build_tiny(
        "qwen2_5_vl",
        out / "model",
        seed=seed,
        hidden=s.hidden,
        layers=s.layers,
        min_pixels=PAGE * PAGE,
        max_pixels=PAGE * PAGE,
        rope_theta=1e4,
    )
    base = load_vlm(model)
    run.scores["before"] = held_out_scores(base, task, test, s.max_new_tokens)
    log.info("seed %d before training: %s", seed, run.scores["before"])
    if s.vision_steps:
        pages = [
            p
            for x in synthetic_samples(s.source, root / "data", s.train, seed=seed, split="train")
            for p in x.pages
        ]
        warm_start = time.perf_counter()
        run.vision_loss = warm_up_vision(
            base, pages, steps=s.vision_steps, batch_size=s.vision_batch, seed=seed
        )
        base.model.save_pretrained(model)
        run.seconds["vision"] = time.perf_counter() - warm_start
        log.info(
            "seed %d vision warm-up: loss %.3f -> %.3f (%.0f s)",
            seed,
            run.vision_loss[0],
            run.vision_loss[-1],
            run.seconds["vision"],
        )
    common = _overrides(s, root / "data", seed)
    sft = _sft(s, model, out, common, task, run)
    sft_model = sft.export(out / "sft-model")
    run.scores["sft"] = held_out_scores(sft.vlm, task, test, s.max_new_tokens)
    run.seconds["sft"] = time.perf_counter() - clock
    log.info("seed %d after SFT: %s (%.0f s)", seed, run.scores["sft"], run.seconds["sft"])
    clock = time.perf_counter()
    rl = _rl(s, sft_model, out, common, task, run)
    run.scores["rl"] = held_out_scores(rl.vlm, task, test, s.max_new_tokens)
    run.seconds["rl"] = time.perf_counter() - clock
    log.info("seed %d after RL: %s (%.0f s)", seed, run.scores["rl"], run.seconds["rl"])
    return run


def _mean_spread(values: Sequence[float]) -> tuple[float, float]:
    """Mean and spread (max - min) over seeds."""
    return statistics.fmean(values), max(values) - min(values)


def table(runs: Sequence[SeedRun]) -> list[str]:
    lines = [
        "| phase | acc mean | acc spread | iou50 mean | iou50 spread | parsed | per seed acc/iou50 |",
        "|---|---|---|---|---|---|---|",
    ]
    for phase in PHASES:
        got = [r.scores[phase] for r in runs]
        acc, acc_spread = _mean_spread([g.acc for g in got])
        hit, hit_spread = _mean_spread([g.iou50 for g in got])
        parsed = statistics.fmean(g.parsed for g in got)
        per = " ".join(f"{g.acc:.2f}/{g.iou50:.2f}" for g in got)
        lines.append(
            f"| {phase} | {acc:.3f} | {acc_spread:.3f} | {hit:.3f} | {hit_spread:.3f} | "
            f"{parsed:.2f} | {per} |"
        )
    return lines


def plot(runs: Sequence[SeedRun], path: Path) -> Path | None:
    """Held-out accuracy and IoU50 per phase (one line per seed), and the RL reward per step."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for r in runs:
        left.plot(PHASES, [r.scores[p].acc for p in PHASES], "o-", color="tab:blue", alpha=0.6)
        left.plot(PHASES, [r.scores[p].iou50 for p in PHASES], "s--", color="tab:orange", alpha=0.6)
        right.plot(range(1, len(r.rl_reward) + 1), r.rl_reward, label=f"seed {r.seed}")
    left.plot([], [], "o-", color="tab:blue", label="accuracy")
    left.plot([], [], "s--", color="tab:orange", label="box IoU >= 0.5")
    left.set(title="held-out pages", ylim=(-0.02, 1.02), ylabel="rate")
    left.legend()
    right.set(title="GRPO with LAT's rewards", xlabel="RL step", ylabel="mean reward (-1..4)")
    right.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _setting(args: argparse.Namespace) -> Setting:
    base = QUICK if args.quick else Setting()
    names = ("seeds", "sft_steps", "rl_steps", "hidden", "train", "vision_steps", "source")
    changes = {k: getattr(args, k) for k in names if getattr(args, k) is not None}
    return Setting(**{**asdict(base), **changes})


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="a smoke run: one seed, a few steps")
    p.add_argument("--seeds", type=int, help="seeds (default 3)")
    p.add_argument("--sft-steps", dest="sft_steps", type=int)
    p.add_argument("--rl-steps", dest="rl_steps", type=int)
    p.add_argument("--hidden", type=int, help="the tiny model's width (default 128)")
    p.add_argument("--train", type=int, help="training pages (default 4096)")
    p.add_argument(
        "--source", help="the pages: reading.grid (default), reading, reading.one, reading.grid.one"
    )
    p.add_argument("--vision-steps", dest="vision_steps", type=int, help="glyph warm-up steps (0: none)")
    p.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's)")
    p.add_argument("--out", default="", help="folder for learning.png / .json (default: a temporary one)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    log = logging.getLogger("learning")
    if args.threads:
        torch.set_num_threads(args.threads)
    s = _setting(args)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="evidra-learning-") as tmp:
        out = Path(args.out or tmp)
        out.mkdir(parents=True, exist_ok=True)
        test = synthetic_samples(s.source, Path(tmp) / "heldout", s.test, seed=0, split="test")
        runs = [run_seed(s, seed, Path(tmp), test, log) for seed in range(s.seeds)]
        minutes = (time.perf_counter() - start) / 60
        print(f"setting: {s}")
        print(f"held-out pages: {len(test)}; torch threads: {torch.get_num_threads()}")
        print("\n".join(table(runs)))
        for r in runs:
            print(
                f"seed {r.seed}: sft loss {r.sft_loss[0]:.3f} -> {r.sft_loss[-1]:.3f}; rl reward per step "
                + " ".join(f"{x:.2f}" for x in r.rl_reward)
            )
        image = plot(runs, out / "learning.png")
        report: dict[str, Any] = {"setting": asdict(s), "minutes": minutes, "runs": [asdict(r) for r in runs]}
        (out / "learning.json").write_text(json.dumps(report, indent=2))
        print(f"wrote {out / 'learning.json'}" + (f" and {image}" if image else " (no matplotlib: no plot)"))
    means = {p: _mean_spread([r.scores[p].acc for r in runs])[0] for p in PHASES}
    hits = {p: _mean_spread([r.scores[p].iou50 for r in runs])[0] for p in PHASES}
    print(
        f"RESULT heldout_acc_sft={means['sft']:.3f} heldout_acc_rl={means['rl']:.3f} "
        f"heldout_iou50_sft={hits['sft']:.3f} heldout_iou50_rl={hits['rl']:.3f} "
        f"seeds={s.seeds} minutes={minutes:.1f}"
    )


if __name__ == "__main__":
    main()

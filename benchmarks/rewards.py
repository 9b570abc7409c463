"""Reward scoring throughput vs generation: is scoring a group cheap next to producing it?

Scores 64 synthetic completions per paper reward (rule-based parts: LAT accuracy/ground/format
+ a constant-similarity step check, EVisRAG's RS-GRPO channels, VRAG-RL with the rule judge,
Lang2Act stage 2), then times generating 64 completions of 64 tokens with the tiny Qwen2.5-VL
in the same run, and prints completions scored per second and the ratio. The last line is
``RESULT min_generation_vs_scoring=<x> slowest=<reward>``: how many times longer generating a
group takes than scoring it, for the slowest reward to score.

    OMP_NUM_THREADS=1 python benchmarks/rewards.py
"""

from __future__ import annotations

import random
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from evidra.core.types import Box, EvidenceBox, Page, Parsed, Sample
from evidra.methods.evisrag.reward import EvisragReward
from evidra.methods.lang2act.reward import Lang2ActReward
from evidra.methods.lat.reward import LatReward
from evidra.methods.vragrl.reward import VragRLReward

N = 64


class _ConstantSimilarity:
    """Stands in for ColQwen2: the rule-based cost of LAT's step check without a model."""

    def score_steps(self, queries: Sequence[Any]) -> list[float]:
        return [0.5] * len(queries)


def _completions(rng: random.Random) -> dict[str, list[str]]:
    def box() -> str:
        x, y = rng.randint(0, 500), rng.randint(0, 700)
        return f'{{"bbox_2d": [{x}, {y}, {x + 120}, {y + 40}], "Image_index": 1}}'

    def year() -> int:
        return rng.randint(1984, 1990)

    lat = [
        f"<think>The table lists the year. Bounding box: {box()}. It was founded then. "
        f"Bounding box: {box()}.</think><answer>{rng.choice(['1987', '1990', 'No answer'])}</answer>"
        for _ in range(N)
    ]
    evisrag = [
        f"<observe>A page with a table.</observe><evidence>[1]: founded in {year()}</evidence>"
        f"<think>so the year follows</think><answer>{year()}</answer>"
        for _ in range(N)
    ]
    vrag = [
        f"<think>search</think><search>orion founding</search><think>found</think><answer>{year()}</answer>"
        for _ in range(N)
    ]
    tool = '<tool name="locate_text" args="Image 1: founding">row</tool>'
    lang2act = [
        f"<think>Image 1 shows the table</think><description>{tool}</description><answer>{year()}</answer>"
        for _ in range(N)
    ]
    return {"lat": lat, "evisrag": evisrag, "vragrl": vrag, "lang2act": lang2act}


def _sample(tmp: Path) -> Sample:
    from PIL import Image

    path = tmp / "page.png"
    Image.new("RGB", (850, 1100), "white").save(path)
    page = Page(id="doc-p0001", image_path=str(path), width=850, height=1100)
    gold = (EvidenceBox(page.id, Box(100, 200, 260, 240)),)
    return Sample(
        id="s",
        question="When was Orion founded?",
        answers=("1987",),
        pages=(page,),
        gold_pages=(page.id,),
        gold_boxes=gold,
        gold_evidence={page.id: "founded in 1987"},
    )


def _time(fn: Callable[[], object], repeats: int = 5) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def _generation_seconds(tmp: Path) -> float:
    import torch

    from evidra.core.types import Message
    from evidra.models.generation import SamplingParams, generate
    from evidra.models.loading import load_vlm
    from evidra.models.tiny import build_tiny

    torch.set_num_threads(1)
    vlm = load_vlm(build_tiny("qwen2_5_vl", tmp / "model"))
    chats = [[Message.text("user", f"When was project {i % 8} founded?")] for i in range(N)]
    params = SamplingParams(max_new_tokens=64, temperature=1.0, seed=0)
    return _time(lambda: generate(vlm, chats, params), repeats=2)


def main() -> None:
    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as tmp:
        sample = _sample(Path(tmp))
        texts = _completions(rng)
        rewards: dict[str, Any] = {
            "lat": LatReward(similarity=_ConstantSimilarity()),
            "evisrag": EvisragReward(),
            "vragrl": VragRLReward(),
            "lang2act": Lang2ActReward(),
        }
        rows = []
        for name, reward in rewards.items():
            parsed = [Parsed(text=t) for t in texts[name]]
            if name == "lat":
                seconds = _time(lambda r=reward, p=parsed: r.score_group(p, sample))
            else:
                seconds = _time(lambda r=reward, p=parsed: [r(x, sample) for x in p])
            rows.append((name, seconds))
        gen = _generation_seconds(Path(tmp))
    print(f"{N} completions per group; generation: tiny Qwen2.5-VL, 64 new tokens each, 1 thread\n")
    print(f"{'reward':<10} {'ms / group':>11} {'completions/s':>14} {'generation / scoring':>22}")
    for name, seconds in rows:
        print(f"{name:<10} {seconds * 1000:>11.2f} {N / seconds:>14.0f} {gen / seconds:>21.0f}x")
    print(f"\ngenerating the group took {gen * 1000:.0f} ms")
    slowest, seconds = max(rows, key=lambda row: row[1])
    print(f"RESULT min_generation_vs_scoring={gen / seconds:.0f} slowest={slowest}")


if __name__ == "__main__":
    main()

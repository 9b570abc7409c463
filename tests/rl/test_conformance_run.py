"""Randomized multimodal episodes on tiny Qwen2-VL, Qwen2.5-VL and Qwen3-VL, and the text path:
zero mismatches."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from evidra.models.loading import load_vlm
from evidra.models.tiny import build_tiny
from evidra.rl.conformance_run import ConformanceSettings, conformance_batches, text_batches

FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")


def _run(vlm: Any, folder: Path, episodes: int, seed: int, settings: ConformanceSettings) -> list[Any]:
    return [
        c for batch in conformance_batches(vlm, folder, episodes, seed=seed, settings=settings) for c in batch
    ]


@pytest.mark.parametrize("arch", FAMILIES)
def test_a_handful_of_episodes_never_mismatch(tiny_vlms: dict[str, Any], tmp_path: Path, arch: str) -> None:
    small = ConformanceSettings(pages=6, samples_per_batch=1, max_images=3, max_turns=4)
    checks = _run(tiny_vlms[arch], tmp_path, 4, 1, small)  # a search group of 2, then a zoom group of 2
    assert len(checks) == 4
    assert [c.problems for c in checks] == [()] * 4
    assert {c.images for c in checks} <= {1, 2, 3} and sum(c.images for c in checks) > 4
    assert all(c.policy_tokens > 0 for c in checks)


@pytest.mark.slow
@pytest.mark.parametrize("arch", FAMILIES)
def test_a_hundred_episodes_per_family_never_mismatch(
    tiny_vlms: dict[str, Any], tmp_path: Path, arch: str
) -> None:
    checks = _run(tiny_vlms[arch], tmp_path, 100, 7, ConformanceSettings(samples_per_batch=4))
    images = Counter(c.images for c in checks)
    assert len(checks) == 100
    failed = [(i, c.problems) for i, c in enumerate(checks) if not c.ok]
    assert failed == []
    assert set(images) == set(range(1, 7))  # every context size from 1 to 6 images was seen


def test_the_text_path_never_mismatches(tmp_path: Path) -> None:
    vlm = load_vlm(build_tiny("qwen2", tmp_path / "qwen2"))
    small = ConformanceSettings(samples_per_batch=2, max_turns=4)
    checks = [c for batch in text_batches(vlm, 4, seed=3, settings=small) for c in batch]
    assert len(checks) == 4
    assert [c.problems for c in checks] == [()] * 4
    assert all(c.images == 0 and c.policy_tokens > 0 for c in checks)

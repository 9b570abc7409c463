"""TRACER-style scenarios: deterministic per seed, split-isolated, answers consistent with pixels."""

from __future__ import annotations

import hashlib
import string
from pathlib import Path

import pytest
from PIL import Image, ImageChops

from evidra.core.errors import InvalidInputError
from evidra.data.synth._draw import COLORS
from evidra.data.synth.tracer import bezier, crop_view, find, follow, generate_tracer

TASKS = ["vjump", "trace", "match", "subimage"]


def _digest(samples: list) -> str:
    return hashlib.sha256(
        b"".join(Path(p.image_path).read_bytes() for s in samples for p in s.pages)
    ).hexdigest()


@pytest.mark.parametrize("task", TASKS)
def test_deterministic_and_isolated(tmp_path: Path, task: str) -> None:
    a = generate_tracer(tmp_path / "a", task, 3, seed=7)
    b = generate_tracer(tmp_path / "b", task, 3, seed=7)
    assert _digest(a) == _digest(b) and [s.answers for s in a] == [s.answers for s in b]
    assert _digest(a) != _digest(generate_tracer(tmp_path / "a", task, 3, seed=7, split="test"))
    assert _digest(a) != _digest(generate_tracer(tmp_path / "a", task, 3, seed=8))
    s = a[0]
    assert s.extras["perception"] and s.gold_evidence[s.pages[-1].id] == s.extras["perception"]
    assert "own construction" in s.extras["construction"]


def test_follow_hand_case() -> None:
    colors = ["red", "blue", "red", "blue"]
    arrows = [1, 2, 3, 0]
    # A -arrow-> B -color-> D -arrow-> A
    assert follow(["arrow", "color", "arrow"], 0, arrows, colors) == [0, 1, 3, 0]


def test_vjump_answer_and_node_colours(tmp_path: Path) -> None:
    from evidra.data.synth.tracer import _clearance

    for s in generate_tracer(tmp_path, "vjump", 5, seed=1):
        meta = s.extras["meta"]
        slots = meta["slots"]
        for i, j in enumerate(meta["arrows"]):  # no arrow runs over a third node
            assert all(
                _clearance(slots[i], slots[j], slots[k]) > 30 for k in range(len(slots)) if k not in (i, j)
            )
        path = follow(meta["rules"], meta["path"][0], meta["arrows"], meta["colors"])
        assert string.ascii_uppercase[path[-1]] == s.answers[0]
        with Image.open(s.pages[0].image_path) as im:
            for k, (x, y) in enumerate(meta["slots"]):  # a node's rim shows its colour
                assert im.convert("RGB").getpixel((x + 15, y)) == COLORS[meta["colors"][k]]


def test_trace_curve_ends_at_the_labelled_number(tmp_path: Path) -> None:
    for s in generate_tracer(tmp_path, "trace", 5, seed=2):
        meta = s.extras["meta"]
        curve = meta["curves"][meta["query"]]
        end = bezier(curve["control"], 1.0)
        assert end == (480.0, meta["ends"][int(s.answers[0]) - 1])
        assert curve["color"] in s.extras["perception"]
        with Image.open(s.pages[0].image_path) as im:
            x, y = bezier(curve["control"], 0.995)  # just before the end: ink of some curve
            assert im.convert("RGB").getpixel((round(x), round(y))) != (255, 255, 255)


def test_match_labels_agree_with_grid(tmp_path: Path) -> None:
    samples = generate_tracer(tmp_path, "match", 10, seed=3)
    assert {s.answers[0] for s in samples} == {"yes", "no"}
    for s in samples:
        meta = s.extras["meta"]
        assert bool(find(meta["grid"], meta["template"])) == (s.answers[0] == "yes")
    assert find([[0, 1, 2], [3, 0, 1], [2, 3, 0]], [[0, 1], [3, 0]]) == [(0, 0), (1, 1)]


def test_subimage_candidate_is_the_stated_crop(tmp_path: Path) -> None:
    samples = generate_tracer(tmp_path, "subimage", 8, seed=4)
    assert {s.answers[0] for s in samples} == {"yes", "no"}
    for s in samples:
        meta = s.extras["meta"]
        with Image.open(s.pages[0].image_path) as src, Image.open(s.pages[1].image_path) as cand:
            again = crop_view(src.convert("RGB"), tuple(meta["box"]), meta["angle"], meta["scale"])
            same = ImageChops.difference(again, cand.convert("RGB")).getbbox() is None
        assert same == (s.answers[0] == "yes")


def test_unknown_scenario() -> None:
    with pytest.raises(InvalidInputError, match="vjump"):
        generate_tracer("/tmp", "maze", 1)

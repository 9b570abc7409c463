"""The reading probe: its pages say what their answers say, its labels cover only the answer,
and a case the model can read (a white or black page) is learnt by its training loop."""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).parents[1] / "benchmarks" / "reading_probe.py"


def _probe() -> ModuleType:
    spec = importlib.util.spec_from_file_location("reading_probe", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["reading_probe"] = module
    spec.loader.exec_module(module)
    return module


def test_every_case_draws_a_page_of_the_probe_size_and_a_two_digit_answer() -> None:
    probe = _probe()
    for case, draw in probe.CASES.items():
        image, answer = draw(random.Random(0))
        assert image.size == (probe.SIDE, probe.SIDE), case
        assert len(answer) == 2 and answer.isdigit(), (case, answer)


def test_shade_answer_names_the_colour_and_digits_are_drawn_where_the_case_says() -> None:
    probe = _probe()
    for seed in range(8):
        image, answer = probe.shade(random.Random(seed))
        assert image.getpixel((0, 0)) == ((255, 255, 255) if answer == "11" else (0, 0, 0))
        page, number = probe.cell_digits(random.Random(seed))
        ink = [(x, y) for x in range(probe.SIDE) for y in range(probe.SIDE) if page.getpixel((x, y))[0] < 128]
        rows = {y // probe.CELL for _, y in ink}
        cols = {x // probe.CELL for x, _ in ink}
        assert len(rows) == 1 and len(cols) == 2, (seed, number, rows, cols)  # one row, one cell per digit


def test_labels_cover_the_answer_and_its_end_token_only(tmp_path: Path) -> None:
    from evidra.models.loading import load_vlm
    from evidra.models.tiny import build_tiny

    probe = _probe()
    side = probe.SIDE * probe.SIDE
    vlm = load_vlm(build_tiny("qwen2_5_vl", tmp_path / "m", min_pixels=side, max_pixels=side))
    pages = [probe.cell_digits(random.Random(k)) for k in range(3)]
    batch = probe.encode(vlm, pages)
    for row, (_, number) in zip(batch["labels"], pages, strict=True):
        kept = row[row != -100].tolist()
        assert vlm.tokenizer.decode(kept) == f"{number}<|im_end|>"


@pytest.mark.slow
def test_a_case_the_model_can_read_is_learnt(tmp_path: Path) -> None:
    probe = _probe()
    acc, loss, _ = probe.probe("shade", steps=40, every=40, batch=8, lr=2e-3, folder=tmp_path)
    assert acc == 1.0 and loss < 0.1

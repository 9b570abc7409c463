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


def test_a_warmed_tower_is_frozen_and_its_pages_carry_the_digits_drawn(tmp_path: Path) -> None:
    from evidra.models.loading import load_vlm
    from evidra.models.tiny import build_tiny

    probe = _probe()
    words: list = []
    _, number = probe.cell_digits(random.Random(3), words)
    assert "".join(w.text for w in words) == number
    assert all(probe.CELL * 0 <= w.box.x1 < w.box.x2 <= probe.SIDE for w in words)
    side = probe.SIDE * probe.SIDE
    vlm = load_vlm(build_tiny("qwen2_5_vl", tmp_path / "m", min_pixels=side, max_pixels=side))
    probe.warm_and_freeze(vlm, "cell_digits", 2, tmp_path)
    assert not any(p.requires_grad for p in vlm.model.model.visual.parameters())
    assert any(p.requires_grad for p in vlm.model.parameters())


@pytest.mark.learning  # about two minutes: a warmed, frozen tower under a language model that learns to copy
def test_two_digits_in_their_cells_are_read_over_a_warmed_tower(tmp_path: Path) -> None:
    probe = _probe()
    acc, _, _ = probe.probe(
        "cell_digits", steps=200, every=200, batch=16, lr=2e-3, folder=tmp_path, warmup=150
    )
    assert acc > 0.1  # chance is 0.011; without the warm-up 0.010 after 300 steps


def test_the_prompt_names_the_label_and_puts_the_question_where_asked() -> None:
    probe = _probe()
    image, number = probe.grid_fonts(random.Random(5))
    label = image.info["label"]
    assert label in probe.LABELS and len(number) == 2
    plain = probe.Prompt().chat(image)[0]["content"]
    assert plain == [{"type": "image"}, {"type": "text", "text": "What number?"}]
    named = probe.Prompt(ask_label=True, question_first=True).chat(image)[0]["content"]
    assert named == [{"type": "text", "text": f"What number is next to {label}?"}, {"type": "image"}]
    blank, _ = probe.cell_digits(random.Random(5))  # no label drawn: the plain question
    assert probe.Prompt(ask_label=True).chat(blank)[0]["content"][1]["text"] == "What number?"


def test_grid_fonts_pages_carry_the_label_and_the_number_as_words() -> None:
    probe = _probe()
    for seed in range(6):
        words: list = []
        image, number = probe.grid_fonts(random.Random(seed), words)
        assert [w.text for w in words] == [image.info["label"], number]
        assert all(0 <= w.box.x1 < w.box.x2 <= probe.SIDE for w in words)

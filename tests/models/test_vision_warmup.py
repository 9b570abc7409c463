"""The vision tower's glyph warm-up: per-patch character targets from a page's text layer, worked
out by hand, and a tiny tower that learns them."""

from __future__ import annotations

from pathlib import Path

import pytest

from evidra.core.errors import InvalidInputError
from evidra.core.types import Box, Page, Word
from evidra.data.synth.reading import generate_reading
from evidra.models.loading import load_vlm
from evidra.models.tiny import build_tiny
from evidra.models.vision_warmup import (
    ALPHABET,
    BLANK,
    SLOTS,
    Grid,
    char_centres,
    char_class,
    n_classes,
    token_targets,
    warm_up_vision,
)


def _page(side: int, *words: Word) -> Page:
    return Page("p1", "unused.png", side, side, "p.png", 1, tuple(words))


def test_each_character_gets_an_even_share_of_its_word() -> None:
    page = _page(
        56, Word("AB", Box(0, 0, 28, 14)), Word("7", Box(30, 30, 40, 50)), Word(" ", Box(0, 0, 5, 5))
    )
    assert char_centres(page) == [("A", 7.0, 7.0), ("B", 21.0, 7.0), ("7", 35.0, 40.0)]


def test_classes_are_blank_the_alphabet_and_one_for_anything_else() -> None:
    assert char_class("0") == 1 and char_class("Z") == len(ALPHABET) and char_class("z") == len(ALPHABET)
    assert char_class("%") == len(ALPHABET) + 1 == n_classes() - 1 and BLANK == 0


def test_each_token_reads_its_characters_left_to_right_then_blanks() -> None:
    # 56 px page, 14 px patches, 2 x 2 merge: 2 x 2 merged tokens of 28 px, three slots each
    page = _page(56, Word("BA", Box(0, 0, 28, 14)), Word("7", Box(30, 30, 40, 50)))
    targets = token_targets(page, Grid(patch=14, merge=2, rows=4, cols=4))
    a, b, seven = char_class("A"), char_class("B"), char_class("7")
    # token (0,0) holds B at x 7 and A at x 21; token (1,1) the 7's centre (35, 40)
    assert targets == [b, a, BLANK, *[BLANK] * 6, seven, BLANK, BLANK]
    assert len(targets) == 4 * SLOTS


def test_a_page_seen_smaller_scales_its_centres() -> None:
    page = _page(112, Word("A", Box(60, 60, 80, 80)))  # centre (70, 70) of 112 px is (35, 35) of 56 px
    targets = token_targets(page, Grid(patch=14, merge=2, rows=4, cols=4))
    assert targets.index(char_class("A")) == 3 * SLOTS and targets.count(BLANK) == 4 * SLOTS - 1


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny(
        "qwen2_5_vl", tmp_path_factory.mktemp("tiny") / "m", min_pixels=112 * 112, max_pixels=112 * 112
    )


def test_pages_without_a_text_layer_are_refused_in_one_line(tiny: Path) -> None:
    vlm = load_vlm(tiny)
    with pytest.raises(InvalidInputError, match=r"no page has a text layer .*data\.synthetic=\[reading\]"):
        warm_up_vision(vlm, [_page(56)], steps=1)


def test_a_text_only_model_is_refused_in_one_line(tmp_path: Path) -> None:
    vlm = load_vlm(build_tiny("qwen2", tmp_path / "text"))
    with pytest.raises(InvalidInputError, match=r"no vision tower"):
        warm_up_vision(vlm, [_page(56, Word("A", Box(0, 0, 9, 9)))], steps=1)


def test_the_tower_learns_the_characters_and_nothing_else_changes(tiny: Path, tmp_path: Path) -> None:
    import torch

    pages = [p for s in generate_reading(tmp_path / "pages", 12, seed=3, size=112) for p in s.pages]
    vlm = load_vlm(tiny)
    before = {k: v.clone() for k, v in vlm.model.state_dict().items()}
    losses = warm_up_vision(vlm, pages, steps=25, batch_size=4, lr=3e-3)
    assert len(losses) == 25 and sum(losses[-5:]) / 5 < 0.6 * sum(losses[:5]) / 5
    after = vlm.model.state_dict()
    moved = {k for k in before if not torch.equal(before[k], after[k])}
    assert moved and all("visual" in k for k in moved)

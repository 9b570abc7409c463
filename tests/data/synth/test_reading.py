"""The reading suite: deterministic pages whose gold boxes hold ink and the answer's word."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from evidra.core.errors import InvalidInputError
from evidra.core.geometry import iou
from evidra.core.types import Box, Sample
from evidra.data.synth.reading import KINDS, LABELS, generate_reading
from evidra.data.synth.sources import SYNTHETIC, mixture, synthetic_samples


@pytest.fixture(scope="module", params=[False, True], ids=["free", "grid"])
def pages(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> list[Sample]:
    grid = bool(request.param)
    return generate_reading(tmp_path_factory.mktemp("reading"), 12, seed=3, split="train", grid=grid)


def _ink(path: str, box: Box) -> float:
    """Share of dark pixels inside ``box``."""
    gray = np.asarray(Image.open(path).convert("L"), dtype=np.float32)
    crop = gray[int(box.y1) : int(box.y2) + 1, int(box.x1) : int(box.x2) + 1]
    return float((crop < 128).mean()) if crop.size else 0.0


def test_every_kind_asks_for_a_number_written_inside_its_gold_box(pages: list[Sample]) -> None:
    assert {s.extras["kind"] for s in pages} == set(KINDS)
    for s in pages:
        page, gold = s.pages[0], s.gold_boxes[0].box
        answer = s.answers[0]
        assert answer.isdigit() and 10 <= int(answer) <= 99
        assert any(label in s.question for label in LABELS)
        # the text layer holds the answer inside its gold box, and the label the question names
        inside = [w.text for w in page.words if iou(w.box, gold) > 0.9]
        assert inside == [answer], (s.id, inside)
        label = next(label for label in LABELS if label in s.question)
        assert label in {w.text for w in page.words}
        assert _ink(page.image_path, gold) > 0.05  # the number is drawn where its box says
        evidence = s.evidence_box
        assert evidence is not None and evidence.page_id == page.id
        b = evidence.box
        assert b.x1 <= gold.x1 and b.y1 <= gold.y1 and b.x2 >= gold.x2 and b.y2 >= gold.y2
        assert s.gold_evidence[page.id] == f"{label} {answer}"
        assert b.x1 >= 0 and b.x2 <= page.width and b.y1 >= 0 and b.y2 <= page.height


def test_same_seed_same_pages_and_test_split_differs(tmp_path: Path) -> None:
    pages = generate_reading(tmp_path / "first", 12, seed=3, split="train")
    again = generate_reading(tmp_path / "again", 12, seed=3, split="train")
    assert [s.pages[0].id for s in again] == [s.pages[0].id for s in pages]
    assert [s.question for s in again] == [s.question for s in pages]
    held_out = generate_reading(tmp_path / "test", 12, seed=3, split="test")
    assert not {s.pages[0].id for s in held_out} & {s.pages[0].id for s in pages}


def test_registered_as_a_synthetic_source_and_a_training_mixture(tmp_path: Path) -> None:
    assert "reading" in SYNTHETIC
    samples = synthetic_samples("reading", tmp_path, 3, seed=1, split="test")
    assert [s.dataset for s in samples] == ["synth_reading"] * 3
    mixed = mixture(["reading"], tmp_path / "mix", 4, seed=1)
    assert len(mixed) == 4 and all(s.pages[0].words for s in mixed)
    assert mixture(["reading"], tmp_path / "mix", 4, seed=1) == mixed  # read back from its cache


@pytest.mark.parametrize(("n", "size"), [(-1, 168), (2, 50)])
def test_bad_sizes_are_refused(tmp_path: Path, n: int, size: int) -> None:
    with pytest.raises(InvalidInputError, match="reading pages"):
        generate_reading(tmp_path, n, size=size)


def test_one_entry_pages_hold_only_the_label_asked_for(tmp_path: Path) -> None:
    samples = synthetic_samples("reading.one", tmp_path, 9, seed=2, split="train")
    for s in samples:
        labels = [w.text for w in s.pages[0].words if w.text in LABELS]
        assert len(labels) == 1 and labels[0] in s.question, (s.id, labels)
        assert [w.text for w in s.pages[0].words if w.text.isdigit()] == [s.answers[0]]
    assert {s.extras["kind"] for s in samples} == set(KINDS)


@pytest.mark.parametrize("entries", [(), (0,), (2, 7)])
def test_impossible_entry_counts_are_refused(tmp_path: Path, entries: tuple[int, ...]) -> None:
    with pytest.raises(InvalidInputError, match=r"entries must be 1-6 labels per page"):
        generate_reading(tmp_path, 2, entries=entries)


def test_on_the_grid_every_glyph_sits_inside_one_image_token(tmp_path: Path) -> None:
    samples = synthetic_samples("reading.grid", tmp_path, 30, seed=4, split="train")
    gray = {s.id: np.asarray(Image.open(s.pages[0].image_path).convert("L")) for s in samples}
    for s in samples:
        for word in s.pages[0].words:
            b = word.box  # the word's characters: one 14-pixel column each, on one 28-pixel row
            assert int(b.y1) // 28 == int(b.y2 - 1) // 28, (s.id, word)
            columns = [c for c in range(int(b.x1) // 14, int(b.x2 - 1) // 14 + 1)]
            inked = [
                c for c in columns if (gray[s.id][int(b.y1) : int(b.y2), c * 14 : c * 14 + 14] < 128).any()
            ]
            assert len(inked) == len(word.text), (s.id, word, inked)

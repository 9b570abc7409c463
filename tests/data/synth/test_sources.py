"""Synthetic sources by name: family names, balanced interleaved mixtures, the JSON sample cache,
and multi-image samples drawn as one image of panels."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from PIL import Image

from evidra.core.errors import RegistryError
from evidra.core.types import Box, EvidenceBox, Page, Sample, Word
from evidra.data.synth.sources import expand, mixture, sample_from_json, sample_to_json, shares, side_by_side


def test_family_names_expand_and_typos_are_named() -> None:
    assert expand(["tracer"]) == ["tracer.match", "tracer.subimage", "tracer.trace", "tracer.vjump"]
    assert expand(["tunnel.chain", "tunnel"]) == ["tunnel.chain", "tunnel.circuits", "tunnel.objreid"]
    with pytest.raises(RegistryError, match=r"did you mean 'tracer\.trace'"):
        expand(["tracer.trase"])
    assert shares(7, 7) == [1] * 7 and shares(9, 7) == [2, 2, 1, 1, 1, 1, 1] and shares(2, 3) == [1, 1, 0]


def test_a_mixture_is_balanced_interleaved_cached_and_deterministic(tmp_path: Path) -> None:
    samples = mixture(["tracer", "tunnel"], tmp_path / "a", 9, seed=3)
    datasets = [s.dataset for s in samples]
    # 9 over 7 sources: the first two sources give two each, in turn with the others
    assert datasets == [
        "tracer_match",
        "tracer_subimage",
        "tracer_trace",
        "tracer_vjump",
        "tunnel_chain",
        "tunnel_circuits",
        "tunnel_objreid",
        "tracer_match",
        "tracer_subimage",
    ]
    assert all(s.id.split("-")[2] == "train" for s in samples)  # the train split, never the test one
    cache = tmp_path / "a" / "tracer+tunnel-train-seed3-n9" / "samples.json"
    rows = json.loads(cache.read_text())
    rows[0]["question"] = "read back from the cache"
    cache.write_text(json.dumps(rows))
    again = mixture(["tracer", "tunnel"], tmp_path / "a", 9, seed=3)
    assert again[0].question == "read back from the cache"
    assert [sample_to_json(s) for s in again[1:]] == [sample_to_json(s) for s in samples[1:]]
    fresh = mixture(["tracer", "tunnel"], tmp_path / "b", 9, seed=3)
    assert [s.answers for s in fresh] == [s.answers for s in samples]  # same seed, same samples
    assert (
        Path(fresh[0].pages[0].image_path).read_bytes() == Path(samples[0].pages[0].image_path).read_bytes()
    )


def test_the_sample_cache_keeps_boxes_and_extras(tmp_path: Path) -> None:
    (doc,) = mixture(["documents"], tmp_path, 1)
    assert doc.gold_boxes and doc.evidence_box is not None and "evidence_box" not in doc.extras
    assert doc.pages[0].words  # a generated PDF page keeps its text layer through the cache
    back = sample_from_json(json.loads(json.dumps(sample_to_json(doc))))
    assert back.gold_boxes == doc.gold_boxes and back.evidence_box == doc.evidence_box
    assert back.pages == doc.pages and back.gold_evidence == doc.gold_evidence
    assert back == doc


def test_every_typed_field_survives_the_json_round_trip() -> None:
    page = Page("p1", "p1.png", 100, 80)
    sample = Sample(
        "s",
        "q?",
        ("a",),
        (page,),
        corpus="store",
        gold_pages=("p1",),
        gold_boxes=(EvidenceBox("p1", Box(1, 2, 3, 4)),),
        gold_evidence={"p1": "text"},
        sufficient=False,
        answer_type="int",
        dataset="d",
        extras={"k": [1, 2]},
        evidence_box=EvidenceBox("p1", Box(0, 0, 50, 40)),
        qrels={"p1": 2.0, "p9": 1.0},
    )
    assert sample_from_json(json.loads(json.dumps(sample_to_json(sample)))) == sample
    worded = replace(sample, pages=(replace(page, words=(Word("Lisbon", Box(5, 6, 40, 18)),)),))
    assert sample_from_json(json.loads(json.dumps(sample_to_json(worded)))) == worded
    row = sample_to_json(worded)
    row["pages"] = [values[:7] for values in row["pages"]]  # a row written before words were kept
    assert sample_from_json(row) == sample


@pytest.mark.parametrize(
    "damage",
    [
        {"evidence_box": ["p1"]},  # once an IndexError, which the cache's rebuild did not catch
        {"gold_boxes": [["p1", [1, 2]]]},
        {"pages": [["p1", "a.png", "wide", 40, "a.pdf", 1, None]]},
        {"answers": "forty-two"},
        {"answer_type": "decimal"},
        {"extras": [1]},
        {"qrels": {"p1": "high"}},
    ],
)
def test_a_damaged_cache_row_is_an_error_the_cache_rebuilds_on(damage: dict[str, object]) -> None:
    row = {**sample_to_json(Sample(id="s", question="q?", answers=("42",), dataset="d")), **damage}
    with pytest.raises((TypeError, KeyError, ValueError)):  # what ``build_once`` rebuilds after
        sample_from_json(json.loads(json.dumps(row)))


def test_two_images_become_one_image_of_panels(tmp_path: Path) -> None:
    (pair,) = [s for s in mixture(["tracer.subimage"], tmp_path, 1)]
    source, candidate = pair.pages
    one = side_by_side(pair)
    (page,) = one.pages
    assert (page.width, page.height) == (
        source.width + 24 + candidate.width,
        max(source.height, candidate.height),
    )
    with Image.open(page.image_path) as image, Image.open(candidate.image_path) as cand:
        assert image.size == (page.width, page.height)
        x = source.width + 24  # the candidate sits right of the gap, pixel for pixel
        assert image.crop((x, 0, x + cand.width, cand.height)).tobytes() == cand.convert("RGB").tobytes()
    assert one.gold_pages == (page.id,) and one.gold_evidence[page.id] == pair.extras["perception"]
    assert one.question.endswith(pair.question) and "the second image is panel 2" in one.question
    assert one.answers == pair.answers and side_by_side(one) is one  # one image: as it is
    evidence, moved = pair.evidence_box, one.evidence_box  # the evidence region, on its panel
    assert evidence is not None and moved is not None and moved.page_id == page.id
    dx = source.width + 24 if evidence.page_id == candidate.id else 0
    b = evidence.box
    assert moved.box.as_tuple() == (b.x1 + dx, b.y1, b.x2 + dx, b.y2)


def test_a_registered_name_is_that_source_not_the_family_under_it() -> None:
    # reading.one, reading.grid and reading.grid.one are registered beside reading
    assert expand(["reading"]) == ["reading"]
    assert expand(["reading.grid"]) == ["reading.grid"]
    assert expand(["reading", "reading.grid.one"]) == ["reading", "reading.grid.one"]

"""Benchmark records are data: an image path they name must stay inside the dataset folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from evidra.core.errors import InvalidInputError
from evidra.data.loaders import load
from evidra.data.loaders.beir import load_beir_corpus
from evidra.data.loaders.vidore_v1 import load_vidore_v1_corpus


def _jsonl(path: Path, rows: list[dict[str, object]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """An image outside every dataset folder of these tests."""
    path = tmp_path / "private" / "secret.png"
    path.parent.mkdir()
    Image.new("RGB", (8, 8), "red").save(path)
    return path


def test_vidore_rows_naming_outside_files_are_refused(tmp_path: Path, outside: Path) -> None:
    data = tmp_path / "bench"
    (data / "img").mkdir(parents=True)
    Image.new("RGB", (8, 8)).save(data / "img" / "a.png")
    row = {"query": "q?", "image_filename": "a.png"}
    ok = _jsonl(data / "ok" / "test.jsonl", [{**row, "image": "../img/a.png"}])
    pages = load_vidore_v1_corpus(data, image_dir=tmp_path / "out")  # ../ from ok/ stays inside
    assert [p.id for p in pages] == ["a.png"] and ok.exists()
    for bad in (str(outside), "../../private/secret.png", "../img/../../private/secret.png"):
        _jsonl(data / "ok" / "test.jsonl", [{**row, "image": bad}])
        with pytest.raises(InvalidInputError, match="points outside the dataset folder") as info:
            load_vidore_v1_corpus(data, image_dir=tmp_path / "out")
        assert "\n" not in str(info.value) and "test.jsonl, record 0" in str(info.value)


def test_an_hf_path_cell_outside_is_refused(tmp_path: Path, outside: Path) -> None:
    data = _jsonl(
        tmp_path / "bench" / "test.jsonl",
        [{"query": "q?", "image": {"bytes": None, "path": str(outside)}, "image_filename": "x.png"}],
    )
    with pytest.raises(InvalidInputError, match="points outside the dataset folder"):
        load_vidore_v1_corpus(data, image_dir=tmp_path / "out")


def test_beir_corpus_entries_stay_inside_the_benchmark_folder(tmp_path: Path, outside: Path) -> None:
    root = tmp_path / "beir"
    (root / "images").mkdir(parents=True)
    Image.new("RGB", (8, 8)).save(root / "images" / "p1.png")
    _jsonl(root / "corpus" / "test.jsonl", [{"corpus-id": 1, "image": "../images/p1.png"}])
    (page,) = load_beir_corpus(root, image_dir=tmp_path / "out")  # inside the benchmark folder
    assert page.id == "1" and Path(page.image_path).name == "p1.png"
    _jsonl(root / "corpus" / "test.jsonl", [{"corpus-id": 2, "image": "../../private/secret.png"}])
    with pytest.raises(InvalidInputError, match="points outside the dataset folder"):
        load_beir_corpus(root, image_dir=tmp_path / "out")


def test_named_files_stay_inside_the_images_folder_given(tmp_path: Path, outside: Path) -> None:
    images = tmp_path / "slides"
    (images / "deck").mkdir(parents=True)
    Image.new("RGB", (8, 8)).save(images / "deck" / "1.png")
    row = {"qa_id": 1, "question": "q?", "answer": "a", "evidence_pages": "[1]"}
    data = _jsonl(tmp_path / "qa" / "test.jsonl", [{**row, "deck_name": "deck"}])
    options = {"images": images, "image_template": "{deck}/{page}.png", "n_slides": 1}
    (sample,) = load("slidevqa", data, image_dir=tmp_path / "out", **options)  # the images folder is trusted
    assert sample.pages[0].image_path == str(images / "deck" / "1.png")
    _jsonl(data, [{**row, "deck_name": "../private/secret"}])
    options["image_template"] = "{deck}.png"
    with pytest.raises(InvalidInputError, match="points outside the dataset folder"):
        load("slidevqa", data, image_dir=tmp_path / "out", **options)

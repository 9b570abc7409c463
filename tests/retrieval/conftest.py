from __future__ import annotations

from pathlib import Path

import pytest

from evidra.types import Page


@pytest.fixture(scope="session")
def ragged_pages(tmp_path_factory: pytest.TempPathFactory) -> list[Page]:
    """Four pages, three sizes (so token counts differ; pages 0 and 3 share one), simple drawings."""
    from PIL import Image, ImageDraw

    root = tmp_path_factory.mktemp("ragged")
    pages = []
    for i, (w, h) in enumerate([(224, 224), (112, 224), (224, 84), (224, 224)]):
        img = Image.new("RGB", (w, h), (255, 255, 255))
        ImageDraw.Draw(img).rectangle((10 * i, 5, 10 * i + 40, 60), fill=(40 * i, 0, 200 - 40 * i))
        path = root / f"page{i}.png"
        img.save(path)
        pages.append(Page(f"pg{i}", str(path), w, h))
    return pages


@pytest.fixture(scope="session")
def tiny_colqwen2(tiny_dirs: dict[str, Path]) -> object:
    from evidra.retrieval.base import EncoderOptions
    from evidra.retrieval.encoders.colvision import ColVisionEncoder

    return ColVisionEncoder.load(tiny_dirs["colqwen2"], EncoderOptions(batch_size=4))


@pytest.fixture(scope="session")
def synth_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    """A page store of 6 synthetic documents (text layer included) and their questions."""
    from evidra.corpus import ingest
    from evidra.data.synth.documents import generate_documents

    root = tmp_path_factory.mktemp("synth")
    corpus = generate_documents(root / "docs", n_docs=6, seed=3, dpi=40)
    ingest(corpus.docs_dir, root / "store", dpi=40)
    return root / "store", corpus


@pytest.fixture(scope="session")
def tiny_colpali(tmp_path_factory: pytest.TempPathFactory) -> object:
    from evidra.models.tiny import build_tiny
    from evidra.retrieval.base import EncoderOptions
    from evidra.retrieval.encoders.colvision import ColVisionEncoder

    path = build_tiny("colpali", tmp_path_factory.mktemp("tiny") / "colpali")
    return ColVisionEncoder.load(path, EncoderOptions(batch_size=3))

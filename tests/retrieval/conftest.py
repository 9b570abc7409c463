from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from evidra.core.types import Page


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
    from evidra.retrieval.encoders.colvision import ColVisionEncoder
    from evidra.retrieval.interfaces import EncoderOptions

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
    from evidra.retrieval.encoders.colvision import ColVisionEncoder
    from evidra.retrieval.interfaces import EncoderOptions

    path = build_tiny("colpali", tmp_path_factory.mktemp("tiny") / "colpali")
    return ColVisionEncoder.load(path, EncoderOptions(batch_size=3))


def _document_pages(
    n: int, length: int, dim: int, seed: int
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Pages whose patches are 60% near-copies of 4 shared "blank" vectors, scattered at random
    positions (white space), and 40% distinct content; returns the pages and their content masks."""
    g = torch.Generator().manual_seed(seed)
    blank_vectors = torch.nn.functional.normalize(torch.randn(4, dim, generator=g), dim=-1)
    pages, masks = [], []
    for _ in range(n):
        blank = torch.rand(length, generator=g) < 0.6
        back = blank_vectors[torch.randint(4, (length,), generator=g)] + 0.05 * torch.randn(
            length, dim, generator=g
        )
        page = torch.where(blank[:, None], back, torch.randn(length, dim, generator=g))
        pages.append(torch.nn.functional.normalize(page, dim=-1))
        masks.append(~blank)
    return pages, masks


@pytest.fixture()
def document_pages() -> Any:
    """``_document_pages``: synthetic pages with scattered near-duplicate blank patches."""
    return _document_pages

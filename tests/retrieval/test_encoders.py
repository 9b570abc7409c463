from __future__ import annotations

import importlib.machinery
import sys
import types
from pathlib import Path
from typing import Any

import pytest
import torch

from evidra.core.errors import InvalidInputError, MissingDependencyError, ModelLoadError
from evidra.core.types import Box, Page, Word
from evidra.retrieval.encoders.colvision import ColVisionEncoder
from evidra.retrieval.encoders.dse import SingleVectorEncoder
from evidra.retrieval.interfaces import ENCODERS, Encoder, EncoderOptions
from evidra.retrieval.kernels.maxsim import maxsim
from evidra.retrieval.ocr import ocr_words, page_text


def test_colqwen2_removes_padding_per_item(tiny_colqwen2: Any, ragged_pages: list[Page]) -> None:
    enc: ColVisionEncoder = tiny_colqwen2
    assert isinstance(enc, Encoder) and enc.kind == "multi"
    batched = enc.embed_pages(ragged_pages)
    lengths = [e.shape[0] for e in batched]
    assert len(set(lengths)) > 1  # the pages really have different token counts
    for page, emb in zip(ragged_pages, batched, strict=True):
        alone = enc.embed_pages([page])[0]
        assert alone.shape == emb.shape == (emb.shape[0], enc.dim)
        torch.testing.assert_close(emb, alone, atol=1e-4, rtol=1e-4)
        # no zero vector survives: every kept token is unit norm
        torch.testing.assert_close(emb.norm(dim=-1), torch.ones(emb.shape[0]), atol=1e-4, rtol=0)
    queries = enc.embed_queries(["red box", "a much longer query about a blue rectangle on the page"])
    assert queries[0].shape[0] < queries[1].shape[0]
    torch.testing.assert_close(queries[0], enc.embed_queries(["red box"])[0], atol=1e-4, rtol=1e-4)


def test_colqwen2_scores_match_transformers_on_equal_lengths(
    tiny_colqwen2: Any, ragged_pages: list[Page]
) -> None:
    enc: ColVisionEncoder = tiny_colqwen2
    # pages 0 and 3 have equal lengths, so score_retrieval's zero padding is a no-op
    pages = enc.embed_pages([ragged_pages[0], ragged_pages[3]])
    assert pages[0].shape == pages[1].shape and not torch.equal(pages[0], pages[1])
    queries = enc.embed_queries(["red box", "blue"])
    ref = enc.processor.score_retrieval(queries, pages, batch_size=2)  # (Q, P)
    ours = torch.tensor([[float(maxsim(q, p)) for p in pages] for q in queries])
    torch.testing.assert_close(ours, ref.float(), atol=1e-4, rtol=1e-4)


def test_colqwen2_rejects_other_checkpoints(tiny_dirs: dict[str, Path]) -> None:
    with pytest.raises(ModelLoadError, match="qwen2_vl"):
        ColVisionEncoder.load(tiny_dirs["qwen2_vl"])
    with pytest.raises(InvalidInputError, match="list of query strings"):
        ColVisionEncoder.load(tiny_dirs["colqwen2"]).embed_queries("one string")  # type: ignore[arg-type]


def test_colpali_encodes_pages_and_queries_like_transformers(
    tiny_colpali: Any, ragged_pages: list[Page], tmp_path: Path
) -> None:
    enc: ColVisionEncoder = tiny_colpali
    assert enc.name == "colpali" and enc.kind == "multi"
    pages = enc.embed_pages(ragged_pages)  # batches of 3: a full one and a single page
    # ColPali resizes every page to one square: (image_size/14)^2 image tokens + the page prompt
    assert {p.shape for p in pages} == {(pages[0].shape[0], enc.dim)} and pages[0].shape[0] > 4
    for page, emb in zip(ragged_pages, pages, strict=True):
        torch.testing.assert_close(emb, enc.embed_pages([page])[0], atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(emb.norm(dim=-1), torch.ones(emb.shape[0]), atol=1e-4, rtol=0)
    texts = ["red box", "a much longer query about a blue rectangle near the top of the page"]
    queries = enc.embed_queries(texts)
    assert queries[0].shape[0] < queries[1].shape[0]  # the batch's padding was dropped per query
    torch.testing.assert_close(queries[0], enc.embed_queries(texts[:1])[0], atol=1e-4, rtol=1e-4)
    ref = enc.processor.score_retrieval(queries, pages, batch_size=2)  # (Q, P): equal page lengths
    ours = torch.tensor([[float(maxsim(q, p)) for p in pages] for q in queries])
    torch.testing.assert_close(ours, ref.float(), atol=1e-4, rtol=1e-4)
    from evidra.retrieval.index.multivector import MaxSimOptions, MultiVectorIndex

    index = MultiVectorIndex.create(tmp_path / "idx", enc.dim, options=MaxSimOptions(device="cpu"))
    index.add([p.id for p in ragged_pages], pages)
    hits = index.search(queries, k=4)
    for row, hit in zip(ours, hits, strict=True):
        assert hit[0].page_id == ragged_pages[int(row.argmax())].id


def test_weighted_pooling_weighs_real_tokens_by_rank_under_left_padding() -> None:
    from evidra.retrieval.encoders.dse import pool_hidden

    g = torch.Generator().manual_seed(0)
    real = torch.randn(3, 4, generator=g)  # 3 real tokens
    padded = torch.cat([torch.full((2, 4), 7.0), real]).unsqueeze(0)  # 2 pads on the left
    mask = torch.tensor([[0, 0, 1, 1, 1]])
    want = torch.nn.functional.normalize((1 * real[0] + 2 * real[1] + 3 * real[2]) / 6, dim=-1)
    torch.testing.assert_close(pool_hidden(padded, mask, "weighted")[0], want)
    alone = pool_hidden(real.unsqueeze(0), torch.ones(1, 3, dtype=torch.long), "weighted")[0]
    torch.testing.assert_close(alone, want)
    assert ENCODERS.get("visrag") is not ENCODERS.get("dse")


@pytest.mark.parametrize("pooling", ["last", "mean", "weighted"])
def test_single_vector_encoder(tiny_dirs: dict[str, Path], ragged_pages: list[Page], pooling: str) -> None:
    enc = SingleVectorEncoder.load(tiny_dirs["qwen2_vl"], EncoderOptions(batch_size=4), pooling=pooling)  # type: ignore[arg-type]
    assert enc.kind == "single"
    pages = enc.embed_pages(ragged_pages)
    assert all(p.shape == (1, enc.dim) for p in pages)
    torch.testing.assert_close(torch.cat(pages).norm(dim=-1), torch.ones(4))
    # left padding: a page embedded in a ragged batch equals it embedded alone
    torch.testing.assert_close(pages[2], enc.embed_pages([ragged_pages[2]])[0], atol=1e-4, rtol=1e-4)
    q = enc.embed_queries(["short", "a considerably longer query text"])
    torch.testing.assert_close(q[0], enc.embed_queries(["short"])[0], atol=1e-4, rtol=1e-4)


def test_registry_names_the_encoders() -> None:
    assert {"colqwen2", "colpali", "dse", "visrag", "minilm"} <= set(ENCODERS.names())
    with pytest.raises(KeyError, match="did you mean 'colqwen2'"):
        ENCODERS.get("colqwen")


def test_sentence_encoder_missing_dependency(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # import fails as if not installed
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "sentence_transformers" else real(n, *a)
    )
    with pytest.raises(MissingDependencyError, match=r"evidra\[text-encoder\]"):
        ENCODERS.get("minilm")(tmp_path)


def _fake_tesseract(found: bool) -> types.ModuleType:
    mod = types.ModuleType("pytesseract")
    mod.__spec__ = importlib.machinery.ModuleSpec("pytesseract", None)

    class TesseractNotFoundError(OSError):
        pass

    def image_to_data(image: Any, lang: str, output_type: Any) -> dict[str, list[Any]]:
        if not found:
            raise TesseractNotFoundError
        return {"level": [1, 5, 5, 5], "conf": [-1, 96, 30, 90], "text": ["", "Total", "noise", "42"]}

    mod.TesseractNotFoundError = TesseractNotFoundError  # type: ignore[attr-defined]
    mod.Output = types.SimpleNamespace(DICT="dict")  # type: ignore[attr-defined]
    mod.image_to_data = image_to_data  # type: ignore[attr-defined]
    return mod


def test_ocr_fallback_and_missing_binary(monkeypatch: pytest.MonkeyPatch, ragged_pages: list[Page]) -> None:
    page = ragged_pages[0]
    monkeypatch.setitem(sys.modules, "pytesseract", _fake_tesseract(found=True))
    assert ocr_words(None, min_conf=50) == ["Total", "42"]
    assert page_text(page, ocr=True) == "Total noise 42"
    assert page_text(page) == ""  # OCR only on request
    worded = Page("w", page.image_path, 10, 10, words=(Word("hi", Box(0, 0, 1, 1)),))
    assert page_text(worded, ocr=True) == "hi"  # a text layer wins over OCR
    monkeypatch.setitem(sys.modules, "pytesseract", _fake_tesseract(found=False))
    with pytest.raises(MissingDependencyError, match="apt-get install tesseract-ocr"):
        ocr_words(None)

"""An index directory that knows its encoder: build from pages, open, add, delete, search.

``evidra index build`` writes ``retriever.json`` (encoder name, checkpoint path, backend) next to
the index files, so ``open_index(dir)`` can rebuild the full text-to-pages retriever. Backends:
``maxsim`` for multi-vector encoders, ``dense`` for single-vector ones, ``bm25`` over the text
layer (no model).

>>> engine = build_index(store.pages(), "idx/", "colqwen2", "ckpt/colqwen2")   # doctest: +SKIP
>>> engine.retriever.search(["When was Orion founded?"], k=5)                  # doctest: +SKIP
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from evidra.errors import CorpusError, InvalidInputError
from evidra.retrieval.base import Encoder, EncoderOptions, Retriever, VectorIndex
from evidra.retrieval.encoders import load_encoder
from evidra.retrieval.encoders.bm25 import BM25Params, BM25Retriever
from evidra.retrieval.index.dense import DenseIndex
from evidra.retrieval.index.multivector import MaxSimOptions, MultiVectorIndex
from evidra.retrieval.ocr import page_text
from evidra.types import Page

logger = logging.getLogger(__name__)

MANIFEST = "retriever.json"
Progress = Callable[[int], None]  # called with the number of pages just embedded


@dataclass(frozen=True)
class IndexSpec:
    """What ``retriever.json`` records."""

    encoder: str  # registry name ("colqwen2", "dse", ...) or "bm25"
    encoder_path: str = ""  # local checkpoint directory; empty for bm25
    backend: str = "maxsim"  # maxsim | dense | bm25
    ocr: bool = False  # bm25 only: OCR pages that have no text layer


@dataclass(frozen=True, eq=False)
class Engine:
    """An opened index directory: its spec, encoder (None for bm25), index and retriever."""

    root: Path
    spec: IndexSpec
    encoder: Encoder | None
    index: VectorIndex | BM25Retriever
    retriever: Retriever

    def add(
        self,
        pages: Sequence[Page],
        *,
        replace: bool = False,
        batch_pages: int = 32,
        progress: Progress | None = None,
    ) -> None:
        """Embed and add ``pages``; with ``replace`` pages already present are updated."""
        if isinstance(self.index, BM25Retriever):
            texts = {p.id: page_text(p, ocr=self.spec.ocr) for p in pages}
            self.index.add(texts, {p.id: p.image_path for p in pages}, replace=replace)
            self.index.save(self.root)
            return
        assert self.encoder is not None
        for start in range(0, len(pages), batch_pages):
            batch = pages[start : start + batch_pages]
            emb = self.encoder.embed_pages(batch)
            ids, images = [p.id for p in batch], [p.image_path for p in batch]
            (self.index.update if replace else self.index.add)(ids, emb, images)
            if progress is not None:
                progress(len(batch))

    def delete(self, page_ids: Sequence[str]) -> int:
        n = self.index.delete(page_ids)
        if isinstance(self.index, BM25Retriever):
            self.index.save(self.root)
        return n


def _backend(encoder: Encoder) -> str:
    return "maxsim" if encoder.kind == "multi" else "dense"


def _write_manifest(root: Path, spec: IndexSpec) -> None:
    tmp = root / f".{MANIFEST}.tmp"
    tmp.write_text(json.dumps(asdict(spec), indent=2))
    os.replace(tmp, root / MANIFEST)


def read_spec(root: str | Path) -> IndexSpec:
    path = Path(root) / MANIFEST
    try:
        return IndexSpec(**json.loads(path.read_text()))
    except FileNotFoundError:
        raise CorpusError(f"{str(root)!r} has no {MANIFEST}; build it with `evidra index build`") from None
    except (ValueError, TypeError) as exc:
        raise CorpusError(f"{path} is malformed ({exc}); rebuild the index") from exc


def build_index(
    pages: Sequence[Page],
    root: str | Path,
    encoder: str,
    encoder_path: str | Path = "",
    *,
    options: EncoderOptions | None = None,
    maxsim: MaxSimOptions | None = None,
    ocr: bool = False,
    bm25: BM25Params | None = None,
    progress: Progress | None = None,
) -> Engine:
    """Create an index directory at ``root`` holding ``pages`` embedded by ``encoder``."""
    out = Path(root)
    if (out / MANIFEST).exists():
        raise InvalidInputError(
            f"an index already exists at {str(out)!r}; use `evidra index add` or another path"
        )
    out.mkdir(parents=True, exist_ok=True)
    if encoder == "bm25":
        spec = IndexSpec("bm25", "", "bm25", ocr)
        retriever = BM25Retriever.build({}, bm25 or BM25Params())
        engine = Engine(out, spec, None, retriever, retriever)
    else:
        enc = load_encoder(encoder, encoder_path, options)
        spec = IndexSpec(encoder, str(Path(encoder_path).resolve()), _backend(enc), ocr)
        dim = int(enc.embed_queries(["dimension probe"])[0].shape[1])
        index: Any = (
            MultiVectorIndex.create(out, dim, options=maxsim, encoder=encoder)
            if spec.backend == "maxsim"
            else DenseIndex.create(out, dim, device=(maxsim or MaxSimOptions()).device, encoder=encoder)
        )
        engine = Engine(out, spec, enc, index, _joined(enc, index))
    engine.add(pages, progress=progress)
    _write_manifest(out, spec)  # last: a crash mid-build leaves no half-built "index"
    logger.info("built %s index of %d pages at %s", spec.backend, len(pages), out)
    return engine


def open_index(
    root: str | Path,
    *,
    encoder_path: str | Path | None = None,
    options: EncoderOptions | None = None,
    maxsim: MaxSimOptions | None = None,
) -> Engine:
    """Open an index directory; ``encoder_path`` overrides the checkpoint recorded at build time."""
    path = Path(root)
    spec = read_spec(path)
    if spec.backend == "bm25":
        retriever = BM25Retriever.load(path)
        return Engine(path, spec, None, retriever, retriever)
    enc = load_encoder(spec.encoder, encoder_path or spec.encoder_path, options)
    index: Any = (
        MultiVectorIndex.open(path, options=maxsim)
        if spec.backend == "maxsim"
        else DenseIndex.open(path, device=(maxsim or MaxSimOptions()).device)
    )
    return Engine(path, spec, enc, index, _joined(enc, index))


def open_store_only(root: str | Path) -> VectorIndex | BM25Retriever:
    """The index of a directory without loading its encoder (enough to delete or list pages)."""
    path = Path(root)
    spec = read_spec(path)
    if spec.backend == "bm25":
        return BM25Retriever.load(path)
    return MultiVectorIndex.open(path) if spec.backend == "maxsim" else DenseIndex.open(path)


def _joined(encoder: Encoder, index: VectorIndex) -> Retriever:
    from evidra.retrieval.base import EncodedRetriever

    return EncodedRetriever(encoder, index)

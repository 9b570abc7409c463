"""ViDoRe v2 and the VisRAG eval sets in the BEIR layout.

A benchmark folder holds three configs, each a file or a folder of shards (HF parquet or a
JSONL export): ``corpus`` (``corpus-id``, ``image``), ``queries`` (``query-id``, ``query``,
plus ``answer``/``options`` for VisRAG) and ``qrels`` (``query-id``, ``corpus-id``, graded
``score``; a BEIR ``qrels/*.tsv`` with a header also works). Samples carry no pages (they are
retrieval questions over ``corpus``); ``gold_pages`` are the corpus ids with score > 0 and
``Sample.qrels`` keeps the graded judgements for nDCG. ``load_beir_corpus`` gives the pages.
"""

from __future__ import annotations

import csv
from pathlib import Path

from evidra.core.errors import InvalidInputError
from evidra.core.types import Page, Sample
from evidra.data.loaders._records import as_float, as_str, literal_list, materialize_page, read_records
from evidra.data.loaders.loader import LOADERS


def _config(root: Path, name: str) -> Path:
    for cand in (root / name, *sorted(root.glob(f"{name}.*"))):
        if cand.exists():
            return cand
    raise InvalidInputError(f"{root}: no {name!r} file or folder (BEIR layout: corpus, queries, qrels)")


def load_qrels(root: str | Path) -> dict[str, dict[str, float]]:
    path = _config(Path(root), "qrels")
    qrels: dict[str, dict[str, float]] = {}
    tsvs = [path] if path.suffix == ".tsv" else sorted(path.glob("*.tsv")) if path.is_dir() else []
    for tsv in tsvs:
        with tsv.open(newline="") as fh:
            for row in csv.DictReader(fh, delimiter="\t"):
                qrels.setdefault(row["query-id"], {})[row["corpus-id"]] = float(row["score"])
    if not tsvs:
        for rec in read_records(path):
            qid, cid = as_str(rec.require("query-id")), as_str(rec.require("corpus-id"))
            qrels.setdefault(qid, {})[cid] = as_float(rec.get("score", 1), rec, "score")
    return qrels


def load_beir_corpus(root: str | Path, *, image_dir: str | Path | None = None) -> list[Page]:
    """The corpus pages, ids as in ``corpus-id`` (ints become strings)."""
    out = Path(image_dir) if image_dir else Path(root) / "evidra_images"
    return [
        materialize_page(
            rec.require("image"), rec, page_id=as_str(rec.require_any("corpus-id", "_id")), image_dir=out
        )
        for rec in read_records(_config(Path(root), "corpus"), root=root)  # paths stay under root
    ]


def load_beir(
    path: str | Path, *, dataset: str = "beir", subset: str = "", limit: int | None = None, **_: object
) -> list[Sample]:
    """Queries of a BEIR-layout folder; ``subset`` (e.g. "chartqa") selects VisRAG's scoring rule."""
    root = Path(path)
    qrels = load_qrels(root)
    samples = []
    for rec in list(read_records(_config(root, "queries")))[:limit]:
        qid = as_str(rec.require_any("query-id", "_id"))
        judged = qrels.get(qid, {})
        answer = rec.get("answer")
        answers = (
            literal_list(answer, rec, "answer") if isinstance(answer, list) else [answer] if answer else []
        )
        samples.append(
            Sample(
                id=qid,
                question=as_str(rec.require_any("query", "text")),
                answers=tuple(as_str(a) for a in answers),
                corpus=str(root),
                gold_pages=tuple(c for c, s in judged.items() if s > 0),
                dataset=dataset,
                extras={"options": rec.get("options"), "source": subset},
                qrels=judged,
            )
        )
    return samples


LOADERS.add("beir", load_beir)
LOADERS.add("vidore", lambda path, **kw: load_beir(path, **{"dataset": "vidore", **kw}))
LOADERS.add("visrag", lambda path, **kw: load_beir(path, **{"dataset": "visrag", **kw}))

"""A page budget: each question shown its top-k pages, not every page its sample holds.

Lang2Act (and EVisRAG) answer from the top-3 pages a retriever returns for the question (Lang2Act
§4 and App. A: ColQwen2, top-3 per query). ``top_pages`` cuts each sample's ``pages`` to ``k``:
ranked by a retriever when one is given (an index directory or a ``serve-index`` URL, searched
with the question; the pages it may return are every page of the given samples, the corpus they
were loaded from), otherwise in the sample's own order (a benchmark's candidate ranking, a
document's page order). Gold pages, boxes and evidence that fall outside the budget are dropped
with them; ``extras["retrieved"]`` records the pages kept, in rank order.

>>> from evidra.core.types import Page
>>> pages = tuple(Page(f"p{i}", f"/img/p{i}.png", 10, 10) for i in range(5))
>>> s = Sample("q", "Who?", ("Ann",), pages=pages, gold_pages=("p4",))
>>> cut = top_pages([s], 3)[0]
>>> [p.id for p in cut.pages], cut.gold_pages
(['p0', 'p1', 'p2'], ())
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from dataclasses import replace
from typing import Protocol

from evidra.core.errors import InvalidInputError
from evidra.core.types import Page, Sample
from evidra.retrieval.interfaces import Hit

logger = logging.getLogger(__name__)

SEARCH_DEPTH = 4  # hits asked per page kept: a service may return pages outside the corpus
QUERY_BATCH = 64  # questions per search call


class PageSearcher(Protocol):
    def search(
        self, queries: Sequence[str], k: int = 10, exclude: Sequence[Collection[str]] | None = None
    ) -> list[list[Hit]]: ...


def _ranked(
    samples: Sequence[Sample], k: int, searcher: PageSearcher, corpus: dict[str, Page]
) -> list[list[str]]:
    """The top ``k`` page ids of the corpus for each sample's question, in rank order."""
    out: list[list[str]] = []
    for start in range(0, len(samples), QUERY_BATCH):
        batch = samples[start : start + QUERY_BATCH]
        hits = searcher.search([s.question for s in batch], k=k * SEARCH_DEPTH)
        for sample, found in zip(batch, hits, strict=True):
            ids = list(dict.fromkeys(h.page_id for h in found if h.page_id in corpus))[:k]
            if not ids:
                raise InvalidInputError(
                    f"the retriever returned none of the samples' pages for {sample.id!r}; build the index "
                    "over the same pages (evidra index build --dataset NAME --data PATH)"
                )
            out.append(ids)
    return out


def _with_pages(sample: Sample, ids: Sequence[str], corpus: dict[str, Page]) -> Sample:
    kept = tuple(corpus[i] for i in ids)
    shown = {p.id for p in kept}
    evidence = sample.evidence_box
    return replace(
        sample,
        pages=kept,
        gold_pages=tuple(g for g in sample.gold_pages if g in shown),
        gold_boxes=tuple(b for b in sample.gold_boxes if b.page_id in shown),
        evidence_box=evidence if evidence is not None and evidence.page_id in shown else None,
        gold_evidence={p: e for p, e in sample.gold_evidence.items() if p in shown},
        extras={**sample.extras, "retrieved": list(ids)},
    )


def top_pages(samples: Sequence[Sample], k: int, searcher: PageSearcher | None = None) -> list[Sample]:
    """Each sample with its top ``k`` pages: ranked by ``searcher`` over every page of
    ``samples`` when given (``retrieval.engine.open_searcher``), else its first ``k`` pages in
    its own order."""
    if k < 1:
        raise InvalidInputError(f"the page budget must be >= 1 page per question, got {k}")
    if searcher is None:
        out = [_with_pages(s, [p.id for p in s.pages[:k]], {p.id: p for p in s.pages}) for s in samples]
    else:
        corpus = {p.id: p for s in samples for p in s.pages}
        ranked = _ranked(samples, k, searcher, corpus)
        out = [_with_pages(s, ids, corpus) for s, ids in zip(samples, ranked, strict=True)]
    lost = sum(len(a.gold_pages) < len(b.gold_pages) for b, a in zip(samples, out, strict=True))
    if lost:
        logger.info("page budget %d: %d of %d questions lost a gold page", k, lost, len(samples))
    return out

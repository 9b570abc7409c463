"""EVisRAG's sufficiency labels: is the retrieved context enough to answer? (EVisRAG App. A.1)

EVisRAG retrieves the top-3 pages per question with VisRAG-Ret and, following Joren et al.
(2025), labels a question *sufficient* iff all of its ground-truth pages are among them;
otherwise the gold answer becomes "insufficient to answer" (EVisRAG Eq. 12). This module
applies that rule to any retrieval result and returns relabelled samples whose ``pages`` are
the retrieved context, in rank order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from evidra.core.errors import InvalidInputError
from evidra.core.types import Page, Sample

INSUFFICIENT = "insufficient to answer"  # EVisRAG's fixed answer for insufficient context
EVISRAG_TOP_K = 3


def is_sufficient(gold_pages: Sequence[str], retrieved: Sequence[str], k: int = EVISRAG_TOP_K) -> bool:
    """All gold pages inside the top ``k`` retrieved ids; a question without gold pages is not.

    >>> is_sufficient(["a", "b"], ["b", "x", "a", "c"])
    True
    >>> is_sufficient(["a", "c"], ["b", "x", "a", "c"])
    False
    """
    if k < 1:
        raise InvalidInputError(f"k must be >= 1, got {k}")
    top = set(retrieved[:k])
    return bool(gold_pages) and all(g in top for g in gold_pages)


@dataclass(frozen=True)
class SufficiencyStats:
    total: int
    sufficient: int

    @property
    def ratio(self) -> float:
        """The "Sufficient Context Ratio" column of EVisRAG Table 3."""
        return self.sufficient / self.total if self.total else 0.0


def label_samples(
    samples: Sequence[Sample],
    retrieved: Mapping[str, Sequence[str]],
    pages: Mapping[str, Page] | None = None,
    *,
    k: int = EVISRAG_TOP_K,
) -> list[Sample]:
    """Samples with ``sufficient`` set from ``retrieved`` (sample id -> ranked page ids).

    When ``pages`` (page id -> Page) is given, each sample's pages become its top-``k``
    retrieved pages. The original answers stay in ``answers``; scorers substitute
    ``INSUFFICIENT`` for insufficient samples (``evidra.methods.evisrag.reward.gold_string``).
    """
    out = []
    for s in samples:
        if s.id not in retrieved:
            raise InvalidInputError(
                f"no retrieval result for sample {s.id!r}; retrieve for every sample first"
            )
        ranked = list(retrieved[s.id])
        ok = is_sufficient(s.gold_pages, ranked, k)
        extras = {**s.extras, "retrieved": ranked[:k]}
        if pages is None:
            out.append(replace(s, sufficient=ok, extras=extras))
            continue
        missing = [p for p in ranked[:k] if p not in pages]
        if missing:
            raise InvalidInputError(f"sample {s.id!r}: retrieved pages {missing} are not in the given pages")
        context = tuple(pages[p] for p in ranked[:k])
        gold = tuple(g for g in s.gold_pages if g in pages and pages[g] in context)
        shown = {p.id for p in context}
        boxes = tuple(b for b in s.gold_boxes if b.page_id in shown)
        evidence = s.evidence_box if s.evidence_box is not None and s.evidence_box.page_id in shown else None
        out.append(
            replace(
                s,
                sufficient=ok,
                pages=context,
                gold_pages=gold,
                gold_boxes=boxes,
                evidence_box=evidence,
                extras=extras,
            )
        )
    return out


def stats(samples: Sequence[Sample]) -> SufficiencyStats:
    return SufficiencyStats(len(samples), sum(1 for s in samples if s.sufficient))

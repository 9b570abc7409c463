"""Hybrid search on real documents: which fusion helps, and how much a weak retriever hurts.

The known items of ``bm25_known_item.py`` (questions written from the pages' own headings,
sentences and function definitions; the gold page is the page the words came from) are asked of
pairs of retrievers over the same pages, fused by every setting below through evidra's own
``HybridRetriever``:

* two retrievers that both carry signal: BM25 with stop words dropped (evidra's default) fused
  with a second analyzer of the same text (plain words; stemmed; stop words and stemmed);
* one that ranks at random: the same BM25 fused with a visual index built by a tiny random
  ColQwen2 (``evidra.models.tiny``: what a user with an untrained encoder gets), in both orders
  (``--index visual --index bm25`` and the reverse), since ties go to the index given first.

Settings: RRF with k in 1, 10, 30, 60, 100 over the top 100 hits (k 60, depth 100: evidra's
previous default), RRF at depth 10, min-max and z-score fusion at depths 10, 50 and 100 (z-score,
depth 100: the default now), and weight 0.5 on the second retriever. Columns: recall@1, recall@5
and MRR@10. Documents as in ``bm25_known_item.py``: ``--store``, ``--pdfs`` (the figures of
docs/retrieval.md: the PDF manuals of Debian's ``libtasn1-doc``, ``libidn2-doc`` and
``libgcrypt20-doc``, fetched as that script's header shows), or the generated manual (the
default, what the tests run)::

    OMP_NUM_THREADS=1 python benchmarks/hybrid_known_item.py --pdfs pdfs/

The last line is ``RESULT single_mrr=<a> previous_signal_mrr=<b> default_signal_mrr=<c>
previous_weak_mrr=<d> default_weak_mrr=<e> default=zscore:100``: MRR@10 of the BM25 alone, and
of the previous and current default fusions averaged over the pairs with signal and over the
two orders of the weak pair.
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from statistics import fmean

from bm25_known_item import VARIANTS, KnownItem, fixture_pdf, known_items

from evidra.core.types import Page
from evidra.corpus import PageStore, ingest
from evidra.eval.retrieval import evaluate
from evidra.retrieval.encoders.bm25 import BM25Retriever
from evidra.retrieval.hybrid import DEFAULT_FUSION, Fusion, HybridRetriever
from evidra.retrieval.interfaces import Exclude, Hit, Retriever

BASE = "stop words"  # evidra's BM25 default: every pair fuses it with one other retriever
VISUAL = "tiny visual"
PAIRS = (
    (BASE, "plain"),
    (BASE, "stemming"),
    (BASE, "stop + stem"),
    (VISUAL, BASE),
    (BASE, VISUAL),
)
WEAK = tuple(p for p in PAIRS if VISUAL in p)
PREVIOUS = Fusion("rrf", depth=100, rrf_k=60)
DEPTH = 100  # every retriever answers this many hits, the largest depth of any setting


@dataclass(frozen=True)
class Setting:
    label: str
    fusion: Fusion
    other_weight: float = 1.0  # of the retriever that is not BASE


SETTINGS = (
    *(Setting(f"rrf k={k} depth=100", Fusion("rrf", depth=100, rrf_k=k)) for k in (1, 10, 30, 60, 100)),
    Setting("rrf k=1 depth=10", Fusion("rrf", depth=10, rrf_k=1)),
    Setting("rrf k=60 depth=10", Fusion("rrf", depth=10, rrf_k=60)),
    Setting("rrf k=60 depth=100, other 0.5", Fusion("rrf", depth=100, rrf_k=60), 0.5),
    *(Setting(f"minmax depth={d}", Fusion("minmax", depth=d)) for d in (10, 50, 100)),
    *(Setting(f"zscore depth={d}", Fusion("zscore", depth=d)) for d in (10, 50, 100)),
    Setting("zscore depth=100, other 0.5", Fusion("zscore", depth=100), 0.5),
)


class Answered:
    """A retriever's hits for known questions, searched once (every setting fuses the same lists)."""

    def __init__(self, retriever: Retriever, questions: Sequence[str]) -> None:
        unique = list(dict.fromkeys(questions))
        self.hits = dict(zip(unique, retriever.search(unique, k=DEPTH), strict=True))

    def search(self, queries: Sequence[str], k: int = 10, exclude: Exclude = None) -> list[list[Hit]]:
        assert k <= DEPTH and not any(exclude or ())  # nothing excluded in a known-item search
        return [self.hits[q][:k] for q in queries]


def _visual(pages: Sequence[Page], tmp: Path) -> Retriever:
    """An exact MaxSim index of ``pages`` by a tiny random ColQwen2 (no trained weights exist here)."""
    from evidra.models.tiny import build_tiny
    from evidra.retrieval.interfaces import EncoderOptions
    from evidra.retrieval.lifecycle.index_folder import build_index

    model = build_tiny("colqwen2", tmp / "tiny-colqwen2")
    return build_index(
        pages, tmp / "visual", "colqwen2", model, options=EncoderOptions(batch_size=8)
    ).retriever


def _scores(retriever: Retriever, items: Sequence[KnownItem]) -> dict[str, float]:
    queries = {f"q{i}": it.question for i, it in enumerate(items)}
    qrels = {f"q{i}": {it.page_id: 1.0} for i, it in enumerate(items)}
    m = evaluate(retriever, queries, qrels, ks=(1, 5, 10)).metrics
    return {"r1": m["recall@1"], "r5": m["recall@5"], "mrr": m["mrr@10"]}


def _fused(arms: dict[str, Answered], pair: tuple[str, str], setting: Setting) -> HybridRetriever:
    weights = tuple(1.0 if name == BASE else setting.other_weight for name in pair)
    fusion = replace(setting.fusion, weights=None if weights == (1.0, 1.0) else weights)
    return HybridRetriever((arms[pair[0]], arms[pair[1]]), fusion)


def measure(
    pages: Sequence[Page], items: Sequence[KnownItem], tmp: Path
) -> tuple[dict[str, dict[str, float]], dict[tuple[str, tuple[str, str]], dict[str, float]]]:
    """Single retrievers by name, and every (setting, pair) fused."""
    questions = [it.question for it in items]
    texts = {p.id: p.text for p in pages}
    built: dict[str, Retriever] = {
        name: BM25Retriever.build(texts, params) for name, params in VARIANTS.items()
    }
    built[VISUAL] = _visual(pages, tmp)
    arms = {name: Answered(r, questions) for name, r in built.items()}
    singles = {name: _scores(arm, items) for name, arm in arms.items()}
    fused = {(s.label, pair): _scores(_fused(arms, pair, s), items) for s in SETTINGS for pair in PAIRS}
    return singles, fused


def _pages(args: argparse.Namespace, tmp: Path) -> list[Page]:
    """The pages of ``--store``, of the PDFs in ``--pdfs``, or of a generated manual of
    ``--fixture-pages`` pages, ingested into ``tmp``."""
    if args.store:
        with PageStore.open(args.store) as store:
            return store.pages()
    source = args.pdfs
    if not source:
        (tmp / "docs").mkdir()
        source = str(fixture_pdf(tmp / "docs" / "manual.pdf", pages=args.fixture_pages))
    ingest(source, tmp / "store", dpi=args.dpi)
    with PageStore.open(tmp / "store") as store:
        return store.pages()


def _name(pair: tuple[str, str]) -> str:
    return " + ".join(pair)


def report(
    singles: dict[str, dict[str, float]], fused: dict[tuple[str, tuple[str, str]], dict[str, float]]
) -> None:
    print("| retriever | recall@1 | recall@5 | MRR@10 |\n|---|---|---|---|")
    for name, m in singles.items():
        print(f"| {name} | {m['r1']:.3f} | {m['r5']:.3f} | {m['mrr']:.3f} |")
    print("\n| fusion | retrievers | recall@1 | recall@5 | MRR@10 |\n|---|---|---|---|---|")
    for (label, pair), m in fused.items():
        print(f"| {label} | {_name(pair)} | {m['r1']:.3f} | {m['r5']:.3f} | {m['mrr']:.3f} |")
    print("\nMRR@10 by pair (" + "; ".join(f"{i + 1}: {_name(p)}" for i, p in enumerate(PAIRS)) + ")")
    print("| fusion | " + " | ".join(str(i + 1) for i in range(len(PAIRS))) + " |")
    print("|---|" + "---|" * len(PAIRS))
    for s in SETTINGS:
        print(f"| {s.label} | " + " | ".join(f"{fused[s.label, p]['mrr']:.3f}" for p in PAIRS) + " |")


def _label(fusion: Fusion) -> str:
    k = f" k={fusion.rrf_k}" if fusion.rule == "rrf" else ""
    return f"{fusion.rule}{k} depth={fusion.depth}"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    where = parser.add_mutually_exclusive_group()  # none given: the generated manual (--fixture)
    where.add_argument("--store", help="a page store from `evidra ingest`")
    where.add_argument("--pdfs", help="a folder of PDFs, ingested into a temporary store")
    where.add_argument("--fixture", action="store_true", help="a small generated manual (the default)")
    parser.add_argument(
        "--fixture-pages", type=int, default=40, help="pages of the generated manual (default: 40)"
    )
    parser.add_argument("--dpi", type=float, default=36.0, help="render resolution for --pdfs (default: 36)")
    parser.add_argument("--per-page", type=int, default=4, help="questions per page at most (default: 4)")
    parser.add_argument(
        "--max-items", type=int, default=2000, help="questions in all at most (default: 2000)"
    )
    parser.add_argument("--seed", type=int, default=0, help="question sampling seed (default: 0)")
    args = parser.parse_args()
    assert _label(PREVIOUS) in {s.label for s in SETTINGS} and _label(DEFAULT_FUSION) in {
        s.label for s in SETTINGS
    }
    with tempfile.TemporaryDirectory() as tmp:  # the pages' images live here until measured
        pages = _pages(args, Path(tmp))
        items = known_items(pages, per_page=args.per_page, max_items=args.max_items, seed=args.seed)
        print(f"{len(pages)} pages, {len(items)} known items")
        singles, fused = measure(pages, items, Path(tmp))
    report(singles, fused)
    signal = [p for p in PAIRS if p not in WEAK]

    def mean(fusion: Fusion, pairs: Sequence[tuple[str, str]]) -> float:
        return fmean(fused[_label(fusion), p]["mrr"] for p in pairs)

    chosen = f"{DEFAULT_FUSION.rule}:{DEFAULT_FUSION.depth}"
    print(
        f"RESULT single_mrr={singles[BASE]['mrr']:.3f} previous_signal_mrr={mean(PREVIOUS, signal):.3f} "
        f"default_signal_mrr={mean(DEFAULT_FUSION, signal):.3f} previous_weak_mrr={mean(PREVIOUS, WEAK):.3f} "
        f"default_weak_mrr={mean(DEFAULT_FUSION, WEAK):.3f} default={chosen}"
    )


if __name__ == "__main__":
    main()

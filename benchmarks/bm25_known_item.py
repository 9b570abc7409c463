"""Known-item retrieval on real documents: BM25 with and without stop words and stemming.

Questions are written from the pages themselves, as a reader who remembers a passage would ask
for it: a section heading becomes "Where does the manual explain <heading>?", a stretch of six
words of a sentence becomes "What does the documentation say about <words>?" (one of a few such
phrasings, seeded), and the function a reference entry defines (a line ending in
"[Function]", as Texinfo manuals print them) becomes "What does <function> do?". The gold page
is the page the words were taken from; a heading or stretch
that occurs on another page too (running heads, repeated prototypes) is never asked. Every
variant of the analyzer indexes the same pages and answers the same questions:

* ``plain``            lower-cased word tokens (evidra's BM25 before analyzers; ``language=none``)
* ``stop words``       English stop words dropped (bm25s' list), no stemming: the default of
                       ``evidra index build --encoder bm25``
* ``stemming``         Snowball English stemming (PyStemmer), no stop words dropped
* ``stop + stem``      both (``--stem``)

Columns: recall@1, recall@5 and MRR@10 over the known items. Documents: a page store from
``evidra ingest`` (``--store``), a folder of PDFs (``--pdfs``, ingested into a temporary store at
``--dpi``), or ``--fixture``, a small document written by evidra's own PDF writer (what the tests
run, and what runs when none of the three is given). Real documents used for the figures in
docs/retrieval.md: the PDF manuals that Debian's ``libtasn1-doc``, ``libidn2-doc`` and
``libgcrypt20-doc`` packages ship::

    apt-get download libtasn1-doc libidn2-doc libgcrypt20-doc
    for f in *.deb; do dpkg -x "$f" x; done; find x -name '*.pdf*' -exec cp {} pdfs/ \\; ; gunzip pdfs/*.gz
    OMP_NUM_THREADS=1 python benchmarks/bm25_known_item.py --pdfs pdfs/ --max-items 600

The last line is ``RESULT plain_mrr=<a> default_mrr=<b> plain_r1=<c> default_r1=<d>`` (default:
stop words, no stemming). ``hybrid_known_item.py`` asks the same known items of fused retrievers.
"""

from __future__ import annotations

import argparse
import random
import re
import tempfile
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from evidra.core.types import Page
from evidra.corpus import PageStore, ingest
from evidra.eval.retrieval import evaluate
from evidra.retrieval.encoders.bm25 import BM25Params, BM25Retriever

VARIANTS = {
    "plain": BM25Params(language="none"),
    "stop words": BM25Params(language="en", stopwords=True, stem=False),  # evidra's default
    "stemming": BM25Params(language="en", stopwords=False, stem=True),
    "stop + stem": BM25Params(language="en", stopwords=True, stem=True),
}
HEADING_ASKS = ("Where does the manual explain {}?", "Which section covers {}?", "Where is {} described?")
SENTENCE_ASKS = (
    "What does the documentation say about {}?",
    "Where is it said that {}?",
    "Which page mentions {}?",
)
FUNCTION_ASKS = ("What does {} do?", "How do I use {}?", "What does {} return?")
_FUNCTION = re.compile(r".*?\b([A-Za-z_][A-Za-z0-9_]{3,})\s*\(.*\[(?:Function|Macro)\]\s*$")
_HEADING = re.compile(r"(?:\d+(?:\.\d+)*\.?\s+)?([A-Z][\w\- ,/()]+)")
WINDOW = 6


@dataclass(frozen=True)
class KnownItem:
    question: str
    page_id: str
    kind: str  # heading | sentence | function


def lines_of(page: Page) -> list[str]:
    """The page's text lines: words grouped while they sit on one baseline, left to right."""
    lines: list[list[str]] = []
    last = None
    for word in page.words:
        b = word.box
        centre, height = (b.y1 + b.y2) / 2, max(b.height, 1.0)
        if last is not None and abs(centre - last[0]) < height / 2 and b.x1 >= last[1] - 1:
            lines[-1].append(word.text)
        else:
            lines.append([word.text])
        last = (centre, b.x2)
    return [" ".join(words) for words in lines]


def _norm(text: str) -> str:
    return " ".join(re.findall(r"\w+", text.lower()))


def _candidates(page: Page) -> list[tuple[str, str]]:
    """(kind, text) for every defined function, heading-like line and six-word stretch of a
    sentence-like line."""
    out = []
    for line in lines_of(page):
        words = line.split()
        function = _FUNCTION.match(line)
        if function:
            out.append(("function", function.group(1)))
            continue
        letters = sum(ch.isalpha() for ch in line)
        if 2 <= len(words) <= 8 and letters >= 10 and not line.endswith((".", ",", ";", ":")):
            match = _HEADING.fullmatch(line)
            if match:
                out.append(("heading", match.group(1).strip()))
        elif len(words) >= 9 and letters >= 0.6 * len(line):
            start = len(words) // 3
            out.append(("sentence", " ".join(words[start : start + WINDOW]).strip(".,;:")))
    return out


def known_items(
    pages: Sequence[Page], *, per_page: int = 2, max_items: int = 600, seed: int = 0
) -> list[KnownItem]:
    """Up to ``per_page`` questions per page, about text no other page holds; ``max_items`` in all."""
    rng = random.Random(seed)
    per = {p.id: _candidates(p) for p in pages}
    # a stretch shared by two pages (running heads, footers, repeated text) has no single gold page
    owners = Counter(_norm(text) for items in per.values() for _, text in set(items))
    items = []
    for page in pages:
        texts = [(k, t) for k, t in per[page.id] if owners[_norm(t)] == 1 and len(_norm(t)) >= 8]
        for kind, text in rng.sample(texts, min(per_page, len(texts))):
            asks = {"heading": HEADING_ASKS, "sentence": SENTENCE_ASKS, "function": FUNCTION_ASKS}[kind]
            items.append(KnownItem(rng.choice(asks).format(text), page.id, kind))
    rng.shuffle(items)
    return items[:max_items]


def measure(pages: Sequence[Page], items: Sequence[KnownItem]) -> dict[tuple[str, str], dict[str, float]]:
    """recall@1, recall@5 and MRR@10 of every analyzer variant, over all ``items`` and per kind."""
    texts = {p.id: p.text for p in pages}
    out = {}
    for name, params in VARIANTS.items():
        retriever = BM25Retriever.build(texts, params)
        for kind in ("all", *sorted({it.kind for it in items})):
            chosen = [it for it in items if kind in ("all", it.kind)]
            queries = {f"q{i}": it.question for i, it in enumerate(chosen)}
            qrels = {f"q{i}": {it.page_id: 1.0} for i, it in enumerate(chosen)}
            m = evaluate(retriever, queries, qrels, ks=(1, 5, 10)).metrics
            out[name, kind] = {"recall@1": m["recall@1"], "recall@5": m["recall@5"], "mrr@10": m["mrr@10"]}
    return out


def fixture_pdf(path: Path, *, pages: int = 6, seed: int = 0) -> Path:
    """A small manual written by evidra's PDF writer: a numbered heading and sentences per page."""
    from evidra.corpus.pdfwriter import PdfCanvas, write_pdf

    rng = random.Random(seed)
    verbs = ("decodes", "encodes", "validates", "allocates", "releases", "parses", "copies", "hashes")
    nouns = (
        "certificate",
        "structure",
        "buffer",
        "element",
        "signature",
        "context",
        "string",
        "key",
        "tag",
        "length",
        "value",
        "node",
        "handle",
        "digest",
        "cipher",
        "stream",
        "octet",
        "field",
    )
    canvases = []
    for i in range(pages):
        c = PdfCanvas(612, 792)
        topic = f"{nouns[i % len(nouns)].title()} {rng.choice(verbs)[:-1]}ing"
        c.text(72, 80, f"{i + 1}.{rng.randint(1, 9)} {topic} functions", 16)
        for line in range(12):
            words = [
                "The",
                "function",
                f"fn_{i}_{line}",
                rng.choice(verbs),
                "the",
                rng.choice(nouns),
                "and",
                "then",
                rng.choice(verbs),
                "every",
                rng.choice(nouns),
                "of",
                "the",
                rng.choice(nouns),
            ]
            c.text(72, 120 + 22 * line, " ".join(words) + ".", 10)
        canvases.append(c)
    path.write_bytes(write_pdf(canvases))
    return path


def _pages(args: argparse.Namespace, tmp: Path) -> list[Page]:
    if args.store:
        with PageStore.open(args.store) as store:
            return store.pages()
    source = args.pdfs
    if not source:  # --fixture, or nothing said
        (tmp / "docs").mkdir()
        source = str(fixture_pdf(tmp / "docs" / "manual.pdf"))
    ingest(source, tmp / "store", dpi=args.dpi)
    with PageStore.open(tmp / "store") as store:
        return store.pages()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    where = parser.add_mutually_exclusive_group()  # none given: the generated manual (--fixture)
    where.add_argument("--store", help="a page store from `evidra ingest`")
    where.add_argument("--pdfs", help="a folder of PDFs, ingested into a temporary store")
    where.add_argument(
        "--fixture", action="store_true", help="a small generated manual (the tests' input; the default)"
    )
    parser.add_argument("--dpi", type=float, default=36.0, help="render resolution for --pdfs (default: 36)")
    parser.add_argument("--per-page", type=int, default=2, help="questions per page at most (default: 2)")
    parser.add_argument("--max-items", type=int, default=600, help="questions in all at most (default: 600)")
    parser.add_argument("--seed", type=int, default=0, help="question sampling seed (default: 0)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        pages = _pages(args, Path(tmp))
    items = known_items(pages, per_page=args.per_page, max_items=args.max_items, seed=args.seed)
    kinds = Counter(it.kind for it in items)
    print(
        f"{len(pages)} pages, {len(items)} known items: "
        + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
    )
    results = measure(pages, items)
    print("| tokens | questions | recall@1 | recall@5 | MRR@10 |\n|---|---|---|---|---|")
    for (name, kind), m in sorted(results.items(), key=lambda kv: (kv[0][1] != "all", kv[0][1])):
        print(f"| {name} | {kind} | {m['recall@1']:.3f} | {m['recall@5']:.3f} | {m['mrr@10']:.3f} |")
    plain, best = results["plain", "all"], results["stop words", "all"]
    print(
        f"RESULT plain_mrr={plain['mrr@10']:.3f} default_mrr={best['mrr@10']:.3f} "
        f"plain_r1={plain['recall@1']:.3f} default_r1={best['recall@1']:.3f}"
    )


if __name__ == "__main__":
    main()

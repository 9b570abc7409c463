"""A three-page store and the tool calls of one trajectory, shared by the verl tool tests (with
and without verl installed)."""

from __future__ import annotations

from pathlib import Path

TEXTS = {
    "A": "quarterly revenue table 2021",
    "B": "employee headcount chart",
    "C": "revenue forecast outlook",
}
# one trajectory: search (C ranks first for these words), crop C, search again (C seen: A),
# a crop whose box is no list, and a search without its argument
CALLS: list[tuple[str, object]] = [
    ("search", {"query": "revenue forecast outlook"}),
    ("bbox", {"box": [100, 100, 300, 400]}),
    ("search", {"query": "revenue"}),
    ("bbox", {"box": "100, 100, 300, 400"}),
    ("search", {}),
]


def make_store(root: Path) -> dict[str, str]:
    """Ingest one 600 x 800 pt page per text (72 dpi: 600 x 800 px); its page id by letter."""
    from evidra.corpus.ingest import ingest
    from evidra.corpus.pdfwriter import PdfCanvas, write_pdf
    from evidra.corpus.store import PageStore

    docs = root / "docs"
    docs.mkdir(parents=True)
    for letter, text in TEXTS.items():
        canvas = PdfCanvas(600, 800)
        canvas.text(40, 100, text, 20)
        (docs / f"{letter}.pdf").write_bytes(write_pdf([canvas]))
    ingest(docs, root / "store", dpi=72)
    with PageStore.open(root / "store") as store:
        return {letter: next(p.id for p in store.pages() if text in p.text) for letter, text in TEXTS.items()}

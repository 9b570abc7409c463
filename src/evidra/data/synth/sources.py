"""Synthetic sample sources by name, and training mixtures of them.

``SYNTHETIC`` names every generator: ``documents`` (rendered one-page documents with gold
boxes and the PDF's text layer), ``reading`` (small pages a tiny model can learn to read:
large labels and numbers, a table, a chart, with their words), ``tunnel.<task>`` (Tunnel-Vision-style) and
``tracer.<scenario>`` (TRACER-style). A family name (``tunnel``, ``tracer``) stands for all of
its members. ``evidra eval --synthetic`` and the training data option ``data.synthetic`` read
the same names.

``mixture(["tracer", "tunnel"], root, n=700, seed=0)`` draws ``n`` training samples in equal
parts from the seven scenarios (CAVE App. C's corpus: four TRACER-style families plus three
Tunnel-Vision-style ones), interleaved so that every prefix stays balanced. Images are written
once per folder (a file lock keeps concurrent processes from racing) and the samples are kept
as JSON beside them, so later runs and other ranks read instead of redrawing.
"""

from __future__ import annotations

import difflib
import json
import logging
import os
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

from evidra.core.errors import InvalidInputError, RegistryError
from evidra.core.jsonfields import get_opt_bool, get_opt_str
from evidra.core.jsonvalue import JSON, json_kind, need_int, need_object
from evidra.core.registry import Registry
from evidra.core.types import ANSWER_TYPES, AnswerType, Box, EvidenceBox, Page, Sample
from evidra.data.synth.corpus_json import (
    box_from_json,
    box_to_json,
    build_once,
    words_from_json,
    words_to_json,
)
from evidra.data.synth.tracer import TASKS as TRACER_TASKS
from evidra.data.synth.tracer import generate_tracer
from evidra.data.synth.tunnel import TASKS as TUNNEL_TASKS
from evidra.data.synth.tunnel import generate_tunnel

logger = logging.getLogger(__name__)

SyntheticSource = Callable[[Path, int, int, str], list[Sample]]  # (out_dir, n, seed, split)
SYNTHETIC: Registry[SyntheticSource] = Registry("synthetic benchmark")


def _documents(out: Path, n: int, seed: int, split: str) -> list[Sample]:
    """Rendered documents with gold boxes and words; ``n`` questions from enough 1-page documents."""
    from evidra.data.synth.documents import generate_documents

    n_docs = max(1, (n + 1) // 2)
    root = out / f"documents_{split}_{seed}"
    corpus = generate_documents(root, n_docs=n_docs, seed=seed, dpi=72, max_pages=1, unanswerable_per_doc=0)
    return list(corpus.samples(dataset="synth_documents"))[:n]


def _reading(
    out: Path, n: int, seed: int, split: str, entries: tuple[int, ...] = (2, 3), grid: bool = False
) -> list[Sample]:
    """Small pages of a few large labels and numbers, a table or a chart (``synth.reading``)."""
    from evidra.data.synth.reading import generate_reading

    name = "reading" + ("_one" if entries == (1,) else "") + ("_grid" if grid else "")
    folder = out / f"{name}_{split}_{seed}"
    return generate_reading(folder, n, seed=seed, split=split, entries=entries, grid=grid)


def _tunnel(task: str, out: Path, n: int, seed: int, split: str) -> list[Sample]:
    return generate_tunnel(out, task, n, seed=seed, split=split)


def _tracer(task: str, out: Path, n: int, seed: int, split: str) -> list[Sample]:
    return generate_tracer(out, task, n, seed=seed, split=split)


SYNTHETIC.add("documents", _documents)
SYNTHETIC.add("reading", _reading)
SYNTHETIC.add("reading.one", partial(_reading, entries=(1,)))  # one label per page: reading alone
SYNTHETIC.add("reading.grid", partial(_reading, grid=True))  # every glyph inside one image token
SYNTHETIC.add("reading.grid.one", partial(_reading, entries=(1,), grid=True))
for _task in TUNNEL_TASKS:
    SYNTHETIC.add(f"tunnel.{_task}", partial(_tunnel, _task))
for _task in TRACER_TASKS:
    SYNTHETIC.add(f"tracer.{_task}", partial(_tracer, _task))


def synthetic_samples(
    name: str, out_dir: str | Path, n: int, seed: int = 0, split: str = "test"
) -> list[Sample]:
    """``n`` samples of one source, images under ``out_dir``; the same name, n and seed give the same."""
    return SYNTHETIC.get(name)(Path(out_dir), n, seed, split)


def expand(names: Sequence[str]) -> list[str]:
    """Source names with each family name replaced by its members, in order, without repeats. A
    name that is itself a source stands for that source alone (``reading`` is not ``reading.*``).

    >>> expand(["tunnel", "documents", "reading"])
    ['tunnel.chain', 'tunnel.circuits', 'tunnel.objreid', 'documents', 'reading']
    """
    out: list[str] = []
    for name in names:
        members = [] if name in SYNTHETIC else [m for m in SYNTHETIC.names() if m.startswith(f"{name}.")]
        if not members and name not in SYNTHETIC:
            known = sorted({m.split(".")[0] for m in SYNTHETIC.names()} | set(SYNTHETIC.names()))
            close = difflib.get_close_matches(name, known, n=3)
            hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
            raise RegistryError(f"unknown synthetic source {name!r}{hint} Known: {', '.join(known)}")
        members = members or [name]
        out += [m for m in members if m not in out]
    if not out:
        raise InvalidInputError("no synthetic source named; give at least one, e.g. tracer or tunnel")
    return out


def shares(n: int, parts: int) -> list[int]:
    """``n`` split into ``parts`` counts that differ by at most one, larger ones first.

    >>> shares(10, 4)
    [3, 3, 2, 2]
    """
    return [n // parts + (1 if k < n % parts else 0) for k in range(parts)]


def mixture(
    names: Sequence[str], root: str | Path, n: int, *, seed: int = 0, split: str = "train"
) -> list[Sample]:
    """``n`` samples in equal parts from the named sources, interleaved (source 0's first, source
    1's first, ...); written under ``root`` once and read back on later calls."""
    sources = expand(names)
    folder = Path(root) / f"{'+'.join(names)}-{split}-seed{seed}-n{n}"

    def draw() -> list[Sample]:
        logger.info("drawing %d synthetic samples from %s into %s", n, ", ".join(sources), folder)
        drawn = [
            synthetic_samples(s, folder, k, seed, split)
            for s, k in zip(sources, shares(n, len(sources)), strict=True)
        ]
        return [rows[i] for i in range(max(map(len, drawn), default=0)) for rows in drawn if i < len(rows)]

    def dump(samples: list[Sample]) -> str:
        return json.dumps([sample_to_json(s) for s in samples])

    def load(text: str) -> list[Sample]:
        return [sample_from_json(row) for row in json.loads(text)]

    return build_once(folder / "samples.json", draw, dump, load, "sample cache")


# ---- a JSON cache of samples (nothing in it can run) -------------------------------------------


def _plain(value: object) -> object:
    """JSON-able ``value``: a Box becomes ``{"__box__": [...]}``, tuples become lists."""
    if isinstance(value, Box):
        return {"__box__": box_to_json(value)}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _unplain(value: JSON) -> object:
    if isinstance(value, dict):
        return (
            box_from_json(value["__box__"])
            if set(value) == {"__box__"}
            else {k: _unplain(v) for k, v in value.items()}
        )
    if isinstance(value, list):
        return [_unplain(v) for v in value]
    return value


def sample_to_json(s: Sample) -> dict[str, object]:
    """A generated sample as plain JSON (each page's words as ``words_to_json`` rows)."""
    pages = [_page_json(p) for p in s.pages]
    evidence = s.evidence_box
    return {
        "id": s.id,
        "question": s.question,
        "answers": list(s.answers),
        "pages": pages,
        "corpus": s.corpus,
        "gold_pages": list(s.gold_pages),
        "gold_boxes": [[b.page_id, box_to_json(b.box)] for b in s.gold_boxes],
        "gold_evidence": dict(s.gold_evidence),
        "answerable": s.answerable,
        "sufficient": s.sufficient,
        "answer_type": s.answer_type,
        "dataset": s.dataset,
        "extras": _plain(dict(s.extras)),
        "evidence_box": [evidence.page_id, box_to_json(evidence.box)] if evidence is not None else None,
        "qrels": dict(s.qrels),
    }


def sample_from_json(value: JSON) -> Sample:
    """Inverse of :func:`sample_to_json` (a row written before a field existed leaves it unset);
    a row of another shape is a ``TypeError``, ``KeyError`` or ``ValueError``."""
    row = need_object(value, "a sample row")
    evidence = row.get("evidence_box")
    extras = need_object(row["extras"], "extras")
    return Sample(
        id=_text(row["id"], "id"),
        question=_text(row["question"], "question"),
        answers=_strings(row["answers"], "answers"),
        pages=tuple(_page(values) for values in _items(row["pages"], "pages")),
        corpus=get_opt_str(row, "corpus"),
        gold_pages=_strings(row["gold_pages"], "gold_pages"),
        gold_boxes=tuple(_evidence_box(b) for b in _items(row["gold_boxes"], "gold_boxes")),
        gold_evidence={k: str(v) for k, v in need_object(row["gold_evidence"], "gold_evidence").items()},
        answerable=bool(row["answerable"]),
        sufficient=get_opt_bool(row, "sufficient"),
        answer_type=_answer_type(row.get("answer_type")),
        dataset=_text(row["dataset"], "dataset"),
        extras={k: _unplain(v) for k, v in extras.items()},
        qrels={k: _grade(v) for k, v in need_object(row.get("qrels") or {}, "qrels").items()},
        evidence_box=_evidence_box(evidence) if evidence else None,
    )


def _text(value: JSON, what: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what} is {json_kind(value)}, not text")
    return value


def _items(value: JSON, what: str) -> list[JSON]:
    if not isinstance(value, list):
        raise TypeError(f"{what} is {json_kind(value)}, not a list")
    return value


def _strings(value: JSON, what: str) -> tuple[str, ...]:
    items = _items(value, what)
    if not all(isinstance(v, str) for v in items):
        raise TypeError(f"{what} must be a list of text")
    return tuple(str(v) for v in items)


def _grade(value: JSON) -> float:
    """A page's graded relevance, as stored (an integer stays one)."""
    if not isinstance(value, (int, float)):
        raise TypeError(f"a qrel grade is {json_kind(value)}, not a number")
    return value


def _evidence_box(value: JSON) -> EvidenceBox:
    """A ``[page id, box]`` pair."""
    pair = _items(value, "an evidence box")
    if len(pair) != 2:
        raise TypeError(f"an evidence box has {len(pair)} items, not [page id, box]")
    return EvidenceBox(str(pair[0]), box_from_json(pair[1]))


def _answer_type(value: JSON) -> AnswerType | None:
    for kind in ANSWER_TYPES:
        if value == kind:
            return kind
    if value is not None:
        raise ValueError(f"answer_type {value!r} is none of {ANSWER_TYPES}")
    return None


def _page_json(p: Page) -> list[object]:
    return [p.id, p.image_path, p.width, p.height, p.source, p.page_number, p.dpi, words_to_json(p.words)]


def _page(values: JSON) -> Page:
    """A page row of :func:`sample_to_json`; a row written before words were kept has 7 fields."""
    i, path, w, h, src, num, dpi, *rest = _items(values, "a page row")
    words = words_from_json(rest[0]) if rest else ()
    if dpi is not None and not isinstance(dpi, (int, float)):
        raise TypeError(f"a page's dpi is {json_kind(dpi)}, not a number")
    width, height, number = (
        need_int(w, "a page width"),
        need_int(h, "a page height"),
        need_int(num, "a page number"),
    )
    return Page(str(i), str(path), width, height, str(src), number, words, dpi)


# ---- one image per sample (CAVE's zoom tool works on one image) ---------------------------------

PANEL_GAP = 24  # px of white between panels


def side_by_side(sample: Sample) -> Sample:
    """A multi-image sample as one image: the images left to right on white, top-aligned, written
    beside the first (once); the question names the panels. A one-image sample is returned as is."""
    from PIL import Image

    if len(sample.pages) < 2:
        return sample
    first = Path(sample.pages[0].image_path)
    path = first.with_name(f"{sample.id}-panels.png")
    width = sum(p.width for p in sample.pages) + PANEL_GAP * (len(sample.pages) - 1)
    height = max(p.height for p in sample.pages)
    if not path.is_file():
        canvas = Image.new("RGB", (width, height), "white")
        x = 0
        for page in sample.pages:
            canvas.paste(page.open_image(), (x, 0))
            x += page.width + PANEL_GAP
        tmp = path.with_name(f".{path.name}.tmp")
        canvas.save(tmp, format="PNG")
        os.replace(tmp, path)
    page = Page(f"{sample.id}-panels", str(path), width, height, source=path.name)
    ordinals = ("first", "second", "third", "fourth")
    names = ", ".join(f"the {ordinals[k]} image is panel {k + 1}" for k in range(min(len(sample.pages), 4)))
    question = f"The image shows {len(sample.pages)} panels from left to right: {names}. {sample.question}"
    evidence = " ".join(t for t in sample.gold_evidence.values() if t)
    return Sample(
        id=sample.id,
        question=question,
        answers=sample.answers,
        pages=(page,),
        gold_pages=(page.id,),
        gold_evidence={page.id: evidence} if evidence else {},
        answerable=sample.answerable,
        dataset=sample.dataset,
        extras=sample.extras,
        evidence_box=_on_panels(sample, page),
    )


def _on_panels(sample: Sample, panels: Page) -> EvidenceBox | None:
    """The sample's evidence box moved onto the side-by-side image ``panels``."""
    if sample.evidence_box is None:
        return None
    k = sample.page_index(sample.evidence_box.page_id)
    dx = sum(p.width for p in sample.pages[:k]) + PANEL_GAP * k
    b = sample.evidence_box.box
    return EvidenceBox(panels.id, Box(b.x1 + dx, b.y1, b.x2 + dx, b.y2))

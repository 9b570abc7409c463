"""Content and layout of synthetic pages, shared by the PDF and PNG writers of ``documents.py``.

A page is laid out in points (origin top-left) with the caller's text measure, producing
drawing operations (``Run`` text, ``Shape`` rectangles/lines) and ``Fact`` records that say
which run holds each answer and which runs/rectangles make up its evidence. Names are drawn
without replacement per corpus, so every question has one answer across the whole corpus.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

Color = tuple[float, float, float]
Rect = tuple[float, float, float, float]
KINDS: tuple[Literal["text", "table", "chart"], ...] = ("text", "table", "chart")
MARGIN = 72.0
BODY_WIDTH = 612.0 - 2 * MARGIN

PROJECTS = (
    "Orion",
    "Vega",
    "Lyra",
    "Draco",
    "Aquila",
    "Cygnus",
    "Perseus",
    "Phoenix",
    "Hydra",
    "Pegasus",
    "Andromeda",
    "Carina",
    "Cassini",
    "Kepler",
    "Halley",
    "Sirius",
    "Rigel",
    "Altair",
    "Deneb",
    "Polaris",
    "Antares",
    "Castor",
    "Pollux",
    "Mira",
    "Electra",
    "Atlas",
    "Titan",
    "Helios",
    "Juno",
    "Ceres",
)
CITIES = (
    "Lisbon",
    "Porto",
    "Madrid",
    "Seville",
    "Lyon",
    "Nantes",
    "Turin",
    "Genoa",
    "Munich",
    "Bremen",
    "Krakow",
    "Gdansk",
    "Vienna",
    "Graz",
    "Zurich",
    "Basel",
    "Ghent",
    "Bruges",
    "Leiden",
    "Utrecht",
    "Aarhus",
    "Bergen",
    "Tampere",
    "Uppsala",
    "Tallinn",
    "Riga",
    "Vilnius",
    "Brno",
    "Ljubljana",
    "Split",
    "Sofia",
    "Varna",
    "Cork",
    "Galway",
    "Dundee",
    "Leeds",
    "Bristol",
    "Cardiff",
    "Malaga",
    "Bilbao",
)
COMPANIES = (
    "Northwind",
    "Bluepeak",
    "Redwood",
    "Silverline",
    "Greenfield",
    "Ironbridge",
    "Stonegate",
    "Brightwater",
    "Eastgate",
    "Westbrook",
    "Clearview",
    "Highland",
)
ABSENT = ("Zephyr", "Nimbus", "Quasar", "Boreas", "Tethys", "Umbra", "Solstice", "Meridian")  # never drawn
FIRST = ("Ana", "Jonas", "Marta", "Pedro", "Elena", "Tomas", "Sofia", "Lukas", "Irene", "Mateo", "Clara")
LAST = ("Silva", "Novak", "Berg", "Costa", "Weber", "Moreau", "Rossi", "Larsen", "Horvat", "Keller")
REGIONS = ("the northern region", "the coastal provinces", "the river valley", "the eastern district")
FILLERS = (
    "Its progress is reviewed by an independent panel every year.",
    "The team publishes a short report after each milestone.",
    "Several partner institutions contribute data and equipment.",
    "Most of the work takes place in shared laboratories.",
    "External auditors have praised its careful planning.",
)


class Measure(Protocol):
    def width(self, text: str, size: float) -> float: ...


@dataclass(frozen=True)
class Run:
    """Text drawn with its left end at ``x`` and its baseline at ``baseline`` (points from the top)."""

    x: float
    baseline: float
    text: str
    size: float
    color: Color = (0.0, 0.0, 0.0)


@dataclass(frozen=True)
class Shape:
    kind: Literal["rect", "line"]
    x0: float
    y0: float
    x1: float
    y1: float
    fill: Color | None = None
    stroke: Color | None = None
    width: float = 1.0


@dataclass(frozen=True)
class Fact:
    question: str
    answers: tuple[str, ...]
    kind: Literal["text", "table", "chart"]
    answer_run: Run
    evidence_runs: tuple[Run, ...]
    evidence_rects: tuple[Rect, ...]
    evidence_text: str


@dataclass
class Layout:
    ops: list[Run | Shape] = field(default_factory=list)
    facts: list[Fact] = field(default_factory=list)


class _Pool:
    """Names drawn without replacement; once exhausted, the names come back numbered ("Orion 2")."""

    def __init__(self, rng: random.Random, names: Sequence[str]) -> None:
        self._rng, self._names, self._round, self._left = rng, tuple(names), 1, list(names)
        rng.shuffle(self._left)

    def draw(self) -> str:
        if not self._left:
            self._round += 1
            self._left = [f"{n} {self._round}" for n in self._names]
            self._rng.shuffle(self._left)
        return self._left.pop()


@dataclass
class Pools:
    projects: _Pool
    cities: _Pool
    companies: _Pool
    absent: _Pool

    @classmethod
    def new(cls, rng: random.Random) -> Pools:
        return cls(_Pool(rng, PROJECTS), _Pool(rng, CITIES), _Pool(rng, COMPANIES), _Pool(rng, ABSENT))


# -- paragraphs --------------------------------------------------------------------------------
Piece = tuple[str, int | None]  # text, index of the answer slot it fills (None for plain text)


@dataclass(frozen=True)
class Sentence:
    units: tuple[tuple[Piece, ...], ...]  # space-separated, never broken across lines
    questions: tuple[tuple[str, tuple[str, ...]], ...]  # per slot: question, accepted answers

    @property
    def text(self) -> str:
        return " ".join("".join(t for t, _ in unit) for unit in self.units)


def _sentence(
    template: str, slots: Sequence[str], questions: Sequence[tuple[str, tuple[str, ...]]]
) -> Sentence:
    """Split ``template`` ("... {0} ...") on spaces; a slot's value stays one unbreakable unit."""
    units = []
    for word in template.split(" "):
        pieces: list[Piece] = []
        for part in re.split(r"(\{\d\})", word):
            if re.fullmatch(r"\{\d\}", part):
                pieces.append((slots[int(part[1])], int(part[1])))
            elif part:
                pieces.append((part, None))
        units.append(tuple(pieces))
    return Sentence(tuple(units), tuple(questions))


def _project_sentences(rng: random.Random, name: str) -> list[Sentence]:
    year, city, staff = str(rng.randint(1950, 2015)), rng.choice(CITIES), str(rng.randint(12, 480))
    person, budget, when = (
        f"{rng.choice(FIRST)} {rng.choice(LAST)}",
        rng.randint(2, 95),
        rng.randint(2016, 2024),
    )
    facts = [
        _sentence(
            f"The {name} project was founded in {{0}} in {{1}}.",
            [year, city],
            [
                (f"In which year was the {name} project founded?", (year,)),
                (f"In which city was the {name} project founded?", (city,)),
            ],
        ),
        _sentence(
            f"The {name} project is led by {{0}}.", [person], [(f"Who leads the {name} project?", (person,))]
        ),
        _sentence(
            f"The {name} project employs {{0}} engineers.",
            [staff],
            [(f"How many engineers does the {name} project employ?", (staff,))],
        ),
        _sentence(
            f"In {when}, the {name} project received a budget of {{0}}.",
            [f"{budget} million euros"],
            [
                (
                    f"What budget did the {name} project receive in {when}?",
                    (f"{budget} million euros", f"{budget} million"),
                )
            ],
        ),
    ]
    chosen = rng.sample(facts, 3) + [_sentence(f, [], []) for f in rng.sample(FILLERS, 2)]
    return [chosen[0], *rng.sample(chosen[1:], len(chosen) - 1)]


def _wrap(
    sentences: Sequence[Sentence], m: Measure, size: float
) -> list[list[tuple[int, str, tuple[Piece, ...]]]]:
    """Greedy line breaking: lines of (sentence index, unit text, unit pieces)."""
    lines: list[list[tuple[int, str, tuple[Piece, ...]]]] = [[]]
    for si, sentence in enumerate(sentences):
        for unit in sentence.units:
            text = "".join(t for t, _ in unit)
            candidate = " ".join([u[1] for u in lines[-1]] + [text])
            if lines[-1] and m.width(candidate, size) > BODY_WIDTH:
                lines.append([])
            lines[-1].append((si, text, unit))
    return lines


def _paragraph(
    layout: Layout, m: Measure, y: float, sentences: Sequence[Sentence], size: float = 11
) -> float:
    """Lay out body text from ``y``; record a fact per answer slot. Returns the next free y."""
    answer_runs: dict[tuple[int, int], Run] = {}
    evidence: dict[int, list[Run]] = {}
    for line in _wrap(sentences, m, size):
        y += size * 1.4
        layout.ops.append(Run(MARGIN, y, " ".join(u[1] for u in line), size))
        for k, (si, _, unit) in enumerate(line):
            prefix = " ".join(u[1] for u in line[:k]) + (" " if k else "")
            if k == 0 or line[k - 1][0] != si:  # first unit of this sentence on this line
                part = " ".join(u[1] for u in line[k:] if u[0] == si)
                evidence.setdefault(si, []).append(Run(MARGIN + m.width(prefix, size), y, part, size))
            offset = m.width(prefix, size)
            for text, slot in unit:
                if slot is not None:
                    answer_runs[(si, slot)] = Run(MARGIN + offset, y, text, size)
                offset += m.width(text, size)
    for (si, slot), run in answer_runs.items():
        question, answers = sentences[si].questions[slot]
        layout.facts.append(Fact(question, answers, "text", run, tuple(evidence[si]), (), sentences[si].text))
    return y


def _text_page(rng: random.Random, pools: Pools, m: Measure, layout: Layout) -> None:
    y = MARGIN
    for _ in range(3):
        name = pools.projects.draw()
        y += 18
        layout.ops.append(Run(MARGIN, y, f"The {name} project", 14))
        y = _paragraph(layout, m, y + 4, _project_sentences(rng, name)) + 14


# -- tables and charts -------------------------------------------------------------------------
def _table_page(rng: random.Random, pools: Pools, m: Measure, layout: Layout, size: float = 11) -> None:
    title = f"Table 1: Cities of {rng.choice(REGIONS)}"
    layout.ops.append(Run(MARGIN, MARGIN + 18, title, 14))
    header = ("City", "Population", "Founded")
    rows = [
        (pools.cities.draw(), f"{rng.randint(40_000, 2_500_000):,}", str(rng.randint(900, 1900)))
        for _ in range(rng.randint(4, 7))
    ]
    pad, row_h = 8.0, 20.0
    widths = [max(m.width(r[c], size) for r in [header, *rows]) + 2 * pad for c in range(3)]
    xs = [MARGIN, MARGIN + widths[0], MARGIN + widths[0] + widths[1], MARGIN + sum(widths)]
    top = MARGIN + 36
    bottom = top + row_h * (len(rows) + 1)
    layout.ops.append(Shape("rect", xs[0], top, xs[3], top + row_h, fill=(0.85, 0.85, 0.85)))
    for r, row in enumerate([header, *rows]):
        y0 = top + r * row_h
        for c, cell in enumerate(row):
            run = Run(xs[c] + pad, y0 + 14, cell, size)
            layout.ops.append(run)
            if r and c:
                question = (
                    f"What is the population of {row[0]} according to the table?"
                    if c == 1
                    else f"In which year was {row[0]} founded according to the table?"
                )
                rect = (xs[0], y0, xs[3], y0 + row_h)
                layout.facts.append(Fact(question, (cell,), "table", run, (), (rect,), " | ".join(row)))
    for r in range(len(rows) + 2):
        layout.ops.append(Shape("line", xs[0], top + r * row_h, xs[3], top + r * row_h, stroke=(0, 0, 0)))
    for x in xs:
        layout.ops.append(Shape("line", x, top, x, bottom, stroke=(0, 0, 0)))


def _chart_page(rng: random.Random, pools: Pools, m: Measure, layout: Layout, size: float = 10) -> None:
    company = pools.companies.draw()
    layout.ops.append(Run(MARGIN, MARGIN + 18, f"Annual revenue of {company} (million USD)", 14))
    left, right, top, bottom = 110.0, 520.0, 150.0, 450.0
    first, n = rng.randint(2010, 2018), rng.randint(4, 6)
    slot = (right - left) / n
    for tick in (0, 25, 50, 75, 100):
        y = bottom - tick / 100 * (bottom - top)
        label = str(tick)
        layout.ops.append(Run(left - 8 - m.width(label, 9), y + 3, label, 9, (0.3, 0.3, 0.3)))
        layout.ops.append(Shape("line", left - 4, y, left, y, stroke=(0, 0, 0)))
    for k in range(n):
        year, value = str(first + k), rng.randint(12, 95)
        x0, x1 = left + (k + 0.2) * slot, left + (k + 0.8) * slot
        bar_top = bottom - value / 100 * (bottom - top)
        centre = (x0 + x1) / 2
        layout.ops.append(Shape("rect", x0, bar_top, x1, bottom, fill=(0.25, 0.45, 0.75)))
        value_run = Run(centre - m.width(str(value), size) / 2, bar_top - 5, str(value), size)
        year_run = Run(centre - m.width(year, size) / 2, bottom + 15, year, size)
        layout.ops += [value_run, year_run]
        question = f"What was the revenue of {company} in {year} according to the chart?"
        rect = (x0, bar_top, x1, bottom)
        layout.facts.append(
            Fact(
                question,
                (str(value),),
                "chart",
                value_run,
                (value_run, year_run),
                (rect,),
                f"{year}: {value}",
            )
        )
    layout.ops.append(Shape("line", left, top - 10, left, bottom, stroke=(0, 0, 0)))
    layout.ops.append(Shape("line", left, bottom, right, bottom, stroke=(0, 0, 0)))


def layout_page(
    rng: random.Random, pools: Pools, m: Measure, kind: Literal["text", "table", "chart"]
) -> Layout:
    """Generate and lay out one page of ``kind``."""
    layout = Layout()
    {"text": _text_page, "table": _table_page, "chart": _chart_page}[kind](rng, pools, m, layout)
    return layout


def absent_question(rng: random.Random, pools: Pools) -> str:
    """A question about a name that no generated page mentions."""
    name = pools.absent.draw()
    if rng.random() < 0.5:
        return f"In which year was the {name} project founded?"
    return f"What was the revenue of {name} in {rng.randint(2010, 2022)} according to the chart?"

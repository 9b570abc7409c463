"""VISA (Ma et al., ACL 2025): Wiki-VISA, Paper-VISA and FineWeb-VISA.

Each row is a question with its own page screenshot (``image``), an answer box in absolute
pixels of that image (``bounding_box``), and ``candidates``: row ids resolved against train and
test together, with ``pos_idx`` the positive's index or -1 when it is absent ("No Answer").
Rows whose ``candidates`` are empty (some Paper-VISA rows) fall back to the single-oracle
setting: the row's own page. Strata follow the official summary: Wiki-VISA splits passages
(``long_answer_type == "p"``) on the first screen (y1 < 980) from later ones and non-passages;
Paper-VISA splits text from non-text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

from evidra.core import imagefiles
from evidra.core.errors import InvalidInputError
from evidra.core.types import Box, EvidenceBox, Page, Sample
from evidra.data.loaders._records import (
    Record,
    as_float,
    as_int,
    as_str,
    literal_list,
    materialize_page,
    read_records,
)
from evidra.data.loaders.loader import LOADERS, default_image_dir

NO_ANSWER = "No Answer"  # VISA's expected output when the positive is absent
FIRST_SCREEN = 980  # Wiki-VISA screenshots are 980 px wide; y1 < 980 is the "first page"


def _wiki_stratum(rec: Record, box: Box) -> str:
    if as_str(rec.get("long_answer_type")) != "p":
        return "non_passage"
    return "first_page_passage" if box.y1 < FIRST_SCREEN else "later_page_passage"


def _paper_stratum(rec: Record, box: Box) -> str:
    return "text" if as_str(rec.get("long_answer_type")) == "text" else "non_text"


STRATA: dict[str, Callable[[Record, Box], str]] = {
    "wiki": _wiki_stratum,
    "paper": _paper_stratum,
    "fineweb": _wiki_stratum,
}


def _box(rec: Record) -> Box:
    raw = literal_list(rec.require("bounding_box"), rec, "bounding_box")
    if len(raw) != 4:
        raise InvalidInputError(f"{rec.where()}: bounding_box must be [x1, y1, x2, y2], got {raw!r}")
    x1, y1, x2, y2 = (as_float(v, rec, "bounding_box") for v in raw)
    return Box.from_points(x1, y1, x2, y2)


def _page(rows: dict[str, Record], row_id: str, image_dir: Path, owner: Record) -> Page:
    rec = rows.get(row_id)
    if rec is None:
        raise InvalidInputError(
            f"{owner.where()}: candidate {row_id!r} is not a row of the loaded files; pass the "
            "other split's files as pool= (candidates resolve against train + test)"
        )
    return materialize_page(
        rec.require("image"), rec, page_id=row_id, image_dir=image_dir, source=as_str(rec.get("url"))
    )


OFFICIAL_WIDTH = 700  # VISA's evaluation resizes every image to width 700


def resize_page(page: Page, width: int, image_dir: Path) -> Page:
    """The page resized to ``width`` (aspect kept), written once beside the other images."""
    from PIL import Image

    height = round(page.height * width / page.width)
    path = image_dir / f"{Path(page.image_path).stem}_w{width}.png"
    if not path.exists():
        image = imagefiles.decode(page.image_path, f"page {page.id!r}: image {page.image_path}")
        image.resize((width, height), Image.Resampling.BICUBIC).save(path)
    return Page(page.id, str(path), width, height, source=page.source, page_number=page.page_number)


def official_box(box: Box, page_width: int, width: int = OFFICIAL_WIDTH) -> Box:
    """VISA eval's box scaling ``int(b / (w / 700))`` (truncation, as the released script).

    >>> official_box(Box(49, 1200, 539, 1400), 980).as_tuple()
    (35.0, 857.0, 385.0, 1000.0)
    """
    ratio = page_width / width
    x1, y1, x2, y2 = (float(int(v / ratio)) for v in box.as_tuple())
    return Box(x1, y1, x2, y2)


def _sample(
    rec: Record, rows: dict[str, Record], variant: str, image_dir: Path, oracle: bool, resize: int | None
) -> Sample:
    row_id = as_str(rec.require("id"))
    candidates = [as_str(c) for c in literal_list(rec.get("candidates") or [], rec, "candidates")]
    pos_idx = as_int(rec.get("pos_idx", 0), rec, "pos_idx") if candidates else 0
    if oracle or not candidates:
        candidates, pos_idx = [row_id], 0
    if not -1 <= pos_idx < len(candidates):
        raise InvalidInputError(f"{rec.where()}: pos_idx {pos_idx} outside candidates {candidates}")
    pages = tuple(_page(rows, c, image_dir, rec) for c in candidates)
    box = _box(rec)
    stratum = STRATA[variant](rec, box)  # strata use the original pixels (y1 < 980)
    if resize is not None:
        own = next((p for p in pages if p.id == row_id), None)
        box = official_box(box, own.width if own else pages[0].width, resize)
        pages = tuple(resize_page(p, resize, image_dir) for p in pages)
    answerable = pos_idx >= 0
    short = as_str(rec.require("short_answer"))
    gold_page = candidates[pos_idx] if answerable else None
    return Sample(
        id=row_id,
        question=as_str(rec.require("question")),
        answers=(short,) if answerable else (NO_ANSWER,),
        pages=pages,
        gold_pages=(gold_page,) if gold_page else (),
        gold_boxes=(EvidenceBox(gold_page, box),) if gold_page else (),
        answerable=answerable,
        dataset=f"visa_{variant}",
        extras={
            "pos_idx": pos_idx,
            "short_answer": short,
            "long_answer_type": as_str(rec.get("long_answer_type")),
            "stratum": stratum,
        },
        evidence_box=EvidenceBox(gold_page, box) if gold_page else None,
    )


def load_visa(
    path: str | Path,
    *,
    variant: str = "wiki",
    pool: str | Path | Sequence[str | Path] = (),
    image_dir: str | Path | None = None,
    oracle: bool = False,
    official_resize: bool = False,
    limit: int | None = None,
    **_: object,
) -> list[Sample]:
    """Questions of the files at ``path``; ``pool`` adds rows (the other split) for candidates.

    ``oracle=True`` gives the single-oracle setting (only the row's own page);
    ``official_resize=True`` the official evaluation frame (width 700, boxes truncated).
    """
    if variant not in STRATA:
        raise InvalidInputError(f"unknown VISA variant {variant!r}; use one of {sorted(STRATA)}")
    questions = list(read_records(path))
    sources = [pool] if isinstance(pool, (str, Path)) else list(pool)  # one file given as text
    rows = {as_str(r.require("id")): r for src in sources for r in read_records(src)}
    rows.update({as_str(r.require("id")): r for r in questions})
    out_dir = default_image_dir(path, image_dir)
    chosen = questions if limit is None else questions[:limit]
    resize = OFFICIAL_WIDTH if official_resize else None
    return [_sample(r, rows, variant, out_dir, oracle, resize) for r in chosen]


for _variant in STRATA:
    LOADERS.add(f"visa_{_variant}", partial(load_visa, variant=_variant))

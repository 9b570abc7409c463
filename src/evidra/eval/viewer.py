"""A self-contained HTML evidence viewer: each page with its boxes, beside question and answer.

Every piece of model or document text is HTML-escaped; boxes are absolutely positioned
overlays in percentages of the page, so the page image can be scaled freely. Page images are
linked relative to the page, or with ``embed_images=True`` inlined as data URIs, so one file can
be moved or mailed on its own.
"""

from __future__ import annotations

import base64
import html
import mimetypes
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from evidra.types import Box, CoordSpace


@dataclass(frozen=True)
class ViewerBox:
    box: Box  # page pixels
    label: str
    color: str = "#16a34a"


@dataclass(frozen=True)
class ViewerPage:
    image_path: str
    width: int
    height: int
    title: str = ""
    boxes: tuple[ViewerBox, ...] = ()


@dataclass(frozen=True)
class ViewerStep:
    """A reasoning step listed beside the pages; ``label`` matches its box's label."""

    label: str
    text: str
    color: str = "#2563eb"


@dataclass(frozen=True)
class ViewerRecord:
    question: str
    prediction: str | None
    answers: tuple[str, ...]
    correct: bool | None
    pages: tuple[ViewerPage, ...]
    output: str = ""
    details: dict[str, str] = field(default_factory=dict)
    steps: tuple[ViewerStep, ...] = ()
    rewards: dict[str, float] = field(default_factory=dict)


_CSS = """
body{font-family:system-ui,sans-serif;margin:24px;background:#f8fafc;color:#0f172a}
.rec{background:#fff;border:1px solid #e2e8f0;border-radius:8px;padding:16px;margin-bottom:20px}
.pages{display:flex;gap:12px;flex-wrap:wrap}.page{position:relative;width:280px}
.page img{width:100%;display:block;border:1px solid #cbd5e1}
.box{position:absolute;border:2px solid;box-sizing:border-box}
.box span{position:absolute;top:-16px;left:0;font-size:10px;background:#fff;padding:0 2px;white-space:nowrap}
.steps{margin:8px 0;padding-left:0;list-style:none;font-size:13px}.steps li{margin:2px 0}
.tag{display:inline-block;min-width:22px;padding:0 4px;margin-right:6px;color:#fff;border-radius:3px}
.rewards{font-size:12px;color:#334155}.ok{color:#15803d}.bad{color:#b91c1c}pre{white-space:pre-wrap;overflow-wrap:anywhere;background:#f1f5f9;padding:8px;font-size:12px}
"""


def _box_div(vb: ViewerBox, page: ViewerPage) -> str:
    b = vb.box
    if b.space is not CoordSpace.PAGE:
        raise ValueError(f"viewer boxes must be in page pixels, got {b.space.value}")
    left, top = 100 * b.x1 / page.width, 100 * b.y1 / page.height
    width, height = 100 * b.width / page.width, 100 * b.height / page.height
    color = html.escape(vb.color, quote=True)
    style = f"left:{left:.3f}%;top:{top:.3f}%;width:{width:.3f}%;height:{height:.3f}%;border-color:{color}"
    return f'<div class="box" style="{style}"><span>{html.escape(vb.label)}</span></div>'


def _image_src(image_path: str, base: Path | None) -> str:
    """A link relative to ``base``, or (``base`` None) the image itself as a data URI."""
    if base is not None:
        return os.path.relpath(image_path, base)
    mime = mimetypes.guess_type(image_path)[0] or "image/png"
    return f"data:{mime};base64," + base64.b64encode(Path(image_path).read_bytes()).decode("ascii")


def _page_html(page: ViewerPage, base: Path | None) -> str:
    src = _image_src(page.image_path, base)
    boxes = "".join(_box_div(vb, page) for vb in page.boxes)
    alt = html.escape(page.title, quote=True)
    return f'<div class="page"><img src="{html.escape(src, quote=True)}" alt="{alt}">{boxes}</div>'


def _record_html(i: int, rec: ViewerRecord, base: Path | None) -> str:
    verdict = (
        ""
        if rec.correct is None
        else ('<b class="ok">correct</b>' if rec.correct else '<b class="bad">wrong</b>')
    )
    pred = html.escape(rec.prediction) if rec.prediction is not None else "<i>(no answer parsed)</i>"
    gold = html.escape(" | ".join(rec.answers)) if rec.answers else "<i>(none)</i>"
    details = "".join(f"<div>{html.escape(k)}: {html.escape(v)}</div>" for k, v in rec.details.items())
    pages = "".join(_page_html(p, base) for p in rec.pages)
    return (
        f'<div class="rec" id="rec-{i}"><h3>{i + 1}. {html.escape(rec.question)}</h3>'
        f"<div>prediction: <b>{pred}</b> {verdict}</div><div>gold: {gold}</div>{details}"
        f"{_rewards_html(rec.rewards)}"
        f'<div class="pages">{pages}{_steps_html(rec.steps)}</div><pre>{html.escape(rec.output)}</pre></div>'
    )


def _steps_html(steps: tuple[ViewerStep, ...]) -> str:
    """The step list beside the pages: each step's text after a tag coloured like its box."""
    if not steps:
        return ""
    items = "".join(
        f'<li><span class="tag" style="background:{html.escape(s.color, quote=True)}">'
        f"{html.escape(s.label)}</span>{html.escape(s.text)}</li>"
        for s in steps
    )
    return f'<ol class="steps">{items}</ol>'


def _rewards_html(rewards: dict[str, float]) -> str:
    if not rewards:
        return ""
    cells = " · ".join(f"{html.escape(k)}: {v:.3g}" for k, v in rewards.items())
    return f'<div class="rewards">{cells}</div>'


def write_viewer(
    records: Sequence[ViewerRecord],
    path: str | Path,
    title: str = "evidra report",
    *,
    preamble: str = "",
    embed_images: bool = False,
) -> Path:
    """Write the viewer page to ``path``; image links are relative to its folder, or with
    ``embed_images`` the images are inside the file.

    ``preamble`` is HTML placed before the records (a training summary, charts); it is not
    escaped, so build it only from evidra's own markup and ``html.escape``-d text.
    """
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    base = None if embed_images else out.parent.resolve()
    body = "".join(_record_html(i, r, base) for i, r in enumerate(records))
    doc = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{_CSS}</style></head><body><h1>{html.escape(title)}</h1>{preamble}{body}</body></html>"
    )
    out.write_text(doc, encoding="utf-8")
    return out

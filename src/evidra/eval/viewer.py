"""A self-contained HTML evidence viewer: each page with its boxes, beside question and answer.

Every piece of model or document text is HTML-escaped; boxes are absolutely positioned
overlays in percentages of the page, so the page image can be scaled freely (a page's image may
be rendered at any resolution: boxes are in the pixels of ``width x height``). Box labels are
listed in a legend under each page, never printed over it; hovering a box shows its label. Page
images are linked relative to the page, or with ``embed_images=True`` inlined as data URIs, so
one file can be moved or mailed on its own. With ``thumbnail_width`` each page is shown as an
embedded thumbnail that opens the full-size page, boxes included, in a CSS lightbox.
"""

from __future__ import annotations

import base64
import html
import mimetypes
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from evidra.types import Box, CoordSpace


@dataclass(frozen=True)
class ViewerBox:
    box: Box  # page pixels
    label: str
    color: str = "#16a34a"
    line: Literal["solid", "dashed", "dotted"] = "solid"


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
    heading: str = ""  # which model answered, when records are shown side by side


# one card: a record, or several records answering the same question side by side
ViewerItem = ViewerRecord | tuple[ViewerRecord, ...]


_CSS = """
body{font-family:system-ui,sans-serif;margin:24px;background:#f8fafc;color:#0f172a}
.rec{background:#fff;border:1px solid #e2e8f0;border-radius:8px;padding:16px;margin-bottom:20px}
.cols{display:flex;gap:16px;flex-wrap:wrap}.col{flex:1 1 420px;min-width:0}
.col h4{margin:4px 0;color:#475569}
.pages{display:flex;gap:12px;flex-wrap:wrap;align-items:flex-start}.page{width:280px}
.thumb .page{width:300px}.pg{position:relative}
.pg img{width:100%;display:block;border:1px solid #cbd5e1}
.box{position:absolute;border-width:2px;box-sizing:border-box}
.legend{margin:3px 0 0;padding:0;list-style:none;font-size:11px;color:#334155}
.legend li{display:inline-block;margin-right:8px}
.sw{display:inline-block;width:14px;height:9px;border-width:2px;margin-right:3px;vertical-align:middle}
.lb{display:none;position:fixed;inset:0;background:rgba(15,23,42,.85);z-index:10;overflow:auto;padding:16px}
.lb:target{display:block}.lb .pg{margin:0 auto;width:min(100%,calc((100vh - 80px) * var(--ar)))}
.lb .bar{color:#fff;text-align:center;margin-bottom:8px;font-size:13px}.lb .bar a{color:#fff}
.lb .legend{color:#fff;text-align:center}
.steps{margin:8px 0;padding-left:0;list-style:none;font-size:13px}.steps li{margin:2px 0}
.tag{display:inline-block;min-width:22px;padding:0 4px;margin-right:6px;color:#fff;border-radius:3px}
.rewards{font-size:12px;color:#334155}.ok{color:#15803d}.bad{color:#b91c1c}
summary{cursor:pointer;font-size:13px;color:#475569;margin-top:6px}
pre{white-space:pre-wrap;overflow-wrap:anywhere;background:#f1f5f9;padding:8px;font-size:12px}
"""


def _box_style(vb: ViewerBox) -> str:
    color = html.escape(vb.color, quote=True)
    fill = f"background:{color}1a;" if len(vb.color) == 7 and vb.color.startswith("#") else ""
    return f"border-style:{vb.line};border-color:{color};{fill}"


def _box_div(vb: ViewerBox, page: ViewerPage) -> str:
    b = vb.box
    if b.space is not CoordSpace.PAGE:
        raise ValueError(f"viewer boxes must be in page pixels, got {b.space.value}")
    left, top = 100 * b.x1 / page.width, 100 * b.y1 / page.height
    width, height = 100 * b.width / page.width, 100 * b.height / page.height
    place = f"left:{left:.3f}%;top:{top:.3f}%;width:{width:.3f}%;height:{height:.3f}%;"
    title = html.escape(vb.label, quote=True)
    return f'<div class="box" title="{title}" style="{place}{_box_style(vb)}"></div>'


def _legend(page: ViewerPage) -> str:
    """The labels of a page's boxes under it (one entry per distinct label and colour)."""
    seen = dict.fromkeys((vb.label, vb.color, vb.line) for vb in page.boxes)
    items = "".join(
        f'<li><i class="sw" style="{_box_style(ViewerBox(Box(0, 0, 1, 1), label, color, line))}"></i>'
        f"<span>{html.escape(label)}</span></li>"
        for label, color, line in seen
    )
    return f'<ul class="legend">{items}</ul>' if items else ""


def _image_src(image_path: str, base: Path | None) -> str:
    """A link relative to ``base``, or (``base`` None) the image itself as a data URI."""
    if base is not None:
        return os.path.relpath(image_path, base)
    mime = mimetypes.guess_type(image_path)[0] or "image/png"
    return f"data:{mime};base64," + base64.b64encode(Path(image_path).read_bytes()).decode("ascii")


def thumbnail_uri(image_path: str, width: int) -> str:
    """A ``width``-pixel-wide PNG of the image as a data URI (no upscaling)."""
    import io

    from PIL import Image

    with Image.open(image_path) as im:
        rgb = im.convert("RGB")
    if rgb.width > width:
        rgb = rgb.resize((width, max(1, round(rgb.height * width / rgb.width))), Image.Resampling.LANCZOS)
    buf = io.BytesIO()
    rgb.save(buf, format="PNG", optimize=True)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


@dataclass(frozen=True)
class _Images:
    base: Path | None  # link images relative to this folder; None: embed them
    thumbnail_width: int | None  # embed thumbnails that open a lightbox; None: full images inline
    thumbnails: dict[str, str] = field(default_factory=dict)  # image path -> its thumbnail, made once

    def thumbnail(self, image_path: str, width: int) -> str:
        if image_path not in self.thumbnails:
            self.thumbnails[image_path] = thumbnail_uri(image_path, width)
        return self.thumbnails[image_path]


def _page_html(page: ViewerPage, images: _Images, anchor: str) -> str:
    src = html.escape(_image_src(page.image_path, images.base), quote=True)
    boxes = "".join(_box_div(vb, page) for vb in page.boxes)
    alt = html.escape(page.title, quote=True)
    full = f'<div class="pg"><img src="{src}" alt="{alt}">{boxes}</div>{_legend(page)}'
    if images.thumbnail_width is None:
        return f'<div class="page">{full}</div>'
    thumb = html.escape(images.thumbnail(page.image_path, images.thumbnail_width), quote=True)
    bar = (
        f'{html.escape(page.title)} · <a href="{src}" target="_blank">full-size image</a> · '
        '<a href="#">close</a>'
    )
    return (
        f'<div class="page"><a href="#{anchor}" title="enlarge"><div class="pg">'
        f'<img src="{thumb}" alt="{alt}">{boxes}</div></a>{_legend(page)}</div>'
        f'<div class="lb" id="{anchor}" style="--ar:{page.width / page.height:.4f}">'
        f'<div class="bar">{bar}</div>{full}</div>'
    )


def _verdict(correct: bool | None) -> str:
    if correct is None:
        return ""
    return '<b class="ok">correct</b>' if correct else '<b class="bad">wrong</b>'


def _answer_html(rec: ViewerRecord, images: _Images, anchor: str) -> str:
    """One model's answer: prediction, details, scores, pages with boxes, steps and raw output."""
    pred = html.escape(rec.prediction) if rec.prediction is not None else "<i>(no answer parsed)</i>"
    details = "".join(f"<div>{html.escape(k)}: {html.escape(v)}</div>" for k, v in rec.details.items())
    pages = "".join(_page_html(p, images, f"{anchor}-p{k}") for k, p in enumerate(rec.pages))
    head = f"<h4>{html.escape(rec.heading)}</h4>" if rec.heading else ""
    return (
        f"{head}<div>prediction: <b>{pred}</b> {_verdict(rec.correct)}</div>{details}"
        f"{_rewards_html(rec.rewards)}"
        f'<div class="pages">{pages}{_steps_html(rec.steps)}</div>{_output_html(rec.output, images)}'
    )


def _output_html(output: str, images: _Images) -> str:
    """The raw model output; folded away in the thumbnail layout (cards side by side)."""
    pre = f"<pre>{html.escape(output)}</pre>"
    return f"<details><summary>model output</summary>{pre}</details>" if images.thumbnail_width else pre


def _record_html(i: int, item: ViewerItem, images: _Images) -> str:
    recs = item if isinstance(item, tuple) else (item,)
    first = recs[0]
    gold = html.escape(" | ".join(first.answers)) if first.answers else "<i>(none)</i>"
    question = html.escape(first.question)
    head = f'<div class="rec" id="rec-{i}"><h3>{i + 1}. {question}</h3><div>gold: {gold}</div>'
    if len(recs) == 1:
        return head + _answer_html(first, images, f"rec-{i}") + "</div>"
    cols = "".join(
        f'<div class="col">{_answer_html(r, images, f"rec-{i}-{k}")}</div>' for k, r in enumerate(recs)
    )
    return f'{head}<div class="cols">{cols}</div></div>'


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
    records: Sequence[ViewerItem],
    path: str | Path,
    title: str = "evidra report",
    *,
    preamble: str = "",
    embed_images: bool = False,
    thumbnail_width: int | None = None,
) -> Path:
    """Write the viewer page to ``path``; image links are relative to its folder, or with
    ``embed_images`` the images are inside the file. With ``thumbnail_width`` (pixels) each
    page is an embedded thumbnail that opens the full-size page in a lightbox.

    A record that is a tuple of records is one card: the same question answered by several
    models (each ``heading`` names one), side by side. ``preamble`` is HTML placed before the
    records (a training summary, charts); it is not escaped, so build it only from evidra's own
    markup and ``html.escape``-d text.
    """
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    images = _Images(None if embed_images else out.parent.resolve(), thumbnail_width)
    body = "".join(_record_html(i, r, images) for i, r in enumerate(records))
    cls = ' class="thumb"' if thumbnail_width else ""
    doc = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{_CSS}</style></head><body{cls}><h1>{html.escape(title)}</h1>{preamble}{body}</body></html>"
    )
    out.write_text(doc, encoding="utf-8")
    return out

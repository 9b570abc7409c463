"""Load image files (PNG, JPEG, WebP, TIFF, BMP) as pages.

Images have no text layer. Words for them can come from an OCR engine passed to ``ingest`` as
a ``WordExtractor`` (a callable from an RGB image to words in its pixels); evidra ships none
by default, so image pages are stored with no words unless one is given.
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Protocol

from evidra.core.errors import CorpusError
from evidra.core.types import Word
from evidra.corpus.pdf import DEFAULT_MAX_PAGES, DEFAULT_MAX_PIXELS, RenderedPage, over_doc_pixels

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage

IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".webp", ".tif", ".tiff", ".bmp"})
_UNREADABLE = (OSError, ValueError, SyntaxError)  # PIL's UnidentifiedImageError is an OSError


class WordExtractor(Protocol):
    """OCR hook: returns the words of an RGB page image, boxed in its pixels (``CoordSpace.PAGE``)."""

    def __call__(self, image: PILImage) -> Sequence[Word]: ...


def render_image(
    data: bytes,
    name: str = "<image>",
    *,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    max_pages: int = DEFAULT_MAX_PAGES,
    max_doc_pixels: int | None = None,
    on_open: Callable[[int], None] | None = None,
) -> Iterator[RenderedPage]:
    """Yield the frames of an image file as RGB pages (one for most formats, several for TIFF).

    Frames are decoded one at a time, each only after its size was checked against
    ``max_pixels``; a file with more than ``max_pages`` frames, or whose frames together have
    more than ``max_doc_pixels`` pixels, is refused before any is decoded. Raises
    ``CorpusError`` naming ``name`` if the bytes are not a decodable image or break a cap
    (possibly after some frames were yielded); ``MemoryError`` is let through. ``on_open`` is
    called with the frame count once the file is open and within its caps.
    """
    from PIL import Image

    try:
        with warnings.catch_warnings():
            # the pixel cap below is the check; PIL's own warning would only repeat it
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            im = Image.open(io.BytesIO(data))
    except Image.DecompressionBombError as exc:
        raise CorpusError(f"{name} is over the cap of {max_pixels} pixels per page ({exc})") from None
    except _UNREADABLE as exc:
        raise CorpusError(f"{name} is not a readable image ({type(exc).__name__}: {exc})") from exc
    with im:
        frames = int(getattr(im, "n_frames", 1))
        if frames > max_pages:
            raise CorpusError(
                f"{name} has {frames} frames, over the cap of {max_pages} pages per file; "
                f"split it or raise the cap (--max-pages {frames})"
            )
        if max_doc_pixels is not None:
            total = _frame_pixels(im, frames, name)
            if total > max_doc_pixels:
                raise over_doc_pixels(name, total, frames, max_doc_pixels)
        if on_open is not None:
            on_open(frames)
        for index in range(frames):
            yield RenderedPage(index + 1, _frame(im, index, name, max_pixels), ())


def _frame_pixels(im: PILImage, frames: int, name: str) -> int:
    """The pixels of all ``frames`` of ``im`` together, read from their headers (nothing decoded)."""
    total = 0
    try:
        for index in range(frames):
            im.seek(index)
            total += im.size[0] * im.size[1]
        im.seek(0)
    except (*_UNREADABLE, EOFError) as exc:
        raise CorpusError(f"{name} is not a readable image ({type(exc).__name__}: {exc})") from exc
    return total


def _frame(im: PILImage, index: int, name: str, max_pixels: int) -> PILImage:
    """Decode frame ``index`` of ``im`` as RGB, refusing it before decoding if it is too large."""
    from PIL import Image

    try:
        im.seek(index)
        width, height = im.size
        if width <= 0 or height <= 0:
            raise CorpusError(f"{name} is an empty image")
        if width * height > max_pixels:
            where = f"frame {index + 1} of {name}" if index else name
            raise CorpusError(
                f"{where} is {width}x{height} = {width * height / 1e6:.0f} Mpx, over the cap of "
                f"{max_pixels / 1e6:g} Mpx per page; downscale it or raise the cap "
                f"(--max-pixels {width * height})"
            )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            return im.convert("RGB")
    except (CorpusError, MemoryError):
        raise
    except (*_UNREADABLE, EOFError) as exc:
        raise CorpusError(f"{name} is not a readable image ({type(exc).__name__}: {exc})") from exc

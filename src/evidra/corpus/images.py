"""Load image files (PNG, JPEG, WebP, TIFF, BMP) as pages.

Images have no text layer. Words for them can come from an OCR engine passed to ``ingest`` as
a ``WordExtractor`` (a callable from an RGB image to words in its pixels); evidra ships none
by default, so image pages are stored with no words unless one is given.
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Protocol

from evidra.corpus.pdf import RenderedPage
from evidra.errors import CorpusError
from evidra.types import Word

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage

IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".webp", ".tif", ".tiff", ".bmp"})


class WordExtractor(Protocol):
    """OCR hook: returns the words of an RGB page image, boxed in its pixels (``CoordSpace.PAGE``)."""

    def __call__(self, image: PILImage) -> Sequence[Word]: ...


def render_image(data: bytes, name: str = "<image>") -> Iterator[RenderedPage]:
    """Yield the frames of an image file as RGB pages (one for most formats, several for TIFF).

    Raises ``CorpusError`` naming ``name`` if the bytes are not a decodable image.
    """
    from PIL import Image, ImageSequence, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as im:
            frames = [frame.convert("RGB") for frame in ImageSequence.Iterator(im)]
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
        raise CorpusError(f"{name} is not a readable image ({type(exc).__name__}: {exc})") from exc
    if not frames or frames[0].width <= 0 or frames[0].height <= 0:
        raise CorpusError(f"{name} is an empty image")
    for number, frame in enumerate(frames, start=1):
        yield RenderedPage(number, frame, ())

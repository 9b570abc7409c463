"""Images from user files and data, decoded only after their size was checked against a cap.

A PNG or JPEG of a few kilobytes can declare 20,000 x 20,000 pixels: decoded, that is 1.2 GB of
RGB. PIL reads only an image's header when it opens it, so every image evidra takes from a
file, a record, a data URL or a page store goes through here: opened, its width and height
checked against ``max_pixels``, then decoded. A data URL is also checked against ``max_bytes``
before its base64 is decoded. Each refusal is one line naming the image and the cap.

>>> from PIL import Image
>>> import io
>>> buf = io.BytesIO(); Image.new("RGB", (4, 3)).save(buf, format="PNG")
>>> decode(buf.getvalue(), "probe.png").size
(4, 3)
>>> decode(buf.getvalue(), "probe.png", max_pixels=10)
Traceback (most recent call last):
evidra.core.errors.InvalidInputError: probe.png is 4x3 = 12 pixels, over the cap of 10 pixels per image; ...
"""

from __future__ import annotations

import base64
import binascii
import io
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from evidra.core.errors import EvidraError, InvalidInputError

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage

MAX_PIXELS = 50_000_000  # a Letter page at 150 dpi is 2.1 Mpx; A0 at 150 dpi is 27 Mpx
MAX_DATA_URL_BYTES = 64 << 20  # encoded image bytes in one data URL
_UNREADABLE = (OSError, ValueError, SyntaxError, EOFError)  # PIL's UnidentifiedImageError is an OSError

Source = str | Path | bytes


@contextmanager
def opened(
    source: Source, name: str, *, max_pixels: int = MAX_PIXELS, error: type[EvidraError] = InvalidInputError
) -> Iterator[PILImage]:
    """``source`` (a path or encoded bytes) opened lazily, its size already checked: nothing
    is decoded yet. ``error`` (one line naming ``name``) if it is no image or over the cap."""
    from PIL import Image

    handle = io.BytesIO(source) if isinstance(source, bytes) else source
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # the cap below is the check
            im = Image.open(handle)
    except Image.DecompressionBombError as exc:
        raise error(f"{name} is over the cap of {max_pixels} pixels per image ({exc})") from None
    except _UNREADABLE as exc:
        raise error(f"{name} cannot be read as an image ({_first_line(exc)})") from None
    with im:
        width, height = im.size
        if width * height > max_pixels:
            raise error(
                f"{name} is {width}x{height} = {width * height} pixels, over the cap of {max_pixels} "
                "pixels per image; downscale it"
            )
        yield im


def size(
    source: Source, name: str, *, max_pixels: int = MAX_PIXELS, error: type[EvidraError] = InvalidInputError
) -> tuple[int, int]:
    """``(width, height)`` from the header of ``source``, checked against the cap, nothing decoded."""
    with opened(source, name, max_pixels=max_pixels, error=error) as im:
        return int(im.size[0]), int(im.size[1])


def decode(
    source: Source, name: str, *, max_pixels: int = MAX_PIXELS, error: type[EvidraError] = InvalidInputError
) -> PILImage:
    """``source`` decoded as an RGB image, after its size was checked against ``max_pixels``."""
    with opened(source, name, max_pixels=max_pixels, error=error) as im:
        try:
            with warnings.catch_warnings():
                from PIL import Image

                warnings.simplefilter("ignore", Image.DecompressionBombWarning)
                return im.convert("RGB")
        except MemoryError:
            raise error(f"{name} ran out of memory while decoding") from None
        except _UNREADABLE as exc:
            raise error(f"{name} cannot be read as an image ({_first_line(exc)})") from None


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def data_url_bytes(
    url: str, name: str, *, max_bytes: int = MAX_DATA_URL_BYTES, error: type[EvidraError] = InvalidInputError
) -> bytes:
    """The encoded image bytes of a base64 ``data:`` URL, its length checked before decoding."""
    header, _, payload = url.partition(",")
    if ";base64" not in header:
        raise error(f"{name} is not a base64 data URL")
    if len(payload) // 4 * 3 > max_bytes:
        raise error(f"{name} holds about {len(payload) // 4 * 3} bytes, over the cap of {max_bytes} bytes")
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise error(f"{name} is not valid base64 ({exc})") from None

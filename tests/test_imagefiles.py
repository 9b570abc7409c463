"""Images from user data are refused by their declared size before any pixel is decoded.

The images here (the ``declared_png`` fixture) are real PNG headers that declare large sizes
over a few bytes of pixel data: decoding one would take gigabytes, reading its header takes
microseconds.
"""

from __future__ import annotations

import base64
import io
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from evidra.core import imagefiles
from evidra.core.errors import CorpusError, InvalidInputError


@pytest.mark.parametrize("side", [13_000, 20_000])  # under and over PIL's own bomb limit
def test_a_large_declared_size_is_refused_before_decoding(side: int, declared_png: Any) -> None:
    data = declared_png(side, side)
    assert len(data) < 4096
    tracemalloc.start()
    start = time.monotonic()
    with pytest.raises(InvalidInputError, match="over the cap of 50000000 pixels") as err:
        imagefiles.decode(data, "probe.png")
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert time.monotonic() - start < 1 and peak < 10 << 20 and "\n" not in str(err.value)
    with pytest.raises(CorpusError, match=r"probe\.png"):
        imagefiles.size(data, "probe.png", error=CorpusError)


def test_images_under_the_cap_decode_and_bad_bytes_are_one_line() -> None:
    buf = io.BytesIO()
    from PIL import Image

    Image.new("L", (6, 5), 9).save(buf, format="PNG")
    image = imagefiles.decode(buf.getvalue(), "ok.png")
    assert (image.mode, image.size) == ("RGB", (6, 5))
    assert imagefiles.size(buf.getvalue(), "ok.png", max_pixels=30) == (6, 5)
    with pytest.raises(InvalidInputError, match=r"junk\.png cannot be read as an image"):
        imagefiles.decode(b"not an image", "junk.png")


def test_data_urls_are_capped_by_bytes_before_base64_decoding() -> None:
    url = "data:image/png;base64," + "A" * 4000
    with pytest.raises(InvalidInputError, match="about 3000 bytes, over the cap of 100 bytes"):
        imagefiles.data_url_bytes(url, "probe", max_bytes=100)
    assert imagefiles.data_url_bytes("data:image/png;base64,AAAA", "probe") == b"\x00\x00\x00"
    with pytest.raises(InvalidInputError, match="not a base64 data URL"):
        imagefiles.data_url_bytes("data:image/png,abc", "probe")


def test_every_reader_of_user_images_applies_the_cap(tmp_path: Path, declared_png: Any) -> None:
    from evidra.core.types import ImagePart, Page
    from evidra.data.loaders._records import Record, materialize_page
    from evidra.models.chat import load_image

    bomb = tmp_path / "bomb.png"
    bomb.write_bytes(declared_png(13_000, 13_000))
    with pytest.raises(CorpusError, match=r"page 'p1': image .*bomb\.png is 13000x13000"):
        Page("p1", str(bomb), 13_000, 13_000).open_image()
    with pytest.raises(InvalidInputError, match="over the cap"):
        load_image(ImagePart(str(bomb)))
    record = Record({}, tmp_path / "rows.jsonl", 1, tmp_path)
    for cell in ({"bytes": base64.b64encode(bomb.read_bytes()).decode()}, "bomb.png"):
        with pytest.raises(InvalidInputError, match=r"rows\.jsonl.*over the cap"):
            materialize_page(cell, record, page_id="p", image_dir=tmp_path / "imgs")

"""Images on the wire: resized to the size an endpoint's family expects, kept under the cap on
one image's bytes (PNG, else JPEG at the same size, else one error line)."""

from __future__ import annotations

import base64
import io
from pathlib import Path

import pytest
from PIL import Image

import evidra.openai.wire as wire
from evidra.core.box_formats import BOX_FORMATS
from evidra.core.errors import InvalidInputError
from evidra.core.types import ImagePart, Message


def sent(image: str | Image.Image, size_for: wire.ImageSize | None) -> tuple[str, Image.Image]:
    (message,) = wire.to_openai([Message("user", (ImagePart(image),))], size_for)
    url = message["content"][0]["image_url"]["url"]
    header, payload = url.split(",", 1)
    return header, Image.open(io.BytesIO(base64.b64decode(payload)))


def test_an_image_goes_at_its_family_s_size_from_a_file_or_in_memory(tmp_path: Path) -> None:
    path = tmp_path / "page.png"
    Image.new("RGB", (425, 550), "white").save(path)
    qwen25 = BOX_FORMATS.get("qwen2.5-vl").sent_size
    assert sent(str(path), qwen25)[1].size == (420, 560)  # 425 / 28 = 15.2 -> 420, 550 / 28 = 19.6 -> 560
    assert sent(Image.new("RGB", (425, 550)), BOX_FORMATS.get("qwen3-vl").sent_size)[1].size == (416, 544)
    assert sent(str(path), None)[1].size == (425, 550)  # no sizing: as it is


def test_a_file_already_at_its_size_goes_as_its_own_bytes(tmp_path: Path) -> None:
    path = tmp_path / "page.jpg"
    Image.new("RGB", (420, 560), "white").save(path, format="JPEG")
    header, image = sent(str(path), BOX_FORMATS.get("qwen2.5-vl").sent_size)
    assert header == "data:image/jpeg;base64" and image.size == (420, 560)


def test_an_image_too_thin_for_the_family_s_resize_goes_capped_at_the_long_side() -> None:
    assert BOX_FORMATS.get("qwen2.5-vl").sent_size((3, 4000)) == (2, 2048)


def test_an_image_over_the_byte_cap_goes_as_jpeg_of_the_same_size(monkeypatch: pytest.MonkeyPatch) -> None:
    noise = Image.effect_noise((300, 300), 100).convert("RGB")  # PNG cannot compress it much
    monkeypatch.setattr(wire, "MAX_IMAGE_BYTES", 150_000)
    header, image = sent(noise, lambda size: size)
    assert header == "data:image/jpeg;base64" and image.size == (300, 300)
    monkeypatch.setattr(wire, "MAX_IMAGE_BYTES", 1_000)
    with pytest.raises(InvalidInputError, match=r"300x300 pixels .* over the 1000 bytes"):
        sent(noise, lambda size: size)

"""Text for image-only pages through tesseract (optional extra ``evidra[ocr]``).

Needs the ``pytesseract`` package and the ``tesseract`` binary (Debian:
``apt-get install tesseract-ocr tesseract-ocr-eng``). Words are the level-5 rows of
``image_to_data`` with a confidence of at least ``min_conf``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from evidra.core.errors import MissingDependencyError, require

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage

    from evidra.core.types import Page


def ocr_words(image: PILImage, *, lang: str = "eng", min_conf: float = 0.0) -> list[str]:
    """Words tesseract reads on a PIL image, in reading order."""
    require("pytesseract", "ocr")
    import pytesseract

    try:
        data = pytesseract.image_to_data(image, lang=lang, output_type=pytesseract.Output.DICT)
    except pytesseract.TesseractNotFoundError as exc:
        raise MissingDependencyError(
            "the tesseract binary is not installed or not on PATH; install it (Debian: "
            "`apt-get install tesseract-ocr tesseract-ocr-eng`) or set pytesseract.tesseract_cmd"
        ) from exc
    words = []
    for level, conf, text in zip(data["level"], data["conf"], data["text"], strict=True):
        if int(level) == 5 and float(conf) >= min_conf and str(text).strip():
            words.append(str(text).strip())
    return words


def page_text(page: Page, *, ocr: bool = False, lang: str = "eng") -> str:
    """The page's text layer; when it is empty and ``ocr`` is set, tesseract's reading of it."""
    if page.words or not ocr:
        return page.text
    return " ".join(ocr_words(page.open_image(), lang=lang))

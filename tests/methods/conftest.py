"""The hand-made page with a known text layer (``tests/hand_page.py``) as fixtures here."""

from __future__ import annotations

from hand_page import make_page, page, page_factory, sample  # noqa: F401  (fixtures)

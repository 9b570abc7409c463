"""The app's refusals that are not a bad request: each web route answers them with its own status."""

from __future__ import annotations

from evidra.core.errors import EvidraError, InvalidInputError

RETRY_AFTER_S = 2  # what a 503 asks the client to wait before it tries again


class NotFound(InvalidInputError):
    """A page, document or upload the app does not hold (answered 404)."""


class Busy(EvidraError):
    """Too many questions wait for the model, or too many uploads are in flight (answered 503,
    with ``Retry-After``)."""


class Unsupported(InvalidInputError):
    """An upload whose name has a suffix ingest does not read (answered 415)."""

"""Questions and documents: benchmark loaders, synthetic generators, data construction.

Every loader produces ``evidra.core.types.Sample`` records; submodules are imported on demand so
that importing ``evidra.data`` stays cheap.
"""

from __future__ import annotations

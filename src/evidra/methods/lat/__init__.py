"""LAT (Chain-of-Evidence): every reasoning step cites a page and a box."""

from evidra.methods.lat import method  # noqa: F401  (registers the method)

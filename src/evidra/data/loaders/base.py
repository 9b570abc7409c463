"""The loader registry: benchmark name -> function reading its published files into Samples.

A loader takes the path of a benchmark's files (a file, a folder of shards, or a ``datasets``
cache folder) plus keyword options, and returns ``Sample`` records with pages on disk. Images
stored inline (HF parquet/JSONL bytes) are written once to ``image_dir``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from evidra.data.loaders._records import data_files
from evidra.registry import Registry
from evidra.types import Sample

Loader = Callable[..., list[Sample]]  # (path, **options) -> samples


LOADERS: Registry[Loader] = Registry("benchmark loader")


def default_image_dir(path: str | Path, image_dir: str | Path | None) -> Path:
    """Where inline images go: ``image_dir`` or ``evidra_images/`` beside the first data file."""
    if image_dir is not None:
        return Path(image_dir)
    return data_files(path)[0].parent / "evidra_images"


def load(name: str, path: str | Path, **options: Any) -> list[Sample]:
    """Load benchmark ``name`` from ``path`` (see each loader for its options)."""
    return LOADERS.get(name)(path, **options)

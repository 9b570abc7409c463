"""The loader registry: benchmark name -> function reading its published files into Samples.

A loader takes the path of a benchmark's files (a file, a folder of shards, or a ``datasets``
cache folder) plus keyword options, and returns ``Sample`` records with pages on disk. Images
stored inline (HF parquet/JSONL bytes) are written once to ``image_dir``.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Mapping
from pathlib import Path

from evidra.core.registry import Registry
from evidra.core.types import Sample
from evidra.data.loaders._records import data_files

Loader = Callable[..., list[Sample]]  # (path, **options) -> samples


LOADERS: Registry[Loader] = Registry("benchmark loader")


def default_image_dir(path: str | Path, image_dir: str | Path | None) -> Path:
    """Where inline images go: ``image_dir`` or ``evidra_images/`` beside the first data file."""
    if image_dir is not None:
        return Path(image_dir)
    return data_files(path)[0].parent / "evidra_images"


def parse_options(raw: Mapping[str, object]) -> dict[str, object]:
    """Loader options given as text (``--option n_slides=3``, ``data.options``) to values.

    A value that reads as JSON (numbers, ``true``/``false``, lists) becomes that value; anything
    else, such as a path, stays a string.

    >>> parse_options({"n_slides": "3", "oracle": "true", "pool": "train.jsonl"})
    {'n_slides': 3, 'oracle': True, 'pool': 'train.jsonl'}
    """
    out: dict[str, object] = {}
    for key, value in raw.items():
        if isinstance(value, str):
            with contextlib.suppress(ValueError):  # not JSON: a path or a name stays a string
                value = json.loads(value)
        out[key] = value
    return out


def load(name: str, path: str | Path, **options: object) -> list[Sample]:
    """Load benchmark ``name`` from ``path`` (see each loader for its options)."""
    return LOADERS.get(name)(path, **options)

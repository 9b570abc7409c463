"""Fault injection for index tests: a model-free encoder, named kill points and index snapshots.

A test process and the child processes it kills both import this module (the child through
``python -c``, with the test's ``sys.path``): ``child_main`` arms one kill point, then adds pages
or builds an index as ``evidra index add`` / ``build`` do, and dies with SIGKILL (as ``kill -9``
would) when the armed function is reached.
"""

from __future__ import annotations

import os
import signal
import sys
import time
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from evidra.core.types import Box, Page, Word
from evidra.retrieval.encoders.bm25 import BM25Retriever
from evidra.retrieval.index._shards import ShardBatch
from evidra.retrieval.interfaces import ENCODERS, EncoderOptions
from evidra.retrieval.lifecycle import backends as stores_module
from evidra.retrieval.lifecycle import manifest as manifest_module
from evidra.retrieval.lifecycle.index_folder import QdrantSpec, build_index, open_index

DIM = 8
WORDS = ["orion", "revenue", "memo", "budget", "signed", "table", "founded", "audit", "river", "north"]
QUERIES = ["orion revenue", "signed memo budget", "audit table", "river north founded"]


def _vectors(text: str, rows: int) -> Tensor:
    g = torch.Generator().manual_seed(zlib.crc32(text.encode()))
    return torch.nn.functional.normalize(torch.randn(rows, DIM, generator=g), dim=-1)  # (rows, DIM)


class HashEncoder:
    """Embeds a page from its id and a query from its text, deterministically, with no model."""

    def __init__(self, kind: str, delay_s: float = 0.0) -> None:
        self.kind = kind
        self.name = f"hash-{kind}"
        self.delay_s = delay_s

    def embed_pages(self, pages: Sequence[Page]) -> list[Tensor]:
        if self.delay_s:
            time.sleep(self.delay_s)  # a slow model, so a kill at a random moment lands mid-add
        return [_vectors(p.id, 5 if self.kind == "multi" else 1) for p in pages]

    def embed_queries(self, queries: Sequence[str]) -> list[Tensor]:
        return [_vectors(q, 3 if self.kind == "multi" else 1) for q in queries]


def encoder_factories(delay_s: float = 0.0) -> dict[str, Callable[..., Any]]:
    def factory(kind: str) -> Callable[..., Any]:
        return lambda path, options=None: HashEncoder(kind, delay_s)

    return {"hash-multi": factory("multi"), "hash-single": factory("single")}


def pages(ids: Sequence[int]) -> list[Page]:
    """Pages ``p01``... with two words of ``WORDS`` each (a text layer for BM25)."""
    out = []
    for i in ids:
        words = (WORDS[i % len(WORDS)], WORDS[(3 * i + 1) % len(WORDS)])
        out.append(
            Page(
                f"p{i:02d}", f"/pages/{i}.png", 100, 100, words=tuple(Word(w, Box(0, 0, 9, 9)) for w in words)
            )
        )
    return out


BEFORE, NEW = pages(range(1, 5)), pages(range(5, 12))  # 4 pages indexed, 7 to add
Snapshot = tuple[tuple[str, ...], tuple[tuple[tuple[str, float], ...], ...]]


def snapshot(root: Path) -> Snapshot:
    """The page ids of the index at ``root`` and every page's score for each of ``QUERIES``."""
    with open_index(root) as engine:
        ids = tuple(engine.index.page_ids())
        hits = engine.retriever.search(QUERIES, k=len(ids) or 1)
    return ids, tuple(tuple((h.page_id, h.score) for h in q) for q in hits)


def add_missing(root: Path, new: Sequence[Page] = NEW) -> None:
    """What ``evidra index add --index root`` does: add the pages not yet indexed (2 per batch)."""
    with open_index(root, options=EncoderOptions()) as engine:
        have = set(engine.index.page_ids())
        engine.add([p for p in new if p.id not in have], batch_pages=2)


def _die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def arm(owner: Any, attr: str, when: str, call: int = 1) -> None:
    """Replace ``owner.attr`` so the process is killed just ``before`` or ``after`` its ``call``-th call."""
    real = getattr(owner, attr)
    calls = [0]

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if when == "before" and calls[0] == call:
            _die()
        out = real(*args, **kwargs)
        if when == "after" and calls[0] == call:
            _die()
        return out

    setattr(owner, attr, wrapped)


def _slowed(owner: Any, attr: str, delay_s: float) -> None:
    """Make ``owner.attr`` sleep ``delay_s`` before and after its work."""
    real = getattr(owner, attr)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        time.sleep(delay_s)
        out = real(*args, **kwargs)
        time.sleep(delay_s)
        return out

    setattr(owner, attr, wrapped)


def _partial_save(self: BM25Retriever, path: str | Path) -> None:
    (Path(path) / "partial").write_text('{"ids": ["p0')  # a save cut short
    _die()


# kill point -> (object, attribute, before|after, which call); the expected state follows the name
KILL_POINTS: dict[str, tuple[Any, str, str, int]] = {
    "shards:between-batches": (ShardBatch, "write", "after", 2),
    "shards:before-commit": (ShardBatch, "commit", "before", 1),
    "shards:after-commit": (ShardBatch, "commit", "after", 1),
    "bm25:before-manifest": (manifest_module, "write_manifest", "before", 1),
    "bm25:after-manifest": (manifest_module, "write_manifest", "after", 1),
    "qdrant:after-first-batch": (None, "update", "after", 1),  # QdrantIndex, imported lazily
    "qdrant:after-alias": (stores_module, "publish_alias", "after", 1),
}

# A Qdrant server for the build tests: qdrant-client's local mode in a folder, reached as this URL
STAND_IN_URL = "http://qdrant-stand-in.invalid:6333"


def serve_locally(folder: Path) -> Callable[..., Any]:
    """A ``QdrantClient`` to put in ``qdrant_client``'s place: asked for ``STAND_IN_URL``, it
    opens qdrant-client's local mode at ``folder`` instead; anything else goes through."""
    import qdrant_client

    real = getattr(qdrant_client.QdrantClient, "stand_in_for", qdrant_client.QdrantClient)

    def client(*args: Any, url: str | None = None, **kwargs: Any) -> Any:
        if url != STAND_IN_URL:
            return real(*args, url=url, **kwargs)
        return real(path=str(folder))

    client.stand_in_for = real  # type: ignore[attr-defined]
    return client


def child_main(argv: Sequence[str]) -> None:
    """``action root point [delay_s] [qdrant_folder]``: arm ``point`` (``none``: nothing, ``slow``:
    every stage sleeps ``delay_s`` before and after), print ``ready``, act, print ``done``."""
    action, root, point = argv[0], Path(argv[1]), argv[2]
    delay = float(argv[3]) if len(argv) > 3 else 0.0
    ENCODERS._items.update(encoder_factories(delay))
    if point == "slow":
        for owner, attr in (
            (ShardBatch, "write"),
            (ShardBatch, "commit"),
            (BM25Retriever, "save"),
            (manifest_module, "write_manifest"),
        ):
            _slowed(owner, attr, delay)
    elif point == "bm25:mid-save":
        BM25Retriever.save = _partial_save  # type: ignore[method-assign]
    elif point != "none":
        owner, attr, when, call = KILL_POINTS[point]
        if owner is None:
            from evidra.retrieval.index.qdrant import QdrantIndex

            owner = QdrantIndex
        arm(owner, attr, when, call)
    print("ready", flush=True)
    if action == "add":
        add_missing(root)
    else:
        import qdrant_client

        qdrant_client.QdrantClient = serve_locally(Path(argv[4]))  # type: ignore[misc]
        build_index([*BEFORE, *NEW], root, "hash-multi", "hash", qdrant=QdrantSpec(url=STAND_IN_URL)).close()
    print("done", flush=True)
    os._exit(0)  # skip the interpreter's teardown: the parent waits for it

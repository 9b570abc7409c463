"""A retriever fake for the search-service tests."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from evidra.retrieval.interfaces import Exclude, Hit


class SlowRetriever:
    """Answers every query with one hit named after it, taking ``per_query_s`` per query."""

    def __init__(self, per_query_s: float = 0.0) -> None:
        self.per_query_s = per_query_s
        self.searched = 0
        self.started = threading.Event()  # set when a search begins
        self.lock = threading.Lock()

    def search(self, queries: Sequence[str], k: int = 10, exclude: Exclude = None) -> list[list[Hit]]:
        self.started.set()
        time.sleep(self.per_query_s * len(queries))
        with self.lock:
            self.searched += len(queries)
        if any(q == "explode" for q in queries):
            raise RuntimeError("secret internal detail /home/me/index")
        return [[Hit(f"p-{q[:8]}", 1.0, "")] for q in queries]

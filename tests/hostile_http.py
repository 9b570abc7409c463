"""Bodies that hostile servers send, for the client tests (tests/test_client_hostile.py,
tests/retrieval/test_search_client_hostile.py, tests/models/test_vllm_server_hostile.py)."""

from __future__ import annotations

import zlib


def gzip_bomb(expanded: int, head: bytes = b'{"choices": [{"message": {"content": "') -> bytes:
    """A gzip body of about ``expanded`` decoded bytes (about 1/1000 of it on the wire): ``head``,
    then letters, then the end of a JSON document."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = b"A" * 2**20
    parts = [packer.compress(head), *(packer.compress(block) for _ in range(expanded // 2**20))]
    return b"".join([*parts, packer.compress(b'"}}]}'), packer.flush()])

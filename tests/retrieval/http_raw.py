"""Raw HTTP for the search-service tests: bytes out, (status, body) back."""

from __future__ import annotations

import json
import socket
from typing import Any


def raw_exchange(url: str, data: bytes) -> tuple[int, str, bytes]:
    """Send ``data`` on a fresh connection, read until the server closes it: status, content type, body."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(data)
        chunks = b""
        while chunk := s.recv(65536):
            chunks += chunk
    head, _, body = chunks.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:] if ": " in line)
    return int(lines[0].split()[1]), headers.get("content-type", ""), body


def raw_request(url: str, data: bytes) -> tuple[int, dict[str, Any]]:
    """Like ``raw_exchange`` for an answer with a JSON body: status and the parsed body."""
    status, content_type, body = raw_exchange(url, data)
    assert content_type == "application/json", (status, content_type, body[:80])
    return status, json.loads(body)

"""Raw HTTP for the search-service tests: bytes out, (status, JSON body) back."""

from __future__ import annotations

import json
import socket
from typing import Any


def raw_request(url: str, data: bytes) -> tuple[int, dict[str, Any]]:
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(data)
        chunks = b""
        while chunk := s.recv(65536):
            chunks += chunk
    head, _, body = chunks.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)

"""Suite-wide settings: one CPU thread, no hub, no network beyond loopback, tiny models."""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import ipaddress
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

_real_connect = socket.socket.connect


def _loopback_only(self: socket.socket, address: Any) -> Any:
    host = address[0] if isinstance(address, tuple) else address
    if self.family in (socket.AF_INET, socket.AF_INET6):
        try:
            allowed = ipaddress.ip_address(host).is_loopback
        except ValueError:
            allowed = host == "localhost"
        if not allowed:
            raise OSError(f"tests may not reach the network ({host!r}); only loopback is allowed")
    return _real_connect(self, address)


@pytest.fixture(autouse=True, scope="session")
def _no_network() -> Iterator[None]:
    socket.socket.connect = _loopback_only  # type: ignore[method-assign]
    yield
    socket.socket.connect = _real_connect  # type: ignore[method-assign]


@pytest.fixture(autouse=True, scope="session")
def _one_thread() -> None:
    import torch

    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Tiny checkpoints of every architecture, built once per test session."""
    from evidra.models.tiny import build_tiny

    root = tmp_path_factory.mktemp("tiny")
    return {
        arch: build_tiny(arch, root / arch) for arch in ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "colqwen2")
    }


@pytest.fixture(scope="session")
def tiny_vlms(tiny_dirs: dict[str, Path]) -> dict[str, Any]:
    from evidra.models.loading import load_vlm

    return {arch: load_vlm(tiny_dirs[arch]) for arch in ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")}

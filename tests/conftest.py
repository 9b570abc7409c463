"""Suite-wide settings: one CPU thread, no hub, no network beyond loopback, tiny models."""

from __future__ import annotations

import atexit
import ipaddress
import json
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from conformance_cases import (  # noqa: F401  (hooks and fixtures for every test folder)
    conformance,
    pytest_configure,
    pytest_generate_tests,
    same_fixture,
)

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Every cache this session writes lives in one private folder, removed when the session ends (CI's
# disk is small): the recipes' synthetic corpora and compiled kernels (not ~/.cache), an empty hub
# cache (hub ids never resolve against the user's own) and torch's and Triton's compile caches.
_SESSION_DIR = tempfile.mkdtemp(prefix="evidra-test-session-")
_SESSION_PID = os.getpid()


@atexit.register
def _remove_session_dir() -> None:
    if os.getpid() == _SESSION_PID:  # a forked child that exits normally leaves it to its parent
        shutil.rmtree(_SESSION_DIR, ignore_errors=True)


for _name, _sub in (
    ("XDG_CACHE_HOME", "cache"),
    ("HF_HUB_CACHE", "hub"),
    ("TORCHINDUCTOR_CACHE_DIR", "inductor"),
    ("TRITON_CACHE_DIR", "triton"),
):
    os.environ[_name] = os.path.join(_SESSION_DIR, _sub)
    os.makedirs(os.environ[_name], mode=0o700)


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
def _no_judge_server() -> Iterator[None]:
    """The VRAG-RL and Lang2Act recipes name a judge server on 127.0.0.1:8001 with the rule judge
    as fallback; a test never asks a server it did not start, so the fallback scores (a test of the
    probe itself calls ``endpoint_unreachable`` imported before this patch, or passes ``probe=``)."""
    from evidra.rewards import judge_fallback

    def offline(url: str, timeout_s: float = 3.0) -> str:
        return "no judge server in tests"

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(judge_fallback, "endpoint_unreachable", offline)
        yield


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


class HubCache:
    """A hub cache folder tests put checkpoints into, in the layout the hub library writes."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def publish(self, src: Path, repo_id: str, commit: str = "0" * 40) -> Path:
        """Copy checkpoint directory ``src`` in as repository ``repo_id``:
        ``models--org--name/snapshots/<commit>/...`` plus ``refs/main``; returns the snapshot."""
        import shutil

        repo = self.root / ("models--" + repo_id.replace("/", "--"))
        snapshot = repo / "snapshots" / commit
        shutil.copytree(src, snapshot, dirs_exist_ok=True)
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / "main").write_text(commit)
        return snapshot


@pytest.fixture
def hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> HubCache:
    """An empty hub cache of this test, read offline (HF_HUB_CACHE, HF_HUB_OFFLINE=1)."""
    cache = tmp_path / "hub-cache"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return HubCache(cache)


@pytest.fixture(scope="session")
def tiny_vlms(tiny_dirs: dict[str, Path]) -> dict[str, Any]:
    from evidra.models.loading import load_vlm

    return {arch: load_vlm(tiny_dirs[arch]) for arch in ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")}


# --- a fake OpenAI-compatible server on 127.0.0.1 (judge, policy, teacher) --------------------


@dataclass
class Scripted:
    """One scripted reply after ``delay_s``: ``body`` a JSON payload, raw bytes sent as they are,
    or None for the default completion; with ``trickle_s`` the headers promise 100 bytes and one
    byte follows every ``trickle_s``."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    trickle_s: float = 0.0
    delay_s: float = 0.0


class FakeJudge:
    """What the fake server answers (``mode``, ``script``) and everything it received.

    Modes: ``match`` (each item True iff its reference is contained in its generated answer,
    case-insensitively), ``fail`` (HTTP 500), ``slow`` (sleeps past any client timeout),
    ``garbage`` (a reply without ``<judge>`` tags), ``wrongcount`` (one tag too many). A request
    that is no judge prompt (a policy model or teacher served by the same fake) gets
    ``policy_reply`` (``n`` choices, listed in reverse index order, the i-th suffixed `` [i]``
    when ``n`` > 1). While ``script`` is not empty, each request gets its next ``Scripted`` reply
    instead.
    """

    Scripted = Scripted  # so that tests build replies without importing this module

    def __init__(self, url: str) -> None:
        import threading

        self.url = url  # base URL, ".../v1"
        self.mode = "match"
        self.policy_reply = "The answer is 42."
        self.delay_s = 0.0  # added to every request (to observe concurrency)
        self.script: list[Scripted] = []
        self.requests: list[dict[str, Any]] = []  # {"path", "authorization", "body", "t"}
        self.in_flight = self.max_in_flight = 0
        self.in_flight_by_model: dict[str, int] = {}  # the same, per requested model name
        self.max_in_flight_by_model: dict[str, int] = {}
        self.lock = threading.Lock()

    def reply(self, body: dict[str, Any]) -> str:
        user = str(body["messages"][-1]["content"])
        blocks = user.split("--- ITEM")[1:] or [user]
        tags = []
        for block in blocks:
            ref = block.split("## Reference Answer\n")[1].split("\n")[0].strip().lower()
            gen = block.split("## Generated Answer\n")[1].split("\n")[0].strip().lower()
            tags.append(f"<judge>{ref in gen}</judge>")
        if self.mode == "garbage":
            return "The answer looks right to me."
        if self.mode == "wrongcount":
            tags.append("<judge>True</judge>")
        return "\n".join(tags)

    def completion(self, body: dict[str, Any]) -> dict[str, Any]:
        """The default 200 reply to ``body``."""
        if "## Reference Answer" in json.dumps(body):
            texts = [self.reply(body)]
        else:
            n = int(body.get("n", 1))
            texts = [self.policy_reply + (f" [{i}]" if n > 1 else "") for i in range(n)]
        choices = [
            {"index": i, "message": {"role": "assistant", "content": t}, "finish_reason": "stop"}
            for i, t in enumerate(texts)
        ]
        return {"choices": choices[::-1], "usage": {"completion_tokens": sum(len(t.split()) for t in texts)}}

    def take(self, judging: bool) -> Scripted:
        """The reply of the next request: the script's next one, else what ``mode`` says."""
        with self.lock:
            if self.script:
                return self.script.pop(0)
        mode = self.mode if judging else "policy"
        if mode == "fail":
            return Scripted(500, {"error": "boom"})
        return Scripted(200, None, delay_s=5.0 if mode == "slow" else 0.0)


def _serve(handler: Any, state: FakeJudge, reply: Scripted, body: dict[str, Any], answering: Any) -> None:
    """Answer one request; ``answering()`` marks it no longer in flight just before the reply goes
    out (a client may send its next request as soon as it has read this one)."""
    import contextlib

    if reply.trickle_s > 0:
        answering()
        handler.send_response(reply.status)
        handler.send_header("Content-Length", "100")
        handler.end_headers()
        for _ in range(100):
            time.sleep(reply.trickle_s)
            try:
                handler.wfile.write(b" ")
                handler.wfile.flush()
            except OSError:
                return
        return
    time.sleep(state.delay_s + reply.delay_s)
    payload = reply.body if reply.body is not None or reply.status != 200 else state.completion(body)
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    answering()
    handler.send_response(reply.status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    for name, value in reply.headers.items():
        handler.send_header(name, value)
    handler.end_headers()
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        handler.wfile.write(data)


@pytest.fixture
def fake_judge() -> Iterator[FakeJudge]:
    """A scripted ``POST /v1/chat/completions`` server on a random loopback port."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with state.lock:
                state.requests.append(
                    {
                        "path": self.path,
                        "authorization": self.headers.get("Authorization"),
                        "body": body,
                        "t": time.monotonic(),
                    }
                )
                state.in_flight += 1
                state.max_in_flight = max(state.max_in_flight, state.in_flight)
                model = str(body.get("model", ""))
                now = state.in_flight_by_model[model] = state.in_flight_by_model.get(model, 0) + 1
                state.max_in_flight_by_model[model] = max(state.max_in_flight_by_model.get(model, 0), now)
            released = []

            def answering() -> None:
                with state.lock:
                    if not released:
                        released.append(True)
                        state.in_flight -= 1
                        state.in_flight_by_model[model] -= 1

            try:
                _serve(self, state, state.take("## Reference Answer" in json.dumps(body)), body, answering)
            finally:
                answering()

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    state = FakeJudge(f"http://127.0.0.1:{httpd.server_address[1]}/v1")
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    yield state
    httpd.shutdown()
    httpd.server_close()


def _declared_png(width: int, height: int) -> bytes:
    """A PNG whose header declares ``width`` x ``height`` 1-bit pixels over one row of data: a
    few hundred bytes that would decode to gigabytes (an image "bomb")."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    idat = zlib.compress(b"\x00" * (1 + (width + 7) // 8))
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


@pytest.fixture
def declared_png() -> Any:
    """``declared_png(width, height) -> bytes``: see ``_declared_png``."""
    return _declared_png


@pytest.fixture
def cpu_profile(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Call with a name from ``evidra.retrieval.kernels.compute_dtype.PROFILES``: from then on, this
    test sees that CPU's flags and GEMM rates wherever ``auto`` picks a dtype, whatever machine runs it."""
    from evidra.retrieval.kernels import compute_dtype as compute

    def use(name: str) -> compute.CpuProfile:
        profile = compute.PROFILES[name]
        monkeypatch.setattr(compute, "cpu_features", _features_of(profile, compute.cpu_features))
        monkeypatch.setattr(compute, "probe_rates", profile.probe)
        return profile

    return use


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--cpu-profile",
        default=None,
        help="run the whole suite as if on this CPU (a name in "
        "evidra.retrieval.kernels.compute_dtype.PROFILES: amx, avx512_bf16, avx512, avx2); "
        "default: this machine as it is",
    )


@pytest.fixture(autouse=True, scope="session")
def _whole_suite_cpu_profile(request: pytest.FixtureRequest) -> Iterator[None]:
    name = request.config.getoption("--cpu-profile")
    if name is None:
        yield
        return
    from evidra.retrieval.kernels import compute_dtype as compute

    profile = compute.PROFILES[name]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(compute, "cpu_features", _features_of(profile, compute.cpu_features))
        patch.setattr(compute, "probe_rates", profile.probe)
        yield


def _features_of(profile: Any, real: Any) -> Any:
    """``cpu_features`` as on ``profile``'s CPU; a file named explicitly is still parsed."""
    return lambda *a, **k: real(*a, **k) if a or k else profile.features

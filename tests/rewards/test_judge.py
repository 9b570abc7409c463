"""LLM judge: prompts, strict parsing, rule judge, and the HTTP client against a loopback server."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from evidra.core.errors import InvalidInputError
from evidra.methods.lang2act.judge import LANG2ACT_JUDGE_SYSTEM_PROMPT
from evidra.methods.vragrl.judge import vragrl_judge_prompt
from evidra.rewards.judge import RuleJudge
from evidra.rewards.judge_http import DiskCache, HttpJudgeConfig, MemoryCache, OpenAIJudge
from evidra.rewards.judge_prompts import build_messages
from evidra.rewards.judge_protocol import JudgeItem, Verdict, parse_verdicts

pytest.importorskip("httpx")


class _State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests: dict[str, int] = {}
        self.in_flight = 0
        self.max_in_flight = 0
        self.bodies: list[dict[str, Any]] = []


class _Handler(BaseHTTPRequestHandler):
    state: _State

    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        return

    def do_POST(self) -> None:
        scenario = self.path.strip("/").split("/")[0]
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        st = self.state
        with st.lock:
            st.requests[scenario] = st.requests.get(scenario, 0) + 1
            count = st.requests[scenario]
            st.bodies.append(body)
            st.in_flight += 1
            st.max_in_flight = max(st.max_in_flight, st.in_flight)
        self._left = False
        try:
            self._respond(scenario, count, body)
        finally:
            self._leave()

    def _leave(self) -> None:
        """Count this request out of flight once, before its reply is written: the client may send
        its next request as soon as it reads the reply, before this thread would get here."""
        if not self._left:
            self._left = True
            with self.state.lock:
                self.state.in_flight -= 1

    def _respond(self, scenario: str, count: int, body: dict[str, Any]) -> None:
        user = body["messages"][-1]["content"]
        n = max(1, user.count("--- ITEM"))
        # verdict per item: True iff the generated answer equals the reference (ITEM blocks or single prompt)
        blocks = user.split("--- ITEM")[1:] or [user]
        tags = []
        for block in blocks:
            ref = block.split("## Reference Answer\n")[1].split("\n")[0]
            gen = block.split("## Generated Answer\n")[1].split("\n")[0]
            tags.append(f"<judge>{'True' if ref == gen else 'False'}</judge>")
        reply = "\n".join(tags)
        if scenario == "slow" and count == 1:
            time.sleep(1.0)  # longer than the client timeout: first attempt times out
        elif scenario == "busy":
            time.sleep(0.05)
        elif scenario == "fail":
            return self._send(500, {"error": "boom"})
        elif scenario == "notfound":
            return self._send(404, {"error": "no such model"})
        elif scenario == "garbage":
            reply = "I believe the answer is correct."
        elif scenario == "wrongcount":
            reply = "<judge>True</judge>" * (n + 1)
        elif scenario == "notjson":
            return self._send(200, None)
        self._send(200, {"choices": [{"message": {"role": "assistant", "content": reply}}]})

    def _send(self, status: int, payload: dict[str, Any] | None) -> None:
        data = b"not json" if payload is None else json.dumps(payload).encode()
        self._leave()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.wfile.write(data)


@pytest.fixture
def server() -> Iterator[tuple[str, _State]]:
    state = _State()
    handler = type("Handler", (_Handler,), {"state": state})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", state
    httpd.shutdown()
    httpd.server_close()


ITEMS = [
    JudgeItem("Capital?", "Paris", "Paris"),
    JudgeItem("Capital?", "Paris", "Lyon"),
    JudgeItem("Q", "3", "3"),
]


def _judge(base: str, scenario: str, **kw: Any) -> OpenAIJudge:
    cfg: dict[str, Any] = (
        dict(style="lang2act", batch_size=2, timeout_s=0.3, max_retries=2, backoff_s=0.01) | kw
    )
    return OpenAIJudge(HttpJudgeConfig(base_url=f"{base}/{scenario}", model="judge-m", **cfg))


def test_normal_batched_lang2act(server: tuple[str, _State]) -> None:
    base, state = server
    judge = _judge(base, "ok")
    assert [v.value for v in judge.judge_batch(ITEMS)] == [True, False, True]
    assert state.requests["ok"] == 2  # 3 items in batches of 2
    first = state.bodies[0]
    assert first["model"] == "judge-m" and first["temperature"] == 0.0
    assert first["messages"][0] == {"role": "system", "content": LANG2ACT_JUDGE_SYSTEM_PROMPT}
    # cached: the same prompts again cost no request
    assert [v.value for v in judge.judge(ITEMS)] == [True, False, True]
    assert state.requests["ok"] == 2 and judge.stats.cache_hits == 2


def test_vragrl_style_sends_one_item_as_one_user_message(server: tuple[str, _State]) -> None:
    base, state = server
    judge = _judge(base, "ok", style="vragrl", batch_size=10)
    assert [v.value for v in judge.judge_batch(ITEMS[:2])] == [True, False]
    assert state.requests["ok"] == 2
    messages = state.bodies[0]["messages"]
    assert len(messages) == 1 and messages[0]["role"] == "user"
    assert messages[0]["content"] == vragrl_judge_prompt(ITEMS[0]) or messages[0][
        "content"
    ] == vragrl_judge_prompt(ITEMS[1])


def test_slow_first_attempt_times_out_then_retry_succeeds(server: tuple[str, _State]) -> None:
    base, state = server
    judge = _judge(base, "slow")
    start = time.monotonic()
    verdicts = judge.judge_batch(ITEMS[:1])
    assert verdicts == [Verdict(True)]
    assert state.requests["slow"] == 2 and judge.stats.retries == 1
    assert time.monotonic() - start < 3.0


@pytest.mark.parametrize(
    ("scenario", "requests"), [("fail", 3), ("garbage", 3), ("wrongcount", 3), ("notjson", 3)]
)
def test_persistent_failures_are_unscored_after_bounded_retries(
    server: tuple[str, _State], scenario: str, requests: int
) -> None:
    base, state = server
    judge = _judge(base, scenario)
    verdicts = judge.judge_batch(ITEMS[:2])
    assert [v.value for v in verdicts] == [None, None]
    assert all(v.error for v in verdicts)
    assert state.requests[scenario] == requests  # 1 + max_retries, never forever
    assert judge.stats.unscored == 2


def test_client_error_is_not_retried(server: tuple[str, _State]) -> None:
    base, state = server
    verdicts = _judge(base, "notfound").judge_batch(ITEMS[:1])
    assert verdicts[0].value is None and "404" in (verdicts[0].error or "")
    assert state.requests["notfound"] == 1


def test_unreachable_endpoint_is_unscored_quickly() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: connections are refused
    judge = _judge(f"http://127.0.0.1:{port}", "x")
    start = time.monotonic()
    verdicts = judge.judge_batch(ITEMS)
    assert [v.value for v in verdicts] == [None, None, None]
    assert time.monotonic() - start < 3.0


def test_concurrency_is_bounded(server: tuple[str, _State]) -> None:
    base, state = server
    items = [JudgeItem("q", str(i), str(i)) for i in range(12)]
    verdicts = _judge(base, "busy", batch_size=1, concurrency=2).judge_batch(items)
    assert all(v.value is True for v in verdicts)
    assert state.requests["busy"] == 12 and state.max_in_flight <= 2


def test_sync_wrapper_works_inside_running_loop(server: tuple[str, _State]) -> None:
    base, _ = server
    judge = _judge(base, "ok")

    async def inner() -> list[Verdict]:
        return judge.judge_batch(ITEMS[:1])

    assert asyncio.run(inner()) == [Verdict(True)]


def test_disk_cache_survives_reopen(server: tuple[str, _State], tmp_path: Path) -> None:
    base, state = server
    path = tmp_path / "judge.sqlite"
    OpenAIJudge(HttpJudgeConfig(base_url=f"{base}/ok", model="m"), cache=DiskCache(path)).judge_batch(
        ITEMS[:1]
    )
    again = OpenAIJudge(HttpJudgeConfig(base_url=f"{base}/ok", model="m"), cache=DiskCache(path))
    assert again.judge_batch(ITEMS[:1]) == [Verdict(True)]
    assert state.requests["ok"] == 1 and again.stats.cache_hits == 1


# --- offline pieces --------------------------------------------------------------------------


def test_parse_verdicts_strict() -> None:
    assert parse_verdicts("<judge>TRUE</judge>", 1) == [Verdict(True)]
    assert parse_verdicts("<judge>not true</judge>", 1)[0].value is None
    assert parse_verdicts("<judge>False. It is not true</judge>", 1)[0].value is None
    assert parse_verdicts(None, 1)[0].value is None
    wrong = parse_verdicts("<judge>True</judge>", 2)
    assert [v.value for v in wrong] == [None, None] and "expected 2" in (wrong[0].error or "")
    assert parse_verdicts("", 0) == []


def test_vragrl_prompt_substitutes_once() -> None:
    prompt = vragrl_judge_prompt(JudgeItem("Q {reference_answer}", "R", "G {query}"))
    assert "## Query\nQ {reference_answer}\n" in prompt
    assert "## Reference Answer\nR\n" in prompt
    assert "## Generated Answer\nG {query}\n" in prompt
    assert prompt.endswith("beyond the reference answer.")
    with pytest.raises(InvalidInputError, match="one item"):
        build_messages("vragrl", ITEMS[:2])


def test_rule_judge_modes() -> None:
    item = JudgeItem("q", "The Eiffel Tower", "It is the eiffel tower!")
    assert RuleJudge("contains").judge([item]) == [Verdict(True)]
    assert RuleJudge("exact").judge([item]) == [Verdict(False)]
    assert RuleJudge("stripped_lower").judge([JudgeItem("q", " Yes", "yes ")]) == [Verdict(True)]
    assert RuleJudge().judge([JudgeItem("q", None, "x")])[0].value is None
    # "contains" is token-aligned: "1" is not inside "10"
    assert RuleJudge().judge([JudgeItem("q", "1", "10 items")]) == [Verdict(False)]


def test_braced_rule_judges_one_letter_labels() -> None:
    braced = RuleJudge("braced")
    pairs = [
        ("E", "{e}"),
        ("E", " E "),
        ("E", "node E"),
        ("red", "I end on {red}, not {blue}."),
        ("A", "A B C D"),
    ]
    got = braced.judge([JudgeItem("q", ref, answer) for ref, answer in pairs])
    assert [v.value for v in got] == [True, True, False, True, False]  # listing every label never pays
    # containment cannot judge a one-letter label at all: the article "a" normalises away
    assert RuleJudge("contains").judge([JudgeItem("q", "A", "A")])[0].value is None


def test_config_validation_and_memory_cache() -> None:
    with pytest.raises(InvalidInputError):
        HttpJudgeConfig(base_url="http://127.0.0.1:1", model="m", batch_size=0)
    cache = MemoryCache()
    cache.put("k", "v")
    assert cache.get("k") == "v" and cache.get("other") is None

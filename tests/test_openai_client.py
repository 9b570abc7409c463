"""The one OpenAI-compatible chat client, alone and behind its three users (the evaluation
endpoint, the LLM judge, the data-construction teacher), against the scripted fake server of
conftest.py (loopback only)."""

from __future__ import annotations

import asyncio
import base64
import io
import itertools
import logging
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest
from PIL import Image

from evidra.core.errors import ConfigError, InvalidInputError
from evidra.core.types import ImagePart, Message, TextPart
from evidra.methods.lang2act.toolbox import OpenAIChatModel
from evidra.models.endpoint import ChatEndpoint
from evidra.openai.client import (
    AsyncChatClient,
    ChatClient,
    ChatClientError,
    ChatHTTPError,
    ChatUnavailableError,
    ClientConfig,
    MalformedResponseError,
    RetryPolicy,
    check_api_key_env,
    endpoint_config,
    retry_delay,
)
from evidra.rewards.judge_http import HttpJudgeConfig, OpenAIJudge
from evidra.rewards.judge_protocol import JudgeItem

CALLERS = ("client", "endpoint", "judge", "teacher")
KEY = "sk-test-0123456789"


@dataclass(frozen=True)
class Outcome:
    ok: bool
    text: str  # the reply, or the error message / unscored reason
    error: type[Exception] | None = None


def _call(
    kind: str,
    url: str,
    *,
    retries: int = 2,
    timeout_s: float = 5.0,
    max_wait_s: float = 10.0,
    api_key_env: str = "OPENAI_API_KEY",
) -> Outcome:
    """One request through ``kind`` with the same settings; the judge's unscored verdict is its error."""
    opts: dict[str, Any] = dict(api_key_env=api_key_env, max_wait_s=max_wait_s)
    if kind == "judge":
        cfg = HttpJudgeConfig(url, "m", style="vragrl", timeout_s=timeout_s, max_retries=retries, **opts)
        (verdict,) = OpenAIJudge(cfg).judge([JudgeItem("Q?", "Paris", "Paris")])
        return Outcome(verdict.value is not None, verdict.error or str(verdict.value))
    try:
        if kind == "client":
            config = endpoint_config(url, "m", timeout_s=timeout_s, retries=retries, **opts)
            return Outcome(True, ChatClient(config).chat([{"role": "user", "content": "hi"}]).text)
        if kind == "endpoint":
            endpoint = ChatEndpoint(url, "m", timeout_s=timeout_s, retries=retries, **opts)
            return Outcome(True, endpoint.complete([Message.text("user", "hi")]).text)
        teacher = OpenAIChatModel(url, "m", timeout=timeout_s, retries=retries, **opts)
        return Outcome(True, teacher.complete("system", "hi"))
    except ChatClientError as exc:
        return Outcome(False, str(exc), type(exc))


def _expected_text(kind: str, fake: Any) -> str:
    return "True" if kind == "judge" else fake.policy_reply


# --- the same behaviour behind every caller ---------------------------------------------------


@pytest.mark.parametrize("kind", CALLERS)
def test_key_comes_from_the_named_variable_and_is_absent_when_unset(
    kind: str, fake_judge: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("MY_JUDGE_KEY", raising=False)
    assert _call(kind, fake_judge.url).ok
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    assert _call(kind, fake_judge.url).ok
    monkeypatch.setenv("MY_JUDGE_KEY", "sk-other")
    assert _call(kind, fake_judge.url, api_key_env="MY_JUDGE_KEY").ok
    assert _call(kind, fake_judge.url, api_key_env="").ok  # "": never send one
    sent = [r["authorization"] for r in fake_judge.requests]
    assert sent == [None, f"Bearer {KEY}", "Bearer sk-other", None]
    assert all(r["path"] == "/v1/chat/completions" for r in fake_judge.requests)
    assert KEY not in caplog.text and "sk-other" not in caplog.text


@pytest.mark.parametrize("kind", CALLERS)
def test_429_is_retried_after_retry_after_then_succeeds(kind: str, fake_judge: Any) -> None:
    busy = fake_judge.Scripted(429, {"error": {"message": "slow down"}}, headers={"Retry-After": "0"})
    fake_judge.script = [busy, busy]
    outcome = _call(kind, fake_judge.url, retries=2)
    assert outcome == Outcome(True, _expected_text(kind, fake_judge))
    assert len(fake_judge.requests) == 3  # two refusals, then the answer


@pytest.mark.parametrize("kind", CALLERS)
def test_retries_stop_at_max_attempts(kind: str, fake_judge: Any) -> None:
    fake_judge.script = [
        fake_judge.Scripted(503, {"message": "overloaded"}, headers={"Retry-After": "0"})
    ] * 10
    outcome = _call(kind, fake_judge.url, retries=3)
    assert len(fake_judge.requests) == 4  # 1 + retries, never more
    assert not outcome.ok and "after 4 attempts" in outcome.text and "HTTP 503: overloaded" in outcome.text
    assert outcome.error in (ChatUnavailableError, None)  # None: the judge's unscored verdict


@pytest.mark.parametrize("kind", CALLERS)
def test_a_client_error_is_not_retried_and_named_in_one_line(kind: str, fake_judge: Any) -> None:
    fake_judge.script = [
        fake_judge.Scripted(400, {"error": {"message": "max_tokens is too large: 99999"}})
    ] * 3
    outcome = _call(kind, fake_judge.url, retries=2)
    assert len(fake_judge.requests) == 1
    assert not outcome.ok and outcome.error in (ChatHTTPError, None)
    assert outcome.text == f"HTTP 400 from {fake_judge.url}/chat/completions: max_tokens is too large: 99999"


@pytest.mark.parametrize("kind", CALLERS)
def test_the_timeout_bounds_a_whole_trickling_reply(kind: str, fake_judge: Any) -> None:
    fake_judge.script = [
        fake_judge.Scripted(200, trickle_s=0.5)
    ]  # 100 bytes, one every 0.5 s: each read is quick
    start = time.monotonic()
    outcome = _call(kind, fake_judge.url, retries=0, timeout_s=1.2)
    elapsed = time.monotonic() - start
    assert not outcome.ok and "timeout_s=1.2" in outcome.text
    assert 1.1 < elapsed < 10.0  # cut at 1.2 s, not after the 50 s the reply would take


@pytest.mark.parametrize("kind", CALLERS)
@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b"<html>busy</html>", "not JSON"),
        ({"object": "list", "data": []}, "KeyError"),
        ({"choices": []}, "empty"),
        ({"choices": [{"message": {"content": {"parts": 1}}}]}, "not text"),
    ],
)
def test_a_malformed_reply_is_a_typed_error(kind: str, fake_judge: Any, body: Any, words: str) -> None:
    fake_judge.script = [fake_judge.Scripted(200, body)]
    outcome = _call(kind, fake_judge.url, retries=0)
    assert not outcome.ok and words in outcome.text and fake_judge.url in outcome.text
    assert outcome.error in (MalformedResponseError, None)  # the judge: unscored, never a guess
    assert len(fake_judge.requests) == 1


@pytest.mark.parametrize("kind", CALLERS)
def test_an_unreachable_server_fails_within_the_retry_budget(kind: str) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed when the block ends: connections are refused
    start = time.monotonic()
    outcome = _call(kind, f"http://127.0.0.1:{port}/v1", retries=5, max_wait_s=0.0)
    assert (
        not outcome.ok and "retry budget max_wait_s=0.0" in outcome.text and "gave up after 1" in outcome.text
    )
    assert time.monotonic() - start < 2.0


# --- retries, timing and the wire format of the client itself ---------------------------------


def _client(url: str, **retry: Any) -> ChatClient:
    return ChatClient(ClientConfig(url, "m", timeout_s=5.0, retry=RetryPolicy(**retry)))


def _gaps(fake: Any) -> list[float]:
    times = [r["t"] for r in fake.requests]
    return [b - a for a, b in itertools.pairwise(times)]


def test_retry_after_is_honoured_up_to_the_cap_and_the_budget_ends_the_call(fake_judge: Any) -> None:
    fake_judge.script = [fake_judge.Scripted(429, {"error": "busy"}, headers={"Retry-After": "30"})] * 10
    client = _client(fake_judge.url, max_attempts=10, max_backoff_s=0.2, max_wait_s=0.5)
    with pytest.raises(ChatUnavailableError, match=r"gave up after 3 attempts .* max_wait_s=0.5") as info:
        client.chat([{"role": "user", "content": "hi"}])
    # waits of 0.2 s (30 s capped); a third wait would make 0.6 s > 0.5 s of budget
    assert info.value.attempts == 3 and len(fake_judge.requests) == 3
    assert all(0.18 < gap < 5.0 for gap in _gaps(fake_judge))  # the cap, not 30 s (a busy machine only adds)
    fake_judge.requests.clear()
    fake_judge.script = [fake_judge.Scripted(429, {}, headers={"Retry-After": "0.3"}), fake_judge.Scripted()]
    client = _client(fake_judge.url, max_backoff_s=1.0, backoff_s=0.01, jitter=0.0)
    assert client.chat([{"role": "user", "content": "hi"}]).attempts == 2
    assert 0.28 < _gaps(fake_judge)[0] < 0.95  # under the 1 s cap: the server's 0.3 s, not 0.01 s


def test_backoff_doubles_without_retry_after(fake_judge: Any) -> None:
    fake_judge.script = [fake_judge.Scripted(502, b"bad gateway")] * 3
    result = _client(fake_judge.url, max_attempts=4, backoff_s=0.1, jitter=0.0).chat(
        [Message.text("user", "x")]
    )
    assert result.attempts == 4 and result.text == fake_judge.policy_reply
    gaps = _gaps(fake_judge)
    # jitter 0: waits of exactly 0.1, 0.2, 0.4 s before the 2nd, 3rd, 4th request; a busy machine
    # can only lengthen a gap, so each is at least its wait (and not seconds longer)
    assert len(gaps) == 3
    for gap, wait in zip(gaps, [0.1, 0.2, 0.4], strict=True):
        assert wait - 0.02 <= gap < wait + 1.5, gaps


def test_retry_delay_jitter_stays_in_its_band() -> None:
    policy = RetryPolicy(backoff_s=2.0, max_backoff_s=100.0, jitter=0.25)
    # retry 3: ceiling 2 * 2**2 = 8 s; jitter 0.25 draws from [6, 8]
    assert retry_delay(policy, 3, None, 0.0) == 8.0
    assert retry_delay(policy, 3, None, 0.999) == pytest.approx(6.002)
    assert retry_delay(policy, 1, 0.0, 0.5) == 0.0  # Retry-After: 0 means now
    assert retry_delay(policy, 200, None, 0.0) == 100.0  # capped, no overflow


def test_n_choices_come_back_in_index_order(fake_judge: Any) -> None:
    result = _client(fake_judge.url).chat([{"role": "user", "content": "hi"}], n=3, max_tokens=7, stop=["\n"])
    assert result.texts == tuple(
        f"{fake_judge.policy_reply} [{i}]" for i in range(3)
    )  # the fake lists 2, 1, 0
    assert result.completion_tokens == 3 * 5
    body = fake_judge.requests[0]["body"]
    assert (body["n"], body["max_tokens"], body["stop"], body["model"]) == (3, 7, ["\n"], "m")


def test_images_go_as_data_urls_in_part_order(fake_judge: Any) -> None:
    image = Image.new("RGB", (12, 8), "red")
    message = Message("user", (TextPart("before"), ImagePart(image), TextPart("after")))
    _client(fake_judge.url).chat([{"role": "system", "content": "sys"}, message])
    system, user = fake_judge.requests[0]["body"]["messages"]
    assert system == {"role": "system", "content": "sys"}
    assert [p["type"] for p in user["content"]] == ["text", "image_url", "text"]
    url = user["content"][1]["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")
    assert Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))).size == (12, 8)


def test_unauthorised_names_the_key_variable_not_the_key(
    fake_judge: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_KEY", KEY)
    fake_judge.script = [fake_judge.Scripted(401, {"error": {"message": "Incorrect API key provided"}})]
    config = ClientConfig(fake_judge.url, "m", api_key_env="MY_KEY")
    with pytest.raises(ChatHTTPError) as info:
        ChatClient(config).chat([{"role": "user", "content": "hi"}])
    assert info.value.status == 401 and "$MY_KEY" in str(info.value) and KEY not in str(info.value)
    assert KEY not in repr(config) and "\n" not in str(info.value)


def test_sync_client_is_shared_by_threads_and_works_inside_a_loop(fake_judge: Any) -> None:
    fake_judge.delay_s = 0.2
    earlier = set(threading.enumerate())  # other tests' clients may still have their loops
    client = _client(fake_judge.url)
    with ThreadPoolExecutor(max_workers=4) as pool:
        texts = list(pool.map(lambda _: client.chat([{"role": "user", "content": "hi"}]).text, range(4)))
    assert texts == [fake_judge.policy_reply] * 4 and fake_judge.max_in_flight >= 3  # they overlap

    async def inside() -> str:
        return client.chat([{"role": "user", "content": "hi"}]).text

    assert asyncio.run(inside()) == fake_judge.policy_reply
    loops = [t for t in set(threading.enumerate()) - earlier if t.name == "evidra-chat-client"]
    assert len(loops) == 1  # one loop thread served every thread and the loop above
    client.close()
    assert not loops[0].is_alive()  # its loop thread is gone (other tests' threads may come and go)


def test_async_client_shares_one_pool_among_concurrent_calls(fake_judge: Any) -> None:
    fake_judge.delay_s = 0.2

    async def run() -> list[str]:
        async with AsyncChatClient(ClientConfig(fake_judge.url, "m")) as client:
            results = await asyncio.gather(
                *(client.chat([{"role": "user", "content": str(i)}]) for i in range(3))
            )
        return [r.text for r in results]

    assert asyncio.run(run()) == [fake_judge.policy_reply] * 3
    assert fake_judge.max_in_flight == 3  # all three were on the server at once: concurrent calls


def test_config_errors_name_the_field(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(InvalidInputError, match="base_url must be the http"):
        ClientConfig("localhost:8000/v1", "m")
    with pytest.raises(InvalidInputError, match="model is empty"):
        ClientConfig("http://h/v1", "")
    with pytest.raises(InvalidInputError, match="retries must be >= 0"):
        ChatEndpoint("http://h/v1", "m", retries=-1)
    with pytest.raises(InvalidInputError, match="jitter"):
        RetryPolicy(jitter=2.0)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("TEACHER_KEY", raising=False)
    check_api_key_env("OPENAI_API_KEY", "--api-key-env")  # the default may be unset: a local server
    with pytest.raises(ConfigError, match="--api-key-env TEACHER_KEY: that environment variable is not set"):
        check_api_key_env("TEACHER_KEY", "--api-key-env")

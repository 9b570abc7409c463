"""The OpenAI-compatible client behind its four callers (endpoint, judge, teacher, the client
itself) against hostile servers on 127.0.0.1 (the scripted fake of conftest.py): a server that
echoes the key, a gzip bomb, an oversized body, nesting 200,000 deep, ``Infinity`` and ``1e999``.
Each is one typed error (the judge: an unscored verdict), never a raw exception, and never more
memory than the cap; and a key goes only where the user said (``evidra.safeio.keys``)."""

from __future__ import annotations

import json
import logging
import tracemalloc
import zlib
from pathlib import Path
from typing import Any

import pytest

from evidra.cli.main import main
from evidra.core.errors import ConfigError
from evidra.core.types import Message, Sample, Span, Trajectory
from evidra.http.replies import MAX_REPLY_BYTES
from evidra.methods import build_task
from evidra.methods.lang2act.toolbox import OpenAIChatModel
from evidra.models.endpoint import ChatEndpoint
from evidra.openai.client import (
    ChatClient,
    ChatClientError,
    ClientConfig,
    MalformedResponseError,
    endpoint_config,
)
from evidra.rewards.judge_config import JudgeConfig, build_judge
from evidra.rewards.judge_http import HttpJudgeConfig, OpenAIJudge
from evidra.rewards.judge_protocol import JudgeItem
from evidra.safeio.keys import KeyPolicy
from hostile_http import gzip_bomb

CALLERS = ("client", "endpoint", "judge", "teacher")
SECRET = "hf_0123456789abcdefSECRET"


def _call(kind: str, url: str) -> tuple[bool, str, type[Exception] | None]:
    """One request through ``kind``, no retries: (ok, text or error, error type); the judge's
    unscored verdict is its error, and any exception other than ChatClientError escapes."""
    if kind == "judge":
        cfg = HttpJudgeConfig(url, "m", style="vragrl", timeout_s=5.0, max_retries=0)
        (verdict,) = OpenAIJudge(cfg).judge([JudgeItem("Q?", "Paris", "Paris")])
        return verdict.value is not None, verdict.error or "", None
    try:
        if kind == "client":
            return (
                True,
                ChatClient(endpoint_config(url, "m", retries=0))
                .chat([{"role": "user", "content": "hi"}])
                .text,
                None,
            )
        if kind == "endpoint":
            return True, ChatEndpoint(url, "m", retries=0).complete([Message.text("user", "hi")]).text, None
        return True, OpenAIChatModel(url, "m", retries=0).complete("system", "hi"), None
    except ChatClientError as exc:
        return False, str(exc), type(exc)


HOSTILE = {  # name: (body, headers, words of the one-line error)
    "nested 200k deep": (b"[" * 200_000 + b"]" * 200_000, {}, "nested too deeply"),
    "index Infinity": (b'{"choices": [{"index": Infinity, "message": {"content": "x"}}]}', {}, "Infinity"),
    "usage 1e999": (b'{"choices": [], "usage": {"completion_tokens": 1e999}}', {}, "1e999 overflows"),
    "NaN": (b'{"choices": [{"message": {"content": "x"}}], "usage": {"completion_tokens": NaN}}', {}, "NaN"),
    "brotli": (b"\x0b\x02\x80{}\x03", {"Content-Encoding": "br"}, "Content-Encoding 'br'"),
    "bad gzip": (b"\x1f\x8b\x08\x00garbage", {"Content-Encoding": "gzip"}, "does not decompress"),
    "no choices": (b'{"object": "list"}', {}, "KeyError"),
    "4,301-digit integer": (b'{"choices": [], "n": ' + b"9" * 4301 + b"}", {}, "not JSON"),
}


@pytest.mark.parametrize("kind", CALLERS)
@pytest.mark.parametrize("name", HOSTILE)
def test_a_hostile_reply_is_one_typed_error(kind: str, name: str, fake_judge: Any) -> None:
    body, headers, words = HOSTILE[name]
    fake_judge.script = [fake_judge.Scripted(200, body, headers=headers)]
    ok, text, error = _call(kind, fake_judge.url)
    assert not ok and words in text and fake_judge.url in text and "\n" not in text
    assert error in (MalformedResponseError, None)  # None: the judge's unscored verdict


@pytest.mark.parametrize("kind", CALLERS)
def test_a_gzip_bomb_is_refused_at_the_cap_without_inflating_it(kind: str, fake_judge: Any) -> None:
    bomb = gzip_bomb(4 * MAX_REPLY_BYTES)  # 64 MiB decoded, 64 KiB sent
    assert len(bomb) < 100_000
    fake_judge.script = [fake_judge.Scripted(200, bomb, headers={"Content-Encoding": "gzip"})]
    tracemalloc.start()
    try:
        ok, text, _ = _call(kind, fake_judge.url)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert not ok and f"over the {MAX_REPLY_BYTES}-byte cap" in text
    assert peak < 3 * MAX_REPLY_BYTES  # the cap and one copy, never the 64 MiB


def test_a_gzip_reply_under_the_cap_is_decoded(fake_judge: Any) -> None:
    payload = json.dumps({"choices": [{"message": {"content": "B" * 100_000}}]}).encode()
    fake_judge.script = [
        fake_judge.Scripted(200, zlib.compress(payload), headers={"Content-Encoding": "deflate"})
    ]
    assert _call("client", fake_judge.url) == (True, "B" * 100_000, None)


def test_a_declared_oversized_body_is_refused_before_it_is_read(fake_judge: Any) -> None:
    body = json.dumps({"choices": [{"message": {"content": "C" * 2000}}]}).encode()
    fake_judge.script = [fake_judge.Scripted(200, body)]
    config = ClientConfig(fake_judge.url, "m", max_reply_bytes=1000)
    with pytest.raises(
        MalformedResponseError, match=r"of \d+ bytes \(its Content-Length\), over the 1000-byte cap"
    ):
        ChatClient(config).chat([{"role": "user", "content": "hi"}])


def test_an_error_body_is_read_only_as_far_as_it_is_shown(fake_judge: Any) -> None:
    fake_judge.script = [fake_judge.Scripted(400, b'{"error": {"message": "' + b"x" * 50_000_000 + b'"}}')]
    with pytest.raises(ChatClientError) as info:
        ChatClient(endpoint_config(fake_judge.url, "m", retries=0)).chat([{"role": "user", "content": "hi"}])
    assert str(info.value).startswith("HTTP 400 from") and len(str(info.value)) < 300


# --- keys -------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", CALLERS)
def test_a_key_the_server_echoes_is_redacted(
    kind: str, fake_judge: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    echo = {"error": {"message": f"invalid key Bearer {SECRET}{'.' * 300}"}}  # past the cut, too
    fake_judge.script = [fake_judge.Scripted(401, echo), fake_judge.Scripted(500, echo)]
    ok, text, _ = _call(kind, fake_judge.url)
    assert fake_judge.requests[0]["authorization"] == f"Bearer {SECRET}"  # the user named this URL
    assert not ok and "invalid key Bearer ***" in text and SECRET[:8] not in text
    ok, text, _ = _call(kind, fake_judge.url)  # a 5xx (retried, then given up) the same
    assert not ok and "***" in text and SECRET[:8] not in text


def _recipe_judge(url: str, variable: str = "HF_TOKEN") -> Any:
    return build_judge(
        JudgeConfig(
            kind="openai", base_url=url, model="m", api_key_env=variable, max_retries=0, timeout_s=5.0
        )
    )


@pytest.mark.parametrize("variable", ["HF_TOKEN", "OPENAI_API_KEY"])
def test_a_recipe_cannot_send_a_key_to_its_url(
    variable: str, fake_judge: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(variable, SECRET)
    monkeypatch.delenv("EVIDRA_KEY_HOSTS", raising=False)
    caplog.set_level(logging.WARNING)
    (verdict,) = _recipe_judge(fake_judge.url, variable).judge([JudgeItem("Q?", "Paris", "Paris")])
    assert verdict.value is True and fake_judge.requests[-1]["authorization"] is None
    host = fake_judge.url.split("//")[1].split("/")[0]
    assert f"${variable} was not sent to {host}, which judge.base_url names" in caplog.text
    assert f"EVIDRA_KEY_HOSTS={variable}@{host}" in caplog.text and SECRET not in caplog.text
    # the same recipe, once the user allows exactly that variable at that host
    monkeypatch.setenv("EVIDRA_KEY_HOSTS", f"OTHER@{host} {variable}@{host}")
    _recipe_judge(fake_judge.url, variable).judge([JudgeItem("Q?", "Lyon", "Paris")])
    assert fake_judge.requests[-1]["authorization"] == f"Bearer {SECRET}"
    monkeypatch.setenv("EVIDRA_KEY_HOSTS", f"{variable}@{host.split(':')[0]}:1")  # another port
    _recipe_judge(fake_judge.url, variable).judge([JudgeItem("Q?", "Rome", "Paris")])
    assert fake_judge.requests[-1]["authorization"] is None


def test_a_withheld_key_names_variable_host_and_entry_on_401(
    fake_judge: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_TOKEN", SECRET)
    monkeypatch.delenv("EVIDRA_KEY_HOSTS", raising=False)
    fake_judge.script = [fake_judge.Scripted(401, {"error": {"message": "missing key"}})]
    (verdict,) = _recipe_judge(fake_judge.url).judge([JudgeItem("Q?", "Paris", "Paris")])
    host = fake_judge.url.split("//")[1].split("/")[0]
    assert verdict.value is None and verdict.error is not None
    hint = f"the key in $HF_TOKEN was not sent to {host}, which judge.base_url names"
    assert verdict.error.endswith(f"missing key; {hint}; to send it, set EVIDRA_KEY_HOSTS=HF_TOKEN@{host}")


def _eval_argv(url: str, out: Path, *extra: str) -> list[str]:
    return [
        "eval",
        "--synthetic",
        "tunnel.chain",
        "--n",
        "1",
        "--paradigm",
        "direct",
        "--endpoint",
        url,
        "--model-name",
        "policy",
        "--out",
        str(out),
        *extra,
    ]


def test_a_malformed_allow_list_is_refused_before_any_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", SECRET)
    monkeypatch.setenv("EVIDRA_KEY_HOSTS", "HF_TOKEN=evil.example")
    with pytest.raises(
        ConfigError, match=r"EVIDRA_KEY_HOSTS entry 'HF_TOKEN=evil\.example' is not VARIABLE@host"
    ):
        _recipe_judge("http://127.0.0.1:9/v1")


def test_the_eval_flags_are_the_users_and_carry_the_key(
    fake_judge: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("MY_JUDGE_KEY", SECRET)
    monkeypatch.delenv("EVIDRA_KEY_HOSTS", raising=False)
    fake_judge.policy_reply = "<think>t</think><answer>{1}</answer>"  # an answer the judge is asked about
    judge = [
        "--judge",
        "openai",
        "--judge-url",
        fake_judge.url,
        "--judge-model",
        "judge",
        "--judge-api-key-env",
        "MY_JUDGE_KEY",
    ]
    assert main(_eval_argv(fake_judge.url, tmp_path, *judge)) == 0
    sent = {r["body"]["model"]: r["authorization"] for r in fake_judge.requests}
    assert sent["judge"] == f"Bearer {SECRET}"


# --- the command line and training ------------------------------------------------------------


@pytest.mark.parametrize("name", ["nested 200k deep", "index Infinity", "usage 1e999"])
def test_eval_endpoint_turns_a_hostile_reply_into_one_line(
    name: str, fake_judge: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_judge.script = [fake_judge.Scripted(200, HOSTILE[name][0])] * 3
    assert main(_eval_argv(fake_judge.url, tmp_path)) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("evidra eval: error:")]
    assert len(err) == 1 and HOSTILE[name][2] in err[0] and "Traceback" not in err[0]


def _trajectory(answer: str) -> Trajectory:
    text = f"<description>d</description><reason>r</reason><answer>{answer}</answer>"
    return Trajectory(
        prompt_ids=(1,), token_ids=(2,), policy_mask=(1,), logprobs=(0.0,), turns=(Span(0, 1),), texts=(text,)
    )


@pytest.mark.parametrize("name", ["nested 200k deep", "index Infinity", "brotli"])
def test_in_training_a_hostile_judge_leaves_the_sample_unscored(
    name: str, fake_judge: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    body, headers, _ = HOSTILE[name]
    fake_judge.script = [fake_judge.Scripted(200, body, headers=headers)] * 3
    judge = JudgeConfig(kind="openai", base_url=fake_judge.url, model="m", max_retries=1, timeout_s=5.0)
    task = build_task(dict(name="lang2act", stage=1, judge=judge))
    result = task.score(Sample(id="q", question="Capital?", answers=("Paris",)), _trajectory("Paris"))
    assert not result.scored and "unscored:judge" in result.components
    assert {r["authorization"] for r in fake_judge.requests} == {None}  # the recipe's URL: no key


def test_in_training_an_unexpected_judge_failure_is_unscored(monkeypatch: pytest.MonkeyPatch) -> None:
    async def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a bug")

    judge = OpenAIJudge(HttpJudgeConfig("http://127.0.0.1:9/v1", "m", style="vragrl", max_retries=0))
    monkeypatch.setattr("evidra.openai.client.AsyncChatClient.chat", broken)
    (verdict,) = judge.judge([JudgeItem("Q?", "Paris", "Paris")])
    assert verdict.value is None and verdict.error == "judge failed: RuntimeError"


def test_key_policy_default_is_the_user(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.delenv("EVIDRA_KEY_HOSTS", raising=False)
    assert ClientConfig("http://127.0.0.1:9/v1", "m").key() == SECRET  # a Python caller named the URL
    filed = ClientConfig("http://127.0.0.1:9/v1", "m", key_policy=KeyPolicy.file("judge.base_url"))
    assert filed.key() is None and ClientConfig("http://h/v1", "m", api_key="explicit").key() == "explicit"

"""The judge chosen from config, in training tasks and in ``evidra eval``, against a local fake
OpenAI-compatible server (loopback only)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from evidra.core.config import load_config
from evidra.core.errors import ConfigError
from evidra.core.types import Sample, Span, Trajectory
from evidra.methods import build_task, rl_trainer
from evidra.rewards.judge import RuleJudge
from evidra.rewards.judge_config import JudgeConfig, build_judge
from evidra.rewards.judge_http import OpenAIJudge
from evidra.rewards.judge_protocol import JudgeItem
from evidra.rl.run_config import RLConfig
from evidra.safeio.keys import KeyPolicy


class _Fake(BaseHTTPRequestHandler):
    """``/ok/...`` judges True iff the generated answer equals the reference; ``/fail/...`` is 500."""

    seen: list[dict[str, Any]]

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.seen.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
        if self.path.startswith("/fail"):
            return self._send(500, {"error": "down"})
        if self.path.startswith("/trickle"):  # one byte every 0.1 s: each read is quick, the whole is not
            self.send_response(200)
            self.send_header("Content-Length", "100")
            self.end_headers()
            for _ in range(40):
                time.sleep(0.1)
                try:
                    self.wfile.write(b" ")
                    self.wfile.flush()
                except OSError:
                    return
            return
        user = body["messages"][-1]["content"]
        tags = []
        for block in user.split("--- ITEM")[1:] or [user]:
            ref = block.split("## Reference Answer\n")[1].split("\n")[0]
            gen = block.split("## Generated Answer\n")[1].split("\n")[0]
            tags.append(f"<judge>{ref == gen}</judge>")
        self._send(200, {"choices": [{"message": {"role": "assistant", "content": "\n".join(tags)}}]})

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def fake() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    seen: list[dict[str, Any]] = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), type("H", (_Fake,), {"seen": seen}))
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", seen
    httpd.shutdown()
    httpd.server_close()


def _openai(url: str, **kw: Any) -> JudgeConfig:
    return JudgeConfig(kind="openai", base_url=url, model="judge-72b", timeout_s=2.0, **kw)


def test_build_judge_from_config(monkeypatch: pytest.MonkeyPatch) -> None:
    assert build_judge(JudgeConfig(rule="exact")) == RuleJudge("exact")
    monkeypatch.setenv("TEST_JUDGE_KEY", "sk-test")
    monkeypatch.delenv("EVIDRA_KEY_HOSTS", raising=False)
    cfg = _openai("http://127.0.0.1:9/v1", api_key_env="TEST_JUDGE_KEY")
    judge = build_judge(cfg, "lang2act")
    assert isinstance(judge, OpenAIJudge)
    assert (judge.config.style, judge.config.api_key, judge.config.model) == ("lang2act", None, "judge-72b")
    assert judge.client_config.key() is None  # a recipe's URL: the key stays home
    monkeypatch.setenv("EVIDRA_KEY_HOSTS", "TEST_JUDGE_KEY@127.0.0.1:9")
    assert judge.client_config.key() == "sk-test"  # ... unless the user's environment allows the pair
    user_named = build_judge(cfg, "lang2act", key_policy=KeyPolicy())
    monkeypatch.delenv("EVIDRA_KEY_HOSTS")
    assert isinstance(user_named, OpenAIJudge) and user_named.client_config.key() == "sk-test"
    assert "sk-test" not in repr(judge.config) + repr(judge.client_config)  # the key is never printed


def _lang2act_trajectory(answer: str) -> Trajectory:
    text = f"<description>d</description><reason>r</reason><answer>{answer}</answer>"
    return Trajectory(
        prompt_ids=(1,), token_ids=(2,), policy_mask=(1,), logprobs=(0.0,), turns=(Span(0, 1),), texts=(text,)
    )


def test_training_task_asks_the_configured_judge(
    fake: tuple[str, list[dict[str, Any]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, seen = fake
    monkeypatch.setenv("TEST_JUDGE_KEY", "sk-test")
    monkeypatch.setenv("EVIDRA_KEY_HOSTS", f"TEST_JUDGE_KEY@{url.split('//')[1]}")  # the user allows it
    task = build_task(
        dict(name="lang2act", stage=1, judge=_openai(f"{url}/ok/v1", api_key_env="TEST_JUDGE_KEY"))
    )
    sample = Sample(id="q", question="Capital of France?", answers=("Paris",))
    right = task.score(sample, _lang2act_trajectory("Paris"))
    wrong = task.score(sample, _lang2act_trajectory("Lyon"))
    assert right.scored and wrong.scored
    assert right.components["answer"] == 1.0 and wrong.components["answer"] == 0.0
    assert {s["auth"] for s in seen} == {"Bearer sk-test"}
    assert {s["body"]["model"] for s in seen} == {"judge-72b"}
    assert "Capital of France?" in seen[0]["body"]["messages"][-1]["content"]


def test_a_failed_judgement_is_unscored_not_zero(fake: tuple[str, list[dict[str, Any]]]) -> None:
    url, seen = fake
    task = build_task(dict(name="lang2act", stage=1, judge=_openai(f"{url}/fail/v1", max_retries=2)))
    result = task.score(Sample(id="q", question="Q?", answers=("Paris",)), _lang2act_trajectory("Paris"))
    assert not result.scored and "unscored:judge" in result.components
    assert len(seen) == 3  # one attempt and two bounded retries


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("method.judge.kind=openia", "did you mean 'openai'"),
        ("method.judge={kind: openai, base_url: 'http://x/v1'}", "judge.model is empty"),
        ("method.judge={kind: openai, base_url: 'x', model: m}", "http"),
        ("method.judge.concurrency=0", "judge.concurrency must be >= 1"),
        ("judge.rule=exact", "config key 'judge' was replaced; did you mean 'method.judge'"),
    ],
)
def test_judge_config_errors_before_the_model_loads(tmp_path: Path, override: str, message: str) -> None:
    over = ["model.path=tiny:qwen2_5_vl", f"run.output_dir={tmp_path}", "method.name=vragrl", override]
    with pytest.raises(ConfigError, match=message):
        rl_trainer(load_config(RLConfig, None, over))
    assert not (tmp_path / "models").exists()


def test_the_judge_timeout_bounds_the_whole_call(fake: tuple[str, list[dict[str, Any]]]) -> None:
    url, _ = fake
    judge = build_judge(
        JudgeConfig(kind="openai", base_url=f"{url}/trickle/v1", model="m", timeout_s=0.5, max_retries=0)
    )
    start = time.perf_counter()
    (verdict,) = judge.judge([JudgeItem("Q?", "Paris", "Paris")])
    assert verdict.value is None and time.perf_counter() - start < 3.5  # a 4 s trickle, cut at 0.5 s

"""VRAG-RL (§3.3, App. A) and Lang2Act (§3.1, §4) score answers with a model-based judge, because a
recall- or containment-like rule is hacked by an answer that lists candidates. Their recipes ship
that judge (an OpenAI-compatible endpoint) with the rule judge as the offline fallback and the
reward guards on, so offline the enumerating answer is not scored correct."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from evidra.core.config import load_config
from evidra.core.errors import ConfigError
from evidra.core.types import Sample
from evidra.methods import build_task
from evidra.rewards.guards import guarded
from evidra.rewards.judge import RuleJudge
from evidra.rewards.judge_config import JudgeConfig, build_judge
from evidra.rewards.judge_fallback import FallbackJudge, endpoint_unreachable  # the real probe
from evidra.rewards.judge_http import OpenAIJudge
from evidra.rewards.judge_protocol import JudgeItem, Verdict
from evidra.rl.run_config import RLConfig
from evidra.rl.tasks import Task

ROOT = Path(__file__).parents[2]
SAMPLE = Sample("s", "What is the capital of France?", ("Paris",), gold_pages=("p1",))
ENUMERATING = "London, Berlin, Paris, Rome, Madrid"
# the final turn of each method's paradigm, answering ``{}``
FINAL = {
    "vragrl": "<think>The page names it.</think><answer>{}</answer>",
    "lang2act": "<think>t</think><description>the page names the city</description><answer>{}</answer>",
}
RECIPES = [
    ("vragrl", "configs/vragrl.yaml"),
    ("vragrl", "configs/tiny/vragrl.yaml"),
    ("lang2act", "configs/lang2act_stage1.yaml"),
    ("lang2act", "configs/tiny/lang2act_stage1.yaml"),
    ("lang2act", "configs/lang2act_stage2.yaml"),
    ("lang2act", "configs/tiny/lang2act_stage2.yaml"),
]


def _score(task: Task, cfg: RLConfig, method: str, answer: str) -> tuple[float, dict[str, float]]:
    """The recipe's default scoring path, as the trainer takes it: the task's reward, then the
    recipe's guards."""
    parsed = task.parse(FINAL[method].format(answer))
    result = guarded(task.reward(parsed, SAMPLE, None), parsed, SAMPLE, cfg.reward)
    return result.total, dict(result.components)


@pytest.mark.parametrize(("method", "recipe"), RECIPES)
def test_the_recipe_ships_the_model_judge_with_the_rule_as_fallback(method: str, recipe: str) -> None:
    cfg = load_config(RLConfig, ROOT / recipe, ["model.path=x"])
    judge = cfg.method["judge"]
    assert (judge["kind"], judge["fallback"]) == ("openai", "rule")
    assert judge["base_url"].startswith("http://") and judge["model"]
    assert cfg.reward.guards


@pytest.mark.parametrize(("method", "recipe"), RECIPES)
def test_offline_the_enumerating_answer_is_not_scored_correct(
    method: str, recipe: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The enumerating answer contains "Paris", so the fallback rule judge credits it; the
    recipe's guards cap it at 0, below the honest answer. One log line names the fallback."""
    cfg = load_config(RLConfig, ROOT / recipe, ["model.path=x"])
    task = build_task(cfg.method)
    with caplog.at_level(logging.WARNING, logger="evidra.rewards.judge_fallback"):
        hack, components = _score(task, cfg, method, ENUMERATING)
        honest, honest_components = _score(task, cfg, method, "Paris")
    assert components["answer"] == 1.0  # the containment rule alone would pay it
    assert hack <= 0.0 and components["guard:many_candidates"] == 1.0
    assert honest > 0.0 and "guard:many_candidates" not in honest_components
    fallback_lines = [r for r in caplog.records if "offline fallback" in r.getMessage()]
    assert len(fallback_lines) == 1 and "127.0.0.1:8001" in fallback_lines[0].getMessage()


class _Models(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_GET(self) -> None:
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Models)
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()


def _closed_port() -> str:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Models)
    port = httpd.server_address[1]
    httpd.server_close()  # nothing listens there now
    return f"http://127.0.0.1:{port}/v1"


class _Counting:
    def __init__(self, value: bool) -> None:
        self.value, self.calls = value, 0

    def judge(self, items: Any) -> list[Verdict]:
        self.calls += 1
        return [Verdict(self.value) for _ in items]


def test_the_probe_tells_a_server_from_a_closed_port(server: str) -> None:
    assert endpoint_unreachable(server) is None  # any HTTP answer, even a 404, is a server
    reason = endpoint_unreachable(_closed_port(), timeout_s=1.0)
    assert reason is not None and "Connect" in reason


def test_the_endpoint_judges_when_it_answers(server: str) -> None:
    primary, fallback = _Counting(True), _Counting(False)
    judge = FallbackJudge(primary, fallback, server, probe=endpoint_unreachable)
    items = [JudgeItem("q", "a", "a")]
    assert [judge.judge(items), judge.judge(items)] == [[Verdict(True)], [Verdict(True)]]
    assert (primary.calls, fallback.calls) == (2, 0)


def test_an_unreachable_endpoint_falls_back_once_with_one_line(caplog: pytest.LogCaptureFixture) -> None:
    primary, fallback = _Counting(True), _Counting(False)
    judge = FallbackJudge(primary, fallback, _closed_port(), probe=lambda url: endpoint_unreachable(url, 1.0))
    with caplog.at_level(logging.WARNING, logger="evidra.rewards.judge_fallback"):
        for _ in range(3):
            assert judge.judge([JudgeItem("q", "a", "a")]) == [Verdict(False)]
    assert (primary.calls, fallback.calls) == (0, 3)
    assert len(caplog.records) == 1 and "not reachable" in caplog.records[0].getMessage()


def test_the_fallback_is_built_from_config(caplog: pytest.LogCaptureFixture) -> None:
    cfg = JudgeConfig(kind="openai", base_url="http://127.0.0.1:8001/v1", model="m", fallback="rule")
    built = build_judge(cfg)
    assert isinstance(built, FallbackJudge) and isinstance(built.primary, OpenAIJudge)
    assert built.fallback == RuleJudge("contains")
    with caplog.at_level(logging.WARNING, logger="evidra.rewards.judge_fallback"):
        no_endpoint = build_judge(JudgeConfig(kind="openai", fallback="rule", rule="exact"))
    assert no_endpoint == RuleJudge("exact")
    assert [r.getMessage().split(";")[0] for r in caplog.records] == ["no judge endpoint is configured"]
    with pytest.raises(ConfigError, match="base_url"):
        build_judge(JudgeConfig(kind="openai"))  # no endpoint and no fallback: refused, not silent

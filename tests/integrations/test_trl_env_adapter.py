"""as_trl_environment without TRL: the class TRL probes, its tools' schemas, the episode the
reward reads (no trl import; the GRPOTrainer run is in test_trl_environment.py)."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any

import pytest
from PIL import Image

from evidra.core.errors import ConfigError
from evidra.core.types import ImagePart, Message, Parsed, Sample, TextPart, Trajectory
from evidra.env.environment import StepInfo, StepResult
from evidra.env.toy import KeyValueEnv
from evidra.integrations import BBOX_TOOL, SEARCH_TOOL, ZOOM_TOOL, ToolSpec, as_trl_environment, as_trl_reward
from evidra.integrations.trl_env import ENDED, trl_content
from evidra.rewards.reward import RewardResult
from evidra.rewards.toy import key_value_answer, parse_answer


def _tools_as_trl_sees_them(cls: type) -> list[str]:
    # GRPOTrainer: inspect.getmembers(type(instance), predicate=inspect.isfunction), minus reset,
    # get_reward and names starting with "_"
    return [
        n
        for n, _ in inspect.getmembers(cls, predicate=inspect.isfunction)
        if n not in ("reset", "get_reward") and not n.startswith("_")
    ]


def test_only_the_tools_are_public_functions_and_their_schemas_render() -> None:
    from transformers.utils import get_json_schema

    Env = as_trl_environment(lambda s: KeyValueEnv({}), (SEARCH_TOOL, BBOX_TOOL, ZOOM_TOOL))
    assert sorted(_tools_as_trl_sees_them(Env)) == ["bbox", "image_zoom_in_tool", "search"]
    env = Env()
    search = get_json_schema(env.search)["function"]
    assert search["name"] == "search"
    assert search["parameters"]["properties"]["query"] == {
        "type": "string",
        "description": "The search query.",
    }
    assert search["parameters"]["required"] == ["query"]
    box = get_json_schema(env.bbox)["function"]["parameters"]["properties"]["box"]
    assert box["type"] == "array" and box["items"] == {"type": "integer"}


def test_tool_actions_are_the_text_the_environments_parse() -> None:
    assert SEARCH_TOOL.action(query="q") == "<search>q</search>"
    assert BBOX_TOOL.action(box=[1, 2, 3, 4]) == "<bbox>[1, 2, 3, 4]</bbox>"
    assert ZOOM_TOOL.action(bbox_2d=[1, 2, 3, 4]) == (
        '<tool_call>{"name": "image_zoom_in_tool", "arguments": {"bbox_2d": [1, 2, 3, 4]}}</tool_call>'
    )
    with pytest.raises(ConfigError):
        ToolSpec("reset", "x", {}, lambda: "")
    with pytest.raises(ConfigError):
        as_trl_environment(lambda s: KeyValueEnv({}), ())
    with pytest.raises(ConfigError):
        as_trl_environment(lambda s: KeyValueEnv({}), (SEARCH_TOOL, SEARCH_TOOL))


def test_reset_reuses_the_instance_and_the_reward_reads_the_episode() -> None:
    Env = as_trl_environment(lambda s: KeyValueEnv({"x": "7"}), (SEARCH_TOOL,))
    env = Env()
    fn = as_trl_reward(key_value_answer, parse_answer)
    totals = []
    for answer in ("7", "8"):  # TRL pools instances: the second episode starts clean
        assert env.reset(prompt=[{"role": "user", "content": "x?"}], answer="7") is None
        assert env.search(query="x") == "<information>7</information>"
        completion = [
            {"role": "assistant", "content": "", "tool_calls": [{"type": "function"}]},
            {"role": "tool", "name": "search", "content": "<information>7</information>"},
            {"role": "assistant", "content": f"<answer>{answer}</answer>"},
        ]
        totals += fn(
            prompts=[[{"role": "user", "content": "x?"}]],
            completions=[completion],
            completion_ids=[[1, 2, 3]],
            answer=["7"],
            environments=[env],
        )
        episode = env.evidra_episode
        assert episode is not None and episode.actions == ["<search>x</search>", f"<answer>{answer}</answer>"]
        assert episode.sample.question == "x?" and episode.sample.answers == ("7",)
        assert episode.done and episode.infos[-1].answer == answer
        assert env.search(query="x") == ENDED  # after the end, tools no longer reach the environment
    assert totals == [pytest.approx(1.1), pytest.approx(0.1)]


def test_prompt_from_env_returns_the_environment_prompt_text() -> None:
    Env = as_trl_environment(lambda s: KeyValueEnv({}), (SEARCH_TOOL,), prompt_from_env=True)
    text = Env().reset(question="What is x?")
    assert isinstance(text, str) and text.endswith("Question: What is x?") and "<search>" in text


@dataclass
class _PagesEnv:
    """A search environment stand-in: shows an image page and records retrieved ids."""

    image: Any
    stop: tuple[str, ...] = ()
    retrieved: list[str] = field(default_factory=list)

    def reset(self, sample: Sample) -> list[Message]:
        self.retrieved = []
        return [Message.text("user", sample.question)]

    def step(self, text: str) -> StepResult:
        if text.startswith("<answer>"):
            return StepResult(done=True, info=StepInfo("answer", retrieved=tuple(self.retrieved)))
        self.retrieved.append(f"p{len(self.retrieved)}")
        obs = Message("user", (TextPart("page:"), ImagePart(self.image, page_id=self.retrieved[-1])))
        return StepResult((obs,), info=StepInfo("search", retrieved=tuple(self.retrieved)))


def test_image_observations_become_content_blocks_and_the_reward_sees_retrieved_pages(tmp_path: Any) -> None:
    path = tmp_path / "page.png"
    Image.new("RGB", (8, 8), "white").save(path)
    Env = as_trl_environment(lambda s: _PagesEnv(str(path)), (SEARCH_TOOL,))
    env = Env()
    env.reset(question="q")
    blocks = env.search(query="a")
    assert isinstance(blocks, list) and blocks[0] == {"type": "text", "text": "page:"}
    assert blocks[1]["type"] == "image" and blocks[1]["image"].size == (8, 8)  # a path is opened as PIL
    env.search(query="b")
    seen: list[Any] = []

    def reward(parsed: Parsed, sample: Sample, trajectory: Trajectory | None = None) -> RewardResult:
        seen.append((parsed.retrieved, trajectory))
        return RewardResult(total=1.0)

    fn = as_trl_reward(reward)
    assert fn(
        prompts=["q"],
        completions=[[{"role": "assistant", "content": "<answer>x</answer>"}]],
        completion_ids=[[5, 6]],
        environments=[env],
    ) == [1.0]
    retrieved, trajectory = seen[0]
    assert retrieved == ("p0", "p1")
    assert trajectory.texts == ("<search>a</search>", "<search>b</search>", "<answer>x</answer>")
    assert trajectory.token_ids == (5, 6) and trajectory.finished


def test_trl_content_text_only_joins_messages() -> None:
    assert trl_content([Message.text("user", "a"), Message.text("user", "b")]) == "a\nb"
    assert trl_content([]) == ""


def test_environments_of_other_kinds_are_ignored() -> None:
    fn = as_trl_reward(key_value_answer, parse_answer)
    out = fn(
        prompts=["q"],
        completions=["<answer>7</answer>"],
        completion_ids=[[1]],
        answer=["7"],
        environments=[object()],
    )
    assert out == [1.0]

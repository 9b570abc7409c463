"""Each episode's text is parsed once per turn across a rollout and its scoring."""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from evidra.core.types import Box, CoordSpace, Page, Parsed, Sample, Trajectory, Word
from evidra.env import SingleTurnEnv
from evidra.env.search import SearchEnv, bm25_searcher
from evidra.models.generation import SamplingParams
from evidra.paradigms import Direct
from evidra.paradigms.search_agent import SearchAgent
from evidra.rewards.reward import RewardResult
from evidra.rl.episode_scoring import score_episodes
from evidra.rl.tasks import Task
from evidra.rollout import HFBackend, RolloutLimits, rollout, same_parser


@dataclass(frozen=True)
class _Counting:
    """A paradigm that counts its parser's calls."""

    inner: Any
    calls: list[str] = field(default_factory=list, compare=False)
    name: str = "counting"

    def build_messages(self, sample: Sample, pages: Any) -> Any:
        return self.inner.build_messages(sample, pages)

    def parse(self, text: str) -> Parsed:
        self.calls.append(text)
        parsed: Parsed = self.inner.parse(text)
        return parsed

    def reward_names(self) -> tuple[str, ...]:
        return ("exact",)


def _reward(parsed: Parsed, sample: Sample, trajectory: Trajectory | None = None) -> RewardResult:
    return RewardResult(total=float(parsed.answer == sample.answers[0]))


def _task(paradigm: _Counting, make_env: Any) -> Task:
    return Task("count", lambda cfg: [], make_env, paradigm.parse, _reward)


SAMPLES = [Sample(id="a", question="What is 2 + 2?", answers=("4",))]
PARAMS = SamplingParams(max_new_tokens=6, temperature=1.0, seed=0)


def test_single_turn_rollout_and_scoring_parse_each_turn_once(tiny_vlms: dict[str, Any]) -> None:
    vlm = tiny_vlms["qwen2_5_vl"]
    paradigm = _Counting(Direct())
    task = _task(paradigm, lambda s: SingleTurnEnv(paradigm))
    episodes = rollout(HFBackend(vlm), task.make_env, SAMPLES, 3, PARAMS, RolloutLimits(1, 6, 6))
    results, final = score_episodes(task, vlm, episodes, guards=True)
    turns = sum(ep.trajectory.num_turns for ep in episodes)
    assert turns == 3 and len(paradigm.calls) == turns  # without reuse: 3 turns + 3 scores + 3 guards
    assert [p.text for p in final] == [ep.trajectory.texts[-1] for ep in episodes]
    assert len(results) == 3


def test_multi_turn_search_rollout_parses_each_turn_once(tiny_vlms: dict[str, Any]) -> None:
    vlm = tiny_vlms["qwen2_5_vl"]
    paradigm = _Counting(SearchAgent())
    words = tuple(Word(w, Box(0, 0, 5, 5, CoordSpace.PAGE)) for w in ["the", "answer", "is", "4"])
    pages = {"p": Page("p", "", 10, 10, words=words)}
    task = _task(paradigm, lambda s: SearchEnv(bm25_searcher(pages.values()), pages, paradigm, max_turns=3))
    episodes = rollout(HFBackend(vlm), task.make_env, SAMPLES, 2, PARAMS, RolloutLimits(3, 6, 200))
    score_episodes(task, vlm, episodes, guards=True)
    # the environment parses a turn once (a turn repeating the previous turn's text reuses it), and
    # neither the reward nor the guards parse the final turn again
    texts = [ep.trajectory.texts for ep in episodes]
    assert len(paradigm.calls) == sum(1 + sum(a != b for a, b in pairwise(t)) for t in texts)
    assert all(p is not None for ep in episodes for p in ep.parsed)
    assert any(ep.trajectory.num_turns > 1 for ep in episodes)


def test_another_parser_parses_the_final_turn_again(tiny_vlms: dict[str, Any]) -> None:
    vlm = tiny_vlms["qwen2_5_vl"]
    env_paradigm, task_paradigm = _Counting(Direct()), _Counting(Direct(), name="other")
    task = _task(task_paradigm, lambda s: SingleTurnEnv(env_paradigm))
    episodes = rollout(HFBackend(vlm), task.make_env, SAMPLES, 2, PARAMS, RolloutLimits(1, 6, 6))
    score_episodes(task, vlm, episodes)
    assert len(env_paradigm.calls) == 2 and len(task_paradigm.calls) == 2


def test_same_parser() -> None:
    assert same_parser(SearchAgent().parse, SearchAgent().parse)  # equal paradigms
    assert not same_parser(SearchAgent().parse, Direct().parse)
    assert same_parser(len, len) and not same_parser(str, len)  # type: ignore[arg-type]


def test_evaluation_reuses_the_environments_parse_of_each_turn() -> None:
    """An evaluated episode through a parsing environment is parsed once per turn (by the
    environment), not again by ``to_prediction``; with another paradigm it is parsed anew."""
    from evidra.core.geometry import vision_spec
    from evidra.eval.runner import RawEpisode, to_prediction

    paradigm = _Counting(Direct())
    env = SingleTurnEnv(paradigm)
    env.reset(SAMPLES[0])
    text = "<answer>4</answer>"
    result = env.step(text)
    raw = RawEpisode((text,), (result.info,), 3, True, 0.0, (result.parsed,), paradigm.parse)
    assert paradigm.calls == [text]  # the environment's parse
    pred = to_prediction(SAMPLES[0], raw, paradigm, vision_spec("qwen2_5_vl"))  # type: ignore[arg-type]
    assert pred.answer == "4" and paradigm.calls == [text]
    other = _Counting(SearchAgent())
    to_prediction(SAMPLES[0], raw, other, vision_spec("qwen2_5_vl"))  # type: ignore[arg-type]
    assert other.calls == [text]

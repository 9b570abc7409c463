"""The method layer: one registered Method per paper with its own options class, checked
options; the former task names and keys are one-line errors naming their new spelling."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from evidra.core.config import load_config
from evidra.core.errors import ConfigError, RegistryError
from evidra.core.types import Parsed, Sample
from evidra.eval.tables import LAYOUTS
from evidra.methods import METHODS, Resources, build_task, method_section
from evidra.methods.cave.reward import CaveReward
from evidra.methods.resolve import FORMER_TASKS
from evidra.paradigms import PARADIGMS
from evidra.retrieval.interfaces import Hit
from evidra.rewards.judge import RuleJudge
from evidra.rewards.judge_http import OpenAIJudge
from evidra.rl.run_config import DataConfig, RLConfig
from evidra.rl.tasks import task_samples


def _cfg(*over: str) -> RLConfig:
    return load_config(RLConfig, None, ["model.path=x", *over])


def test_every_paper_is_a_registered_method_with_its_own_options() -> None:
    papers = {"cave", "evisrag", "lang2act", "lat", "vragrl"}
    assert papers <= set(METHODS.names())  # a test may register more
    fields = {n: {f.name for f in dataclasses.fields(METHODS.get(n).options)} for n in papers}
    assert fields["lat"] == {"reward_mode", "weights", "similarity", "similarity_checkpoint", "scoped"}
    assert fields["cave"] == {"judge", "weights"}  # no option another paper uses and CAVE does not
    for name in papers:
        method = METHODS.get(name)
        assert method.name == name and method.paradigm in PARADIGMS and method.layout in LAYOUTS


@pytest.mark.parametrize(
    ("task", "spelling"),
    [
        ("lat.colqwen2", r"method: \{name: lat, similarity: colqwen2\}"),
        ("lat.rs_grpo", r"method: \{name: lat, scoped: true\}"),
        ("lang2act.stage2", r"method: \{name: lang2act, stage: 2\}"),
        ("vragrl", r"method: \{name: vragrl\}"),
    ],
)
def test_a_former_task_name_is_an_error_naming_its_method_section(task: str, spelling: str) -> None:
    with pytest.raises(
        ConfigError, match=rf"data\.task='{task}' was replaced; did you mean {spelling}"
    ) as err:
        method_section(_cfg(f"data.task={task}"))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("data.index=idx/", "method.index"),
        ("data.toolbox=box.json", "method.toolbox"),
        ("data.pages_per_question=3", "method.pages_per_question"),
        ("reward.mode=upstream", "method.reward_mode"),
        ("judge.kind=rule", "method.judge"),
    ],
)
def test_a_former_key_is_an_error_naming_its_new_spelling(old: str, new: str) -> None:
    key = old.partition("=")[0].rsplit(".", 1)[0] if old.startswith("judge") else old.partition("=")[0]
    with pytest.raises(ConfigError, match=rf"config key '{key}' was replaced; did you mean '{new}'\?"):
        _cfg("method.name=lang2act", old)


def test_the_method_section_is_read_as_written() -> None:
    cfg = _cfg("method.name=lang2act", "method.stage=1", "method.pages_per_question=3")
    assert method_section(cfg) == dict(name="lang2act", stage=1, pages_per_question=3)
    assert method_section(_cfg("data.task=toy.length")) is None  # a plain task has no method


def test_conflicting_choices_are_errors_not_guesses() -> None:
    with pytest.raises(ConfigError, match=r"data\.task='toy\.length' and method\.name='lat'"):
        method_section(_cfg("method.name=lat", "data.task=toy.length"))
    with pytest.raises(ConfigError, match=r"method\.stage needs method\.name"):
        method_section(_cfg("method.stage=1"))


@pytest.mark.parametrize(
    ("method", "message"),
    [
        (
            dict(name="lat", stage=2),
            r"method\.stage is no option of method 'lat'; remove it \(options of lat: reward_mode, ",
        ),
        (dict(name="cave", reward_mode="upstream"), r"method\.reward_mode is no option of method 'cave'"),
        (dict(name="lang2act"), r"method\.stage must be 1 or 2"),
        (dict(name="lang2act", stage=1, toolbox="t.json"), r"toolbox is for lang2act stage 2"),
        (dict(name="lat", similarity="colqwen2"), r"needs method\.similarity_checkpoint"),
        (dict(name="lat", weights={"acc": 1.0}), r"component 'acc'; did you mean 'accuracy'\?"),
        (dict(name="vragrl", weights={"answer": 0.8}), r"method\.weights: .*sum to 1"),
        (
            dict(name="lat", simlarity="colqwen2"),
            r"method\.simlarity is no option .* did you mean 'similarity'",
        ),
        (dict(name="lat", scoped="yes"), r"method\.scoped must be true or false"),
        (
            dict(name="latt"),
            r"method\.name: unknown method 'latt' \(did you mean 'lat'\?\); "
            r"a method defined in your own module is loaded with --method-module my_pkg\.my_method",
        ),
    ],
)
def test_a_wrong_option_is_one_line_naming_key_and_fix(method: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        build_task(method)
    assert "\n" not in str(err.value)


def test_lat_weights_reweight_the_oracle_reward(tmp_path: Path) -> None:
    """The oracle answer earns 1 on each of LAT's four rewards: 4 unweighted; with step at 0 and
    accuracy at 2, 2 + 0 + 1 + 1 = 4 again, and with step at 0 alone, 3."""
    plain = build_task(dict(name="lat"))
    no_step = build_task(dict(name="lat", weights={"step": 0.0}))
    shifted = build_task(dict(name="lat", weights={"step": 0.0, "accuracy": 2.0}))
    sample = next(s for s in plain.samples(DataConfig(size=4, path=str(tmp_path))) if s.answerable)
    assert plain.oracle is not None
    parsed = plain.parse(plain.oracle(sample)[-1].plain_text)
    totals = [t.reward(parsed, sample, None).total for t in (plain, no_step, shifted)]
    assert totals == pytest.approx([4.0, 3.0, 4.0])


def test_resources_are_used_instead_of_building_from_config() -> None:
    judge = RuleJudge("exact")
    task = build_task(dict(name="lang2act", stage=1), Resources(judge=judge))
    assert task.reward.judge is judge
    similarity = object()
    lat = build_task(dict(name="lat"), Resources(similarity=similarity))
    assert lat.reward.similarity is similarity


def test_every_former_task_name_names_a_registered_method() -> None:
    assert set(FORMER_TASKS) == {
        "lat",
        "lat.colqwen2",
        "lat.rs_grpo",
        "evisrag",
        "lang2act.stage1",
        "lang2act.stage2",
        "vragrl",
        "cave",
    }
    for spelling in FORMER_TASKS.values():
        assert spelling.removeprefix("method: {name: ").split(",")[0].rstrip("}") in METHODS


class _Always:
    """A searcher that ranks one page first for every query."""

    def __init__(self, page_id: str) -> None:
        self.page_id = page_id

    def search(self, queries: Sequence[str], k: int = 10, exclude: object = None) -> list[list[Hit]]:
        return [[Hit(self.page_id, 1.0)] for _ in queries]


def test_two_vragrl_tasks_keep_their_own_search_engines() -> None:
    """The same benchmark under two tasks: each searches with the engine it was built with (no
    corpus is shared through the process)."""
    fix = Path(__file__).parents[1] / "fixtures" / "benchmarks" / "slidevqa" / "test.jsonl"
    data = DataConfig(source="slidevqa", path=str(fix), options={"n_slides": "3"})
    first = build_task(dict(name="vragrl"), Resources(searcher=_Always("deck-a_1")))
    second = build_task(dict(name="vragrl"), Resources(searcher=_Always("deck-a_3")))
    (a,) = task_samples(first, data)
    (b,) = task_samples(second, data)  # the same corpus key, built after the first
    shown = []
    for task, sample in ((first, a), (second, b)):
        env = task.make_env(sample)
        env.reset(sample)
        shown.append(env.step(f"<search>{sample.question}</search>").info.page_id)
    assert shown == ["deck-a_1", "deck-a_3"]


def test_lat_trains_on_the_released_reward_in_upstream_mode(tmp_path: Path) -> None:
    """An empty <answer> earns accuracy 0 in the paper and 0.5 in the released reward; the task
    built with reward_mode=upstream scores accuracy, grounding and format as the released reward."""
    from evidra.methods.lat.reward import LatReward
    from evidra.methods.lat.rules import UPSTREAM

    rules = ("accuracy", "ground", "format")

    paper = build_task(dict(name="lat"))
    upstream = build_task(dict(name="lat", reward_mode="upstream"))
    sample = next(s for s in paper.samples(DataConfig(size=4, path=str(tmp_path))) if s.answerable)
    assert paper.oracle is not None
    oracle = paper.oracle(sample)[-1].plain_text
    empty = oracle[: oracle.index("<answer>")] + "<answer> </answer>"
    for text in (oracle, empty):
        parsed = paper.parse(text)
        released = LatReward(rules=UPSTREAM, weights=dict.fromkeys(rules, 1.0))(parsed, sample).components
        got = upstream.reward(parsed, sample, None).components
        assert {k: got[k] for k in rules} == pytest.approx(released)
    got = [t.reward(paper.parse(empty), sample, None).components["accuracy"] for t in (paper, upstream)]
    assert got == [0.0, 0.5]


def test_cave_weights_reweight_its_anchors_and_credits() -> None:
    """With a correct, well-formed answer and no zoom, CAVE's reward is the anchors alone:
    accuracy 1.0 x 1 + format 0.1 x 1 by default; accuracy weighted 2 adds 1.0."""
    sample = Sample("s", "Which panel?", ("A",))
    parsed = Parsed(text="<think>t</think><answer>{A}</answer>")
    plain = build_task(dict(name="cave")).reward(parsed, sample, None).total
    heavy = build_task(dict(name="cave", weights={"accuracy": 2.0})).reward(parsed, sample, None).total
    assert heavy - plain == pytest.approx(1.0)
    with pytest.raises(ConfigError, match="no reward component 'beleif'; did you mean 'belief'"):
        build_task(dict(name="cave", weights={"beleif": 1.0}))


def test_a_method_names_its_judge_prompt_from_the_prompt_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each paper's judge prompt is a ``JUDGE_PROMPTS`` name, the one its configured judge asks
    with; a name the registry lacks is refused when the ``Method`` is made."""
    prompts = {name: METHODS.get(name).judge_prompt for name in ("cave", "lang2act", "vragrl")}
    assert prompts == {"cave": "cave", "lang2act": "lang2act", "vragrl": "vragrl"}
    monkeypatch.setenv("TEST_JUDGE_KEY", "sk-test")
    judge = dict(kind="openai", base_url="http://127.0.0.1:9/v1", model="m", api_key_env="TEST_JUDGE_KEY")
    reward = build_task(dict(name="cave", judge=judge)).reward
    assert isinstance(reward, CaveReward) and isinstance(reward.judge, OpenAIJudge)
    assert reward.judge.config.style == "cave"  # no request is made here
    lat = METHODS.get("lat")
    with pytest.raises(RegistryError, match="unknown judge prompt 'cav'; did you mean 'cave'"):
        dataclasses.replace(lat, judge_prompt="cav")

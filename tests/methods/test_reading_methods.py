"""Every paper method takes the learnable `reading` pages (``data.synthetic=[reading]``, what the
tiny recipes cold-start and train on), and its oracle conversation fits a one-page sample: the
single-turn methods' oracle answers earn their full reward, the agents' scripted episodes play
through their own environment (search finds the page, the crop lands on it) and answer."""

from __future__ import annotations

from pathlib import Path

import pytest

from evidra.core.types import Sample
from evidra.methods import build_task
from evidra.rl.run_config import DataConfig
from evidra.rl.tasks import Task, task_samples

RULE = {"kind": "rule"}  # the offline judge (the recipes' fallback)
SECTIONS: dict[str, dict[str, object]] = {
    "lat": {"name": "lat"},
    "evisrag": {"name": "evisrag"},
    "lang2act.stage1": {"name": "lang2act", "stage": 1},
    "lang2act.stage2": {"name": "lang2act", "stage": 2},
    "vragrl": {"name": "vragrl", "judge": RULE},
    "cave": {"name": "cave"},
    "unidoc": {"name": "unidoc", "judge": RULE},
}
FULL = {"lat": 4.0, "evisrag": 3.0, "lang2act.stage1": 1.0, "lang2act.stage2": 1.0}


def _reading(task: Task, tmp_path: Path) -> list[Sample]:
    return task_samples(task, DataConfig(path=str(tmp_path), size=3, seed=3, synthetic=("reading",)))


@pytest.mark.parametrize("name", sorted(SECTIONS))
def test_the_method_takes_reading_pages_and_its_oracle_fits_them(name: str, tmp_path: Path) -> None:
    task = build_task(SECTIONS[name])
    samples = _reading(task, tmp_path)
    assert len(samples) == 3 and all(len(s.pages) == 1 and s.answerable for s in samples)
    assert task.oracle is not None
    for sample in samples:
        conversation = task.oracle(sample)
        turns = [m.plain_text for m in conversation if m.role == "assistant"]
        assert f"<answer>{sample.answers[0]}" in turns[-1], turns[-1]
        if name in FULL:  # a single turn: the reward of the oracle's answer is the method's best
            assert task.reward(task.parse(turns[-1]), sample, None).total == pytest.approx(FULL[name])
        else:  # the agent's script: a tool call per turn, each answered by the environment
            observed = [m for m in conversation[2:] if m.role == "user"]
            assert len(turns) >= 2 and len(observed) == len(turns) - 1
            assert all(m.images for m in observed[-1:]), "the last observation shows the page or its crop"


@pytest.mark.parametrize("name", ["vragrl", "unidoc"])
def test_a_search_agent_finds_the_one_page_of_a_reading_sample(name: str, tmp_path: Path) -> None:
    task = build_task(SECTIONS[name])
    sample = _reading(task, tmp_path)[0]
    env = task.make_env(sample)
    env.reset(sample)
    step = env.step(f"<think>t</think><search>{sample.question}</search>")
    assert not step.done and step.info.retrieved[:1] == sample.gold_pages

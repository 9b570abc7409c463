"""Lang2Act stage 1 scores what its recipe, docs and docstrings say (Lang2Act Eq. 2, App. A.4)."""

from __future__ import annotations

from pathlib import Path

import pytest

from evidra.core.config import load_config
from evidra.core.errors import ConfigError
from evidra.core.types import Parsed, Sample
from evidra.methods import build_task
from evidra.rl.run_config import RLConfig

ROOT = Path(__file__).parents[3]
SAMPLE = Sample("s", "What is the total?", ("42",))
WELL_FORMED_RIGHT = "<think>t</think><description>the total row reads 42</description><answer>42</answer>"
UNFORMED_RIGHT = "<answer>42</answer>"
WELL_FORMED_WRONG = "<think>t</think><description>the total row</description><answer>17</answer>"


def _totals(method: dict[str, object]) -> list[float]:
    task = build_task(method)
    return [
        task.reward(Parsed(text=t), SAMPLE, None).total
        for t in (WELL_FORMED_RIGHT, UNFORMED_RIGHT, WELL_FORMED_WRONG)
    ]


def test_stage1_scores_the_answer_alone_by_default() -> None:
    """Eq. 2: max E[r_ans(tau, a)] with r_ans in {0, 1}; the format is logged, weight 0."""
    assert _totals(dict(name="lang2act", stage=1)) == pytest.approx([1.0, 1.0, 0.0])


def test_stage1_weights_apply() -> None:
    """A.4's alpha = 0.8, beta = 0.2 as the released stage-1 sum: 0.8 r_ans + 0.2 format."""
    got = _totals(dict(name="lang2act", stage=1, weights={"answer": 0.8, "format": 0.2}))
    assert got == pytest.approx([1.0, 0.8, 0.2])


def test_stage1_refuses_a_tool_weight_in_one_line() -> None:
    with pytest.raises(ConfigError, match=r"method\.weights") as err:
        build_task(dict(name="lang2act", stage=1, weights={"tool": 0.2}))
    assert "\n" not in str(err.value)


def test_stage2_is_eq12_with_a4s_weights() -> None:
    """Eq. 12 with alpha = 0.8, beta = 0.2 (A.4): R = 0.8 r_ans + 0.2 r_tool."""
    weights = build_task(dict(name="lang2act", stage=2)).reward.weights
    assert (weights["answer"], weights["tool"], weights["format"]) == (0.8, 0.2, 0.0)


def test_stage1_recipe_states_the_reward_it_trains() -> None:
    """The recipe's header names r_ans alone and the override; its reward is that one."""
    path = ROOT / "configs/lang2act_stage1.yaml"
    header = path.read_text().split("\nmethod:", 1)[0]
    assert "r_ans alone (Eq. 2" in header and "method.weights={answer: 0.8, format: 0.2}" in header
    cfg = load_config(RLConfig, path, ["model.path=x"])
    assert build_task(cfg.method).reward.weights == {"answer": 1.0, "format": 0.0}


def test_the_reward_table_states_stage1_as_eq2() -> None:
    """docs/rewards_vragrl_lang2act.md's Lang2Act table: paper mode r_ans alone (Eq. 2), the
    released 0.8 / 0.2 sum in the upstream column only."""
    table = (ROOT / "docs/rewards_vragrl_lang2act.md").read_text()
    row = next(line for line in table.splitlines() if line.startswith("| 1 (`actionrl`) |"))
    paper, upstream = (cell.strip() for cell in row.split("|")[2:4])
    assert "r_ans` alone (Eq. 2)" in paper and "0.8" not in paper
    assert "0.8 * r_ans + 0.2 * format" in upstream

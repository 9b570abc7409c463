"""The paper recipes' schedules and dynamic sampling say what the papers say (EVisRAG §3.2 and
Table 6, Lang2Act §4 and Tables 5-6, VRAG-RL Table 5, LAT's released script, CAVE App. D.1)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch

from evidra.core.config import load_config
from evidra.rl.algo.filtering import group_filter
from evidra.rl.run_config import RLConfig

ROOT = Path(__file__).parents[2]
RECIPES = ["lat", "evisrag", "evisrag_upstream", "lang2act_stage1", "lang2act_stage2", "vragrl", "cave"]
EPOCHS = re.compile(r"^  steps: *(\d+) *#.*?(\d+) epochs? = ", re.M)


def _cfg(name: str) -> RLConfig:
    return load_config(RLConfig, ROOT / "configs" / f"{name}.yaml", ["model.path=x"])


@pytest.mark.parametrize("name", [r for r in RECIPES if r != "evisrag_upstream"])
def test_recipe_steps_are_the_epochs_they_state(name: str) -> None:
    """``run.steps`` is the stated number of epochs over the recipe's own ``data.size``."""
    (stated,) = EPOCHS.findall((ROOT / "configs" / f"{name}.yaml").read_text().split("\nrun:", 1)[1])
    steps, epochs = int(stated[0]), int(stated[1])
    cfg = _cfg(name)
    assert cfg.run.steps == steps
    assert steps == math.ceil(epochs * cfg.data.size / cfg.run.batch_size), name


def test_the_paper_data_sizes() -> None:
    """EVisRAG A.2: 4,000; Lang2Act §4: ~11K, A.3: ~5,700; CAVE D.1: 5,000."""
    sizes = {name: _cfg(name).data.size for name in ("evisrag", "lang2act_stage1", "lang2act_stage2", "cave")}
    assert sizes == {"evisrag": 4000, "lang2act_stage1": 11000, "lang2act_stage2": 5700, "cave": 5000}


# a group with equal rewards inside the released band, one with signal, one all zero
GROUPS = torch.tensor([[2.0, 2.0, 2.0, 2.0], [0.5, 2.5, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]])


def test_evisrag_paper_recipe_drops_groups_without_signal() -> None:
    """§3.2 puts RS-GRPO's advantages "into DAPO", whose dynamic sampling drops the groups whose
    rewards are all equal; the released band (0.01, 6.9) belongs to the released reward scale."""
    paper, released = _cfg("evisrag").algo, _cfg("evisrag_upstream").algo
    assert paper.dynamic_sampling and paper.keep_mean_range == ()
    assert group_filter(paper.keep_mean_range)(GROUPS).tolist() == [False, True, False]
    assert released.keep_mean_range == (0.01, 6.9)
    assert group_filter(released.keep_mean_range)(GROUPS).tolist() == [True, True, False]


def test_lang2act_recipes_use_dapos_rule() -> None:
    for name in ("lang2act_stage1", "lang2act_stage2"):
        algo = _cfg(name).algo
        assert algo.dynamic_sampling and algo.keep_mean_range == (), name


def test_released_values_are_marked() -> None:
    """EVisRAG Eq. 11 leaves k_pos a symbol; VRAG-RL Eq. 12 fixes only alpha + beta + gamma = 1:
    the values evidra takes from the released code say so where they are set and documented."""
    evisrag = (ROOT / "src/evidra/methods/evisrag/reward.py").read_text()
    assert "the paper names no value; 3.0 is the released code's\nK_POS = 3.0" in evisrag
    assert "k_pos = 3 is the released code's value" in (ROOT / "docs/rewards.md").read_text()
    for path in ("src/evidra/methods/vragrl/reward.py", "docs/rewards_vragrl_lang2act.md"):
        text = " ".join((ROOT / path).read_text().split())
        assert "come from the released code, not the paper" in text or "are the released code's" in text, path
        assert "Qwen2.5-7B-Instruct" in text, path

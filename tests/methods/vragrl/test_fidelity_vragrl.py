"""VRAG-RL's gamma and KL follow one reading of "cold start" (VRAG-RL §2.3, Eq. 12; §3.1 and
Table 5), the other is one documented override, and every place says the same."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from evidra.core.config import load_config
from evidra.core.types import Parsed, Sample
from evidra.methods import build_task
from evidra.rl.run_config import RLConfig

ROOT = Path(__file__).parents[3]
RECIPE = ROOT / "configs/vragrl.yaml"
SAMPLE = Sample("s", "What is the total?", ("42",), gold_pages=("p1",))
NO_SEARCH_RIGHT = Parsed(text="<think>I know it.</think><answer>42</answer>")


def _other_reading() -> list[str]:
    """The override the recipe's header names for the other reading."""
    header = RECIPE.read_text().split("\nmethod:", 1)[0].replace("\n# ", " ")
    line = re.search(r"The other reading .*? is: (.*?) Search engine", header)
    assert line is not None, "the recipe's header names the other reading's override"
    return shlex.split(line.group(1))


def test_the_recipe_trains_rl_after_sft_with_gamma_0_and_kl_001() -> None:
    """§2.3: "we usually set gamma = 0 as the model can effectively learn the pattern after SFT";
    §3.1: "the coefficient for the KL loss is typically set to 0.01"."""
    cfg = load_config(RLConfig, RECIPE, ["model.path=x"])
    assert (cfg.algo.kl, cfg.algo.kl_coef) == ("loss", 0.01)
    weights = build_task(cfg.method).reward.weights
    assert weights == {"retrieval": 0.2, "answer": 0.8, "pattern": 0.0}
    assert sum(weights.values()) == pytest.approx(1.0)  # Eq. 12: alpha + beta + gamma = 1


def test_the_other_reading_is_one_override() -> None:
    """§2.3: "gamma = 0.1 when performing RL with cold start"; §3.1: "if we perform cold start, we
    set it [the KL coefficient] to 0": the released weights 0.2 / 0.7 / 0.1 and no KL."""
    cfg = load_config(RLConfig, RECIPE, ["model.path=x", *_other_reading()])
    assert cfg.algo.kl == "none"
    assert build_task(cfg.method).reward.weights == {"retrieval": 0.2, "answer": 0.7, "pattern": 0.1}


def test_the_methods_default_weights_are_the_released_ones() -> None:
    assert build_task(dict(name="vragrl")).reward.weights == {"retrieval": 0.2, "answer": 0.7, "pattern": 0.1}


def test_an_answer_without_search_earns_beta() -> None:
    """Eqs. 9-12: r_Ret = 0 and r_Pat = 0 without a search, so r = beta * r_Ans."""
    recipe = build_task(load_config(RLConfig, RECIPE, ["model.path=x"]).method)
    other = build_task(load_config(RLConfig, RECIPE, ["model.path=x", *_other_reading()]).method)
    got = [task.reward(NO_SEARCH_RIGHT, SAMPLE, None).total for task in (recipe, other)]
    assert got == pytest.approx([0.8, 0.7])


def test_the_docs_state_both_readings_and_the_reward_model() -> None:
    methods = (ROOT / "docs/methods.md").read_text()
    quotes = [
        "we usually set γ = 0",
        "when performing RL with cold start",
        "typically set to 0.01",
        "if we perform cold start",
        "trained based on cold start",
    ]
    for quote in quotes:
        assert quote in methods, quote
    agents = (ROOT / "docs/agents.md").read_text()
    assert "Qwen2.5-7B-Instruct" in agents and "KL 0.01)" not in agents
    assert "multi-expert trajectory sampling" not in agents.split("## Not done", 1)[1]


def test_the_docs_name_colpali_as_the_papers_retriever() -> None:
    """App. B: "The vision-based retriever is built upon ... ColPali"; ColQwen2 is the released
    engine's, and no page says the paper uses it."""
    agents = " ".join((ROOT / "docs/agents.md").read_text().split())
    assert "The paper's vision-based retriever is ColPali (App. B" in agents
    assert "The paper uses ColQwen2" not in agents and "ColQwen2 as in the paper" not in agents
    vragrl = (ROOT / "docs/methods.md").read_text().split("### VRAG-RL (`configs/vragrl.yaml`)")[1]
    assert "| both | retriever | ColPali (vision)" in vragrl.split("### CAVE")[0]
    assert "App. B: ColPali" in RECIPE.read_text()

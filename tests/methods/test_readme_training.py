"""The README's Python training snippet, run as written with every recipe (the tiny version, one
step): it trains the recipe's method, whose reward components name the logged metrics; a trainer
handed a method config without its task refuses instead of training a toy task."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from evidra.core.config import load_config
from evidra.core.errors import ConfigError
from evidra.rl.run_config import RLConfig, SFTConfig

ROOT = Path(__file__).resolve().parents[2]
RECIPES = sorted(p.stem for p in (ROOT / "configs" / "tiny").glob("*.yaml"))

# the reward components each paper recipe's method scores (its paper's equations; docs/methods.md);
# a recipe not listed here must log at least one component of its own
COMPONENTS: dict[str, set[str]] = {
    "lat": {"accuracy", "step", "ground", "format"},
    "evisrag": {"perception", "derivation", "format"},
    "evisrag_upstream": {"accuracy", "evidence", "format", "overlong", "isObserve", "isThink"},
    "lang2act_stage1": {"answer", "format"},
    "lang2act_stage2": {"answer", "tool"},
    "vragrl": {"retrieval", "answer", "pattern"},
    "cave": {"accuracy", "format"},
    "unidoc": {"answer", "retrieval", "select", "crop", "format"},
}


def _training_snippet() -> str:
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)
    (snippet,) = [b for b in blocks if ".train()" in b]
    return snippet


def test_the_paper_recipes_are_here() -> None:
    assert set(COMPONENTS) <= set(RECIPES)


@pytest.mark.parametrize("recipe", RECIPES)
def test_the_readme_snippet_trains_the_recipes_method(
    recipe: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the recipe path and the overrides list of the snippet change (tiny sizes)."""
    snippet = _training_snippet()
    tiny = [
        "run.steps=1",
        "run.batch_size=2",
        "run.micro_batch_size=2",
        "algo.mini_batch_size=1",
        "rollout.group_size=2",
        "rollout.max_new_tokens=8",
        "rollout.max_response_tokens=24",
        "data.size=2",
        f"data.path={tmp_path / 'data'}",
        "run.output_dir=run",
        "algo.dynamic_sampling=false",  # else a group of two equal rewards logs no reward at all
        "model.cold_start.steps=0",  # RL from the random model: the rewards' names are the point here
    ]
    snippet, n = re.subn(
        r'"configs/\w+\.yaml"', repr(str(ROOT / "configs" / "tiny" / f"{recipe}.yaml")), snippet
    )
    snippet, m = re.subn(r"\[\"model\.path=[^\]]*\]", repr(tiny), snippet)
    assert (n, m) == (1, 1), snippet
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {}
    exec(compile(snippet, "README.md", "exec"), namespace)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    logged = {k.removeprefix("reward/") for k in rows[0] if k.startswith("reward/")}
    own = COMPONENTS.get(recipe) or logged - {"mean", "std", "nonfinite"}
    assert own and own <= logged, (recipe, sorted(logged))
    assert "digits" not in logged  # the toy task's reward


def test_a_trainer_without_the_methods_task_refuses(tmp_path: Path) -> None:
    from evidra.rl.sft.finetune import SFTTrainer
    from evidra.rl.trainer import RLTrainer

    path = ROOT / "configs" / "tiny" / "lat.yaml"
    with pytest.raises(ConfigError, match=r"trains method 'lat'.*evidra\.methods\.rl_trainer\(cfg\)"):
        RLTrainer(load_config(RLConfig, path))
    with pytest.raises(ConfigError, match=r"trains method 'lat'.*evidra\.methods\.sft_trainer\(cfg\)"):
        SFTTrainer(load_config(SFTConfig, path))


def test_a_config_naming_an_unknown_method_is_an_error() -> None:
    from evidra.methods import rl_trainer

    cfg = load_config(RLConfig, ROOT / "configs" / "tiny" / "lat.yaml", ["method.name=lta"])
    with pytest.raises(
        ConfigError, match=r"unknown method 'lta' \(did you mean 'lat'\?\); .* --method-module"
    ):
        rl_trainer(cfg)

"""configs/tiny/: every recipe of configs/ with a tiny model and small sizes, the method unchanged,
and one of them trained from the command line as a user would."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
import yaml

from evidra.cli.main import main
from evidra.core.config import load_config
from evidra.methods import check_config
from evidra.rl.run_config import RLConfig, SFTConfig
from evidra.rl.validate import sft_stage

ROOT = Path(__file__).resolve().parents[2]
RECIPES = sorted(p.stem for p in (ROOT / "configs").glob("*.yaml"))
TINY = sorted(p.stem for p in (ROOT / "configs" / "tiny").glob("*.yaml"))


def test_every_recipe_has_a_tiny_version() -> None:
    assert TINY == RECIPES


# what a tiny recipe changes in its method: Lang2Act stage 1 scores as the released actionrl.py
# (a model that cannot read yet earns the format's part)
METHOD_CHANGES: dict[str, dict[str, object]] = {
    "lang2act_stage1": {"weights": {"answer": 0.8, "format": 0.2}}
}
TINY_LR = 5e-4  # a tiny model's RL learning rate (the papers' are for cold-started 7B models)


@pytest.mark.parametrize("recipe", TINY)
def test_tiny_recipe_loads_validates_and_keeps_the_method(recipe: str) -> None:
    tiny = load_config(RLConfig, ROOT / "configs" / "tiny" / f"{recipe}.yaml")
    full = load_config(RLConfig, ROOT / "configs" / f"{recipe}.yaml")
    check_config(tiny)
    assert tiny.model.path == "tiny:qwen2_5_vl" and tiny.run.output_dir == f"runs/tiny/{recipe}"
    assert tiny.run.steps <= 12 and tiny.data.size <= 16 and tiny.rollout.max_response_tokens <= 480
    # RL starts from a cold start on the learnable reading task, and trains on other reading pages
    cold = tiny.model.cold_start
    assert 0 < cold.steps <= 150 and cold.data.synthetic == tiny.data.synthetic == ("reading",)
    assert cold.data.seed != tiny.data.seed
    # the method is the recipe's: sizes, data and the learning rate differ
    assert dataclasses.replace(tiny.algo, mini_batch_size=full.algo.mini_batch_size) == full.algo
    assert (tiny.data.task, dataclasses.replace(tiny.optim, lr=full.optim.lr), tiny.reward) == (
        full.data.task,
        full.optim,
        full.reward,
    )
    assert tiny.method == {**full.method, **METHOD_CHANGES.get(recipe, {})} and tiny.optim.lr == TINY_LR
    assert (tiny.model.dtype, tiny.model.lora, tiny.rollout.max_turns, tiny.rollout.temperature) == (
        full.model.dtype,
        full.model.lora,
        full.rollout.max_turns,
        full.rollout.temperature,
    )
    if full.sft:
        sft = load_config(SFTConfig, ROOT / "configs" / "tiny" / f"{recipe}.yaml")
        assert sft == sft_stage(tiny) and sft.optim == sft_stage(full).optim
        assert sft.run.output_dir == f"runs/tiny/{recipe}_sft" and sft.run.batch_size == 2


def test_tiny_lat_trains_from_the_command_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`evidra train rl --config configs/tiny/lat.yaml`, as the README shows it, its cold start
    and its RL cut to 2 steps."""
    monkeypatch.chdir(tmp_path)  # the recipe's relative output folder lands here
    config = str(ROOT / "configs" / "tiny" / "lat.yaml")
    assert main(["-q", "train", "rl", "--config", config, "run.steps=2", "model.cold_start.steps=2"]) == 0
    rows = [json.loads(line) for line in (tmp_path / "runs/tiny/lat/metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2] and all(math.isfinite(r["loss"]) for r in rows)
    saved = (tmp_path / "runs/tiny/lat/config.yaml").read_text()
    assert "base:" not in saved  # the resolved config
    # RL trained from the cold start's cached folder (the base its checkpoints need), recorded so
    model = yaml.safe_load(saved)["model"]
    base = Path(model["path"])
    assert base.parent.name == "cold-start" and base.name.startswith("lat-")
    assert (base / "cold_start.json").is_file() and model["cold_start"]["steps"] == 2

"""Overrides reach the stage section of a recipe: ``sft.run.output_dir=...`` on `evidra train sft`
sets the SFT stage's folder (it was dropped, and the run wrote into the recipe's folder)."""

from __future__ import annotations

from pathlib import Path

import pytest

from evidra.cli.main import main
from evidra.core.config import load_config
from evidra.rl.run_config import RLConfig, SFTConfig
from evidra.rl.validate import sft_stage

ROOT = Path(__file__).resolve().parents[1]
TINY_LAT = ROOT / "configs" / "tiny" / "lat.yaml"


def test_stage_section_overrides_reach_the_stage(tmp_path: Path) -> None:
    mine = str(tmp_path / "mine")
    cfg = load_config(SFTConfig, TINY_LAT, [f"sft.run.output_dir={mine}", "sft.run.steps=3", "sft.epochs=2"])
    assert (cfg.run.output_dir, cfg.run.steps, cfg.epochs) == (mine, 3, 2)
    assert cfg.run.batch_size == 2  # the rest of the recipe's sft section still applies


def test_plain_overrides_win_over_stage_section_overrides(tmp_path: Path) -> None:
    cfg = load_config(SFTConfig, TINY_LAT, ["run.steps=5", "sft.run.steps=3", "sft.optim.lr=0.5"])
    assert cfg.run.steps == 5 and cfg.optim.lr == 0.5
    assert load_config(SFTConfig, TINY_LAT, ["run.steps=5"]).run.steps == 5  # over the recipe's sft.run.steps


def test_the_rl_stage_and_its_sft_view_agree(tmp_path: Path) -> None:
    """`train rl sft.run.output_dir=X` keeps X in the recipe's sft section, which the SFT stage
    of the same recipe reads as `train sft sft.run.output_dir=X` does."""
    over = [f"sft.run.output_dir={tmp_path}", "sft.run.steps=3"]
    rl = load_config(RLConfig, TINY_LAT, over)
    assert rl.run.output_dir == "runs/tiny/lat"  # the RL stage is not touched
    assert sft_stage(rl) == load_config(SFTConfig, TINY_LAT, over)


def test_a_stage_override_that_is_no_section_is_refused() -> None:
    from evidra.core.errors import ConfigError

    with pytest.raises(ConfigError, match="config section 'sft' must be a mapping"):
        load_config(SFTConfig, TINY_LAT, ["sft=5"])


@pytest.mark.slow
def test_train_sft_writes_into_the_folder_the_stage_override_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the recipe's own relative folder would land here
    mine = tmp_path / "mine"
    argv = ["-q", "train", "sft", "--config", str(TINY_LAT), f"sft.run.output_dir={mine}", "sft.run.steps=1"]
    assert main(argv) == 0
    assert (mine / "metrics.jsonl").is_file() and (mine / "checkpoints" / "step-000001").is_dir()
    assert not (tmp_path / "runs").exists()  # not the recipe's runs/tiny/lat_sft

"""Every recipe in configs/ runs both stages from the command line on the tiny model, exports,
and the exported model answers in ``evidra eval``: SFT (the recipe's ``sft`` section) ->
``--export`` -> RL starting from that export -> ``--export`` -> eval. Only sizes are overridden;
dtypes, schedules, losses and the rest are the recipe's own (bf16 recipes run bf16 on CPU)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from evidra.cli.main import main
from evidra.core.config import load_config
from evidra.methods import check_config, resolve
from evidra.rl.run_config import RLConfig, SFTConfig
from evidra.rl.validate import sft_stage

ROOT = Path(__file__).resolve().parents[2]
RECIPES = sorted(p.stem for p in (ROOT / "configs").glob("*.yaml"))
# the paradigm the exported model is evaluated in, where it is not its method's own: the agents
# answer directly on the single-turn synthetic documents
PARADIGM = {"lang2act_stage1": "toolchain.stage1", "vragrl": "direct", "cave": "direct", "unidoc": "direct"}


def _small(tmp: Path, name: str) -> list[str]:
    return [
        "model.path=tiny:qwen2_5_vl",
        "model.min_pixels=3136",
        "model.max_pixels=50176",
        "run.steps=2",
        "run.batch_size=2",
        "run.micro_batch_size=2",
        "algo.mini_batch_size=1",
        "rollout.group_size=2",
        "rollout.max_new_tokens=6",
        "rollout.max_response_tokens=24",
        "data.size=2",
        f"data.path={tmp / 'data'}",
        f"run.output_dir={tmp / name}",
    ]


def _paradigm(recipe: str) -> str:
    if recipe in PARADIGM:
        return PARADIGM[recipe]
    resolved = resolve(load_config(RLConfig, ROOT / "configs" / f"{recipe}.yaml", ["model.path=x"]))
    assert resolved is not None
    return str(resolved.method.paradigm)


@pytest.mark.parametrize("recipe", RECIPES)
def test_recipe_loads_for_both_stages(recipe: str, tmp_path: Path) -> None:
    path = ROOT / "configs" / f"{recipe}.yaml"
    rl = load_config(RLConfig, path, ["model.path=x"])
    check_config(rl)
    sft = load_config(SFTConfig, path, ["model.path=x"])
    assert sft == sft_stage(rl)  # the SFT stage is the recipe with its sft section merged in
    for key, value in rl.sft.get("optim", {}).items():
        assert getattr(sft.optim, key) == pytest.approx(value) if isinstance(value, float) else True


@pytest.mark.slow
@pytest.mark.parametrize("recipe", RECIPES)
def test_recipe_sft_then_rl_then_export_then_eval(recipe: str, tmp_path: Path) -> None:
    config = str(ROOT / "configs" / f"{recipe}.yaml")
    sft_model, rl_model = tmp_path / "sft-model", tmp_path / "rl-model"
    assert (
        main(["-q", "train", "sft", "--config", config, *_small(tmp_path, "sft"), "--export", str(sft_model)])
        == 0
    )
    rl_over = [*_small(tmp_path, "rl"), f"model.path={sft_model}"]
    assert main(["-q", "train", "rl", "--config", config, *rl_over, "--export", str(rl_model)]) == 0
    for run in ("sft", "rl"):
        rows = [json.loads(line) for line in (tmp_path / run / "metrics.jsonl").read_text().splitlines()]
        assert len(rows) == 2 and all(math.isfinite(r.get("loss", 0.0)) for r in rows)
    out = tmp_path / "eval"
    argv = [
        "-q",
        "eval",
        "--synthetic",
        "documents",
        "--n",
        "1",
        "--paradigm",
        _paradigm(recipe),
        "--model",
        str(rl_model),
        "--max-new-tokens",
        "8",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    results = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    (row,) = results  # one benchmark x one paradigm, answered by the exported RL model
    assert row["model"] == "rl-model" and row["n"] == 1 and row["metrics"]["tokens"] > 0, row

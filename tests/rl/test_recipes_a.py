"""Every LAT / EVisRAG / Lang2Act recipe trains for 2 steps on the tiny model from its YAML.

The tiny policy writes random text, so rewards are mostly equal within a group: DAPO's dynamic
sampling would filter every group and skip the update; it is switched off here so that the
update runs (dynamic sampling itself is tested in tests/rl/test_filtering.py).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from evidra.core.config import load_config
from evidra.methods import build_task, rl_trainer, task_for
from evidra.rl.run_config import RLConfig

ROOT = Path(__file__).resolve().parents[2]

RECIPES = {  # recipe -> (task, reward components the paper names, rl advantage)
    "lat": ("lat", {"accuracy", "step", "ground", "format"}, "grpo"),
    "evisrag": ("evisrag", {"perception", "derivation", "format"}, "rs_grpo"),
    "lang2act_stage1": ("lang2act.stage1", {"answer", "format"}, "grpo"),
    "lang2act_stage2": ("lang2act.stage2", {"answer", "format", "tool"}, "grpo"),
}


def _small(tmp: Path, name: str) -> list[str]:
    return [
        "model.path=tiny:qwen2_5_vl",
        "model.dtype=float32",
        "model.min_pixels=3136",
        "model.max_pixels=50176",
        "run.steps=2",
        "run.batch_size=1",
        "run.micro_batch_size=2",
        "rollout.group_size=2",
        "rollout.max_new_tokens=6",
        "rollout.max_response_tokens=6",
        "algo.dynamic_sampling=false",
        "algo.mini_batch_size=0",
        "data.size=2",
        f"data.path={tmp / 'synth'}",
        f"run.output_dir={tmp / name}",
    ]


@pytest.mark.slow
@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_recipe_trains_two_steps(recipe: str, tmp_path: Path) -> None:
    task, components, advantage = RECIPES[recipe]
    cfg = load_config(RLConfig, ROOT / "configs" / f"{recipe}.yaml", _small(tmp_path, recipe))
    assert task_for(cfg).name == task and cfg.algo.advantage == advantage
    metrics = rl_trainer(cfg).train()
    assert len(metrics) == 2
    for row in metrics:
        assert math.isfinite(row["loss"])
        assert {f"reward/{c}" for c in components} <= set(row)


def test_recipe_yaml_hyperparameters_follow_the_papers() -> None:
    lat = load_config(RLConfig, ROOT / "configs" / "lat.yaml", [])
    assert (lat.rollout.group_size, lat.rollout.temperature, lat.algo.kl_coef, lat.optim.lr) == (
        6,
        0.9,
        0.04,
        5e-5,
    )
    assert (lat.model.lora.r, lat.model.lora.alpha) == (64, 64)
    ev = load_config(RLConfig, ROOT / "configs" / "evisrag.yaml", [])
    assert (ev.algo.advantage, ev.algo.clip_high, ev.algo.kl, ev.algo.dynamic_sampling) == (
        "rs_grpo",
        0.28,
        "none",
        True,
    )
    assert (ev.rollout.temperature, ev.optim.lr, ev.model.max_pixels) == (1.2, 1e-6, 1568000)
    s1 = load_config(RLConfig, ROOT / "configs" / "lang2act_stage1.yaml", [])
    s2 = load_config(RLConfig, ROOT / "configs" / "lang2act_stage2.yaml", [])
    assert (s1.rollout.group_size, s1.algo.kl_coef, s2.rollout.group_size, s2.algo.kl) == (8, 0.01, 8, "none")
    assert (s1.run.batch_size, s1.algo.mini_batch_size, s2.run.batch_size, s2.algo.mini_batch_size) == (
        48,
        8,
        128,
        64,
    )
    assert s1.model.max_pixels == s2.model.max_pixels == 401408


METHOD_SECTIONS: dict[str, dict[str, object]] = {
    "lat": {"name": "lat"},
    "evisrag": {"name": "evisrag"},
    "lang2act.stage1": {"name": "lang2act", "stage": 1},
    "lang2act.stage2": {"name": "lang2act", "stage": 2},
}


@pytest.mark.parametrize("task", ["lat", "evisrag", "lang2act.stage1", "lang2act.stage2"])
def test_oracle_conversation_earns_the_full_reward(task: str, tmp_path: Path) -> None:
    """The SFT cold-start answer built from the gold evidence scores the maximum."""
    from evidra.rl.run_config import DataConfig

    t = build_task(METHOD_SECTIONS[task])
    samples = t.samples(DataConfig(size=6, path=str(tmp_path)))
    assert any(not s.answerable for s in samples) and any(s.answerable for s in samples)
    best = {"lat": 4.0, "evisrag": 3.0, "lang2act.stage1": 1.0, "lang2act.stage2": 1.0}[task]
    assert t.oracle is not None
    for sample in samples:
        text = t.oracle(sample)[-1].plain_text
        result = t.reward(t.parse(text), sample, None)
        assert result.total == pytest.approx(best), (sample.question, text, dict(result.components))


@pytest.mark.slow
def test_evisrag_upstream_variant_trains_on_the_six_released_scopes(tmp_path: Path) -> None:
    over = [*_small(tmp_path, "up"), "method.reward_mode=upstream", "run.steps=1"]
    cfg = load_config(RLConfig, ROOT / "configs" / "evisrag.yaml", over)
    (row,) = rl_trainer(cfg).train()
    assert math.isfinite(row["loss"])
    assert {
        f"reward/{c}" for c in ("accuracy", "evidence", "format", "overlong", "isObserve", "isThink")
    } <= set(row)


@pytest.mark.slow
@pytest.mark.parametrize("task", ["lat", "evisrag", "lang2act.stage2"])
def test_oracle_conversations_cold_start_sft(task: str, tmp_path: Path) -> None:
    from evidra.methods import sft_trainer
    from evidra.rl.run_config import SFTConfig

    over = [
        "model.path=tiny:qwen2_5_vl",
        "model.max_pixels=50176",
        "model.min_pixels=3136",
        *(f"method.{key}={value}" for key, value in METHOD_SECTIONS[task].items()),
        "data.size=2",
        f"data.path={tmp_path / 'synth'}",
        "run.steps=2",
        "run.batch_size=2",
        "run.micro_batch_size=2",
        f"run.output_dir={tmp_path / 'sft'}",
    ]
    metrics = sft_trainer(load_config(SFTConfig, None, over)).train()
    assert len(metrics) == 2 and all(math.isfinite(m["loss"]) for m in metrics)


@pytest.mark.slow
def test_lat_colqwen2_loads_the_retriever_from_its_checkpoint(
    tiny_dirs: dict[str, Path], tmp_path: Path
) -> None:
    from evidra.core.errors import ConfigError
    from evidra.methods import build_task
    from evidra.rl.run_config import DataConfig

    with pytest.raises(ConfigError, match=r"needs method\.similarity_checkpoint"):
        build_task(dict(name="lat", similarity="colqwen2"))  # no checkpoint named
    checkpoint = str(tiny_dirs["colqwen2"])
    task = build_task(dict(name="lat", similarity="colqwen2", similarity_checkpoint=checkpoint))
    sample = next(s for s in task.samples(DataConfig(size=4, path=str(tmp_path))) if s.answerable)
    assert task.oracle is not None
    parsed = task.parse(task.oracle(sample)[-1].plain_text)
    result = task.reward(parsed, sample, None)
    # accuracy, ground and format do not depend on the retriever; the random tiny ColQwen2 decides step
    assert (result.components["accuracy"], result.components["ground"], result.components["format"]) == (
        1,
        1,
        1,
    )
    assert result.components["step"] in (0.0, 0.5, 1.0)


def test_lang2act_task_with_a_toolbox_file(tmp_path: Path) -> None:
    from evidra.methods.lang2act.method import make_lang2act_task
    from evidra.methods.lang2act.paradigm import Tool, load_toolbox, save_toolbox
    from evidra.rl.run_config import DataConfig

    save_toolbox([Tool("count_rows", "Image k: table", "Count rows.")], tmp_path / "box.json")
    task = make_lang2act_task("lang2act.custom", 2, load_toolbox(tmp_path / "box.json"))
    sample = next(s for s in task.samples(DataConfig(size=4, path=str(tmp_path))) if s.answerable)
    (system, _user) = task.make_env(sample).reset(sample)
    assert '<tool name="count_rows" args="Image k: table"> Count rows. </tool>' in system.plain_text
    answer = sample.answers[0]
    good = (
        '<think>Image 1.</think><description><tool name="count_rows" args="Image 1: t">3</tool>'
        f"</description><answer>{answer}</answer>"
    )
    off_box = good.replace("count_rows", "read_text_element")  # in the paper's box, not in this one
    assert task.reward(task.parse(good), sample, None).components["tool"] == 1.0
    assert task.reward(task.parse(off_box), sample, None).components["tool"] == 0.0

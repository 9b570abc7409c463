from __future__ import annotations

from pathlib import Path

import pytest

from evidra.core.config import apply_overrides, dump_config, load_config
from evidra.core.errors import ConfigError
from evidra.rl.run_config import RLConfig


def test_yaml_plus_dotted_overrides(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "rollout:\n  group_size: 8\noptim:\n  lr: 1e-6\n  betas: [0.9, 0.95]\nalgo:\n  clip_high: 0.28\n"
    )
    cfg = load_config(RLConfig, path, ["rollout.temperature=0.7", "algo.kl=reward", "model.lora.r=16"])
    assert cfg.rollout.group_size == 8 and cfg.rollout.temperature == 0.7
    assert cfg.optim.lr == 1e-6 and cfg.optim.betas == (0.9, 0.95)  # "1e-6" is a string in YAML 1.1
    assert cfg.algo.kl == "reward" and cfg.algo.clip_high == 0.28 and cfg.model.lora.r == 16
    again = load_config(RLConfig, dump_config(cfg, tmp_path / "resolved.yaml"))
    assert again == cfg


def test_config_errors_name_the_key_and_fix(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"unknown config key 'rollout.group_sise'; did you mean 'group_size'"
    ):
        load_config(RLConfig, None, ["rollout.group_sise=4"])
    with pytest.raises(ConfigError, match=r"rollout\.group_size must be int"):
        load_config(RLConfig, None, ["rollout.group_size=four"])
    with pytest.raises(ConfigError, match=r"algo\.kl must be one of"):
        load_config(RLConfig, None, ["algo.kl=off"])  # YAML reads off as false: rejected, not guessed
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(RLConfig, tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match=r"section\.key=value"):
        apply_overrides({}, ["no-equals-sign"])
    bad = tmp_path / "list.yaml"
    bad.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="mapping at the top level"):
        load_config(RLConfig, bad)


def test_a_file_starts_from_its_base(tmp_path: Path) -> None:
    (tmp_path / "full.yaml").write_text(
        "model: {path: big, dtype: bfloat16}\nrollout: {group_size: 8, temperature: 0.9}\nsft: {epochs: 3}\n"
    )
    (tmp_path / "small").mkdir()
    (tmp_path / "small" / "s.yaml").write_text(
        "base: ../full.yaml\nrollout: {group_size: 2}\nsft: {run: {steps: 1}}\n"
    )
    cfg = load_config(RLConfig, tmp_path / "small" / "s.yaml", ["model.path=tiny:qwen2"])
    assert (cfg.model.path, cfg.model.dtype) == ("tiny:qwen2", "bfloat16")  # override > file > base
    assert (cfg.rollout.group_size, cfg.rollout.temperature) == (2, 0.9)  # merged section by section
    assert cfg.sft == {"epochs": 3, "run": {"steps": 1}}


def test_base_errors_name_the_file(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("base: b.yaml\n")
    (tmp_path / "b.yaml").write_text("base: a.yaml\n")
    (tmp_path / "c.yaml").write_text("base: gone.yaml\n")
    (tmp_path / "d.yaml").write_text("base: [x]\n")
    with pytest.raises(ConfigError, match=r"names itself as a base .*break the cycle"):
        load_config(RLConfig, tmp_path / "a.yaml")
    with pytest.raises(ConfigError, match=r"gone\.yaml' \(base of .*c\.yaml\) does not exist"):
        load_config(RLConfig, tmp_path / "c.yaml")
    with pytest.raises(ConfigError, match=r"base: in .*d\.yaml' must name a config file, got \['x'\]"):
        load_config(RLConfig, tmp_path / "d.yaml")


_BOMB = "\n".join(
    [
        "data:",
        "  task: toy.length",
        "  options:",
        '    l0: &l0 ["x","x","x","x","x","x","x","x","x"]',
        *(f"    l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 10)),
    ]
)  # 9**10 strings once expanded: the run that read it held memory until it was killed


def test_a_yaml_alias_bomb_is_refused_in_one_line(tmp_path: Path) -> None:
    import time

    recipe = tmp_path / "bomb.yaml"
    recipe.write_text(_BOMB)
    start = time.monotonic()
    with pytest.raises(
        ConfigError, match=r"bomb\.yaml.* uses a YAML alias \*l0 at line 5; evidra reads no YAML aliases"
    ) as err:
        load_config(RLConfig, recipe)
    assert time.monotonic() - start < 5 and "\n" not in str(err.value)
    with pytest.raises(ConfigError, match=r"override 'data\.options=.*alias \*a"):
        apply_overrides({}, ["data.options={a: &a [1, 2], b: [*a, *a]}"])


def test_an_anchor_without_alias_and_malformed_yaml_read_in_one_line(tmp_path: Path) -> None:
    recipe = tmp_path / "anchor.yaml"
    recipe.write_text("run: &r {steps: 3}\n")
    assert load_config(RLConfig, recipe).run.steps == 3  # an anchor alone repeats nothing
    recipe.write_text("run: {steps: [3\n")
    with pytest.raises(ConfigError, match="is not valid YAML") as err:
        load_config(RLConfig, recipe)
    assert "\n" not in str(err.value)

"""``run.report_to``: where scalars go, the retired switches refused, a missing library named
(with its extra) while the config is checked, before any model loads."""

from __future__ import annotations

import re
import shlex
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from evidra.cli.main import main
from evidra.core.config import load_config
from evidra.core.errors import ConfigError, MissingDependencyError
from evidra.rl.run_config import RLConfig, SFTConfig
from evidra.rl.sft.finetune import SFTTrainer
from evidra.rl.trainer import RLTrainer

TINY = [
    "model.path=tiny:qwen2_5_vl",
    "run.steps=1",
    "run.batch_size=2",
    "rollout.group_size=2",
    "rollout.max_new_tokens=4",
    "data.size=4",
]


@pytest.fixture
def no_model_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loading a policy fails the test: whatever is checked must be checked before."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a model loaded before the config was checked")

    for module in ("evidra.rl.trainer", "evidra.rl.sft.finetune", "evidra.rl.policy"):
        monkeypatch.setattr(f"{module}.load_policy", refuse)
    monkeypatch.setattr("evidra.models.loading.load_vlm", refuse)


def test_the_retired_switch_is_refused_with_its_successor() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(RLConfig, None, ["run.tensorboard=true"])
    assert str(info.value) == (
        "config key 'run.tensorboard' was replaced; did you mean run.report_to=[jsonl, tensorboard]?"
    )
    with pytest.raises(ConfigError, match=r"'run\.tensorboard' was replaced; did you mean run\.report_to="):
        load_config(SFTConfig, None, ["sft.run.tensorboard=true"])  # the SFT stage merged first
    cfg = load_config(RLConfig, None, ["run.report_to=[jsonl, wandb]", "run.wandb_project=vdrag"])
    assert cfg.run.report_to == ("jsonl", "wandb") and cfg.run.wandb_project == "vdrag"


@pytest.mark.parametrize("library", ["wandb", "torch.utils.tensorboard"])
def test_a_missing_library_fails_before_any_model_loads(
    library: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_model_loads: None
) -> None:
    monkeypatch.setitem(sys.modules, library, None)  # not installed
    name = library.rpartition(".")[2]
    extra = [*TINY, f"run.output_dir={tmp_path}", f"run.report_to=[jsonl, {name}]"]
    with pytest.raises(MissingDependencyError, match=rf"pip install 'evidra\[{name}\]'"):
        RLTrainer(load_config(RLConfig, None, extra))
    with pytest.raises(MissingDependencyError, match=rf"pip install 'evidra\[{name}\]'"):
        SFTTrainer(load_config(SFTConfig, None, extra))
    assert not (tmp_path / "models").exists()  # not even the tiny model was built


def test_the_cli_says_it_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], no_model_loads: None
) -> None:
    monkeypatch.setitem(sys.modules, "wandb", None)
    for mode in ("rl", "sft"):
        code = main(["train", mode, *TINY, f"run.output_dir={tmp_path}", "run.report_to=[wandb]"])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1, err
        assert (
            err.startswith(f"evidra train {mode}: error: run.report_to names wandb")
            and "evidra[wandb]" in err
        )


def test_a_wandb_project_without_wandb_is_refused(no_model_loads: None) -> None:
    cfg = load_config(RLConfig, None, [*TINY, "run.wandb_project=vdrag"])
    with pytest.raises(ConfigError, match=r"run.wandb_project='vdrag' .* add wandb to run.report_to"):
        RLTrainer(cfg)
    with pytest.raises(ConfigError, match=r"unknown report_to destination 'tensorbaord'; did you mean"):
        RLTrainer(load_config(RLConfig, None, [*TINY, "run.report_to=[tensorbaord]"]))


def test_an_sft_run_reports_each_step_to_tensorboard(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    logged: list[Any] = []

    class SummaryWriter:
        def __init__(self, log_dir: str) -> None:
            logged.append(Path(log_dir))

        def add_scalar(self, key: str, value: float, step: int) -> None:
            logged.append((step, key))

        def close(self) -> None:
            logged.append("closed")

    module = types.ModuleType("torch.utils.tensorboard")
    module.SummaryWriter = SummaryWriter  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", module)
    extra = [f"run.output_dir={tmp_path}", "data.task=toy.key_value", "run.report_to=[jsonl, tensorboard]"]
    cfg = load_config(SFTConfig, None, [*TINY, *extra])
    SFTTrainer(cfg).train()
    assert logged[0] == tmp_path / "tensorboard" and logged[-1] == "closed"
    assert (1, "loss") in logged
    assert (tmp_path / "metrics.jsonl").read_text().count("\n") == 1  # the JSONL file as always


def test_the_documented_command_reports_to_tensorboard(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/training.md's report_to command, as written, cut to one step in a folder of the test."""
    root = Path(__file__).resolve().parents[2]
    blocks = re.findall(r"```bash\n(.*?)```", (root / "docs" / "training.md").read_text(), flags=re.S)
    (command,) = [line for block in blocks for line in block.splitlines() if "run.report_to=" in line]
    argv = shlex.split(command)
    assert argv[:3] == ["evidra", "train", "rl"]
    scalars: list[str] = []
    module = types.ModuleType("torch.utils.tensorboard")
    module.SummaryWriter = lambda log_dir: types.SimpleNamespace(  # type: ignore[attr-defined]
        add_scalar=lambda key, value, step: scalars.append(key), close=lambda: None
    )
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", module)
    monkeypatch.chdir(root)
    assert main(["-q", *argv[1:], "run.steps=1", f"run.output_dir={tmp_path}", "rollout.group_size=2"]) == 0
    assert "loss" in scalars and "reward/mean" in scalars
    assert capsys.readouterr().out == f"metrics: {tmp_path / 'metrics.jsonl'}\n"

"""A run folder holds one run: a start with another base model, method, shapes or config is refused
in one line before anything loads, and the run's config.yaml and run.json are never rewritten."""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from evidra.cli.main import main
from evidra.core.config import load_config
from evidra.core.errors import ConfigError
from evidra.retrieval.lifecycle.fingerprint import fingerprint, short
from evidra.rl.run_config import RLConfig, SFTConfig
from evidra.rl.runs.checkpoint import list_checkpoints
from evidra.rl.runs.folder import (
    MAX_RECORD_BYTES,
    RUN_RECORD,
    RunFolder,
    config_changes,
    read_record,
)
from evidra.rl.sft.finetune import SFTTrainer
from evidra.rl.trainer import RLTrainer

SMALL = [
    "run.batch_size=2",
    "rollout.group_size=2",
    "rollout.max_new_tokens=4",
    "data.size=4",
    "data.task=toy.length",
    "algo.kl=none",
    "run.steps=1",
]


def _cfg(base: Path | str, out: Path, *extra: str) -> RLConfig:
    return load_config(RLConfig, None, [f"model.path={base}", f"run.output_dir={out}", *SMALL, *extra])


def _files(out: Path) -> dict[str, bytes]:
    """Every file of run folder ``out`` (config.yaml, run.json, metrics, checkpoints), by name."""
    files = {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert "config.yaml" in files and RUN_RECORD in files
    return files


@pytest.fixture
def bases(tiny_dirs: dict[str, Path], tmp_path: Path) -> dict[str, Path]:
    """Two local base models: A (Qwen2.5-VL) and B (Qwen2-VL), copies this test may change."""
    out = {}
    for name, arch in (("A", "qwen2_5_vl"), ("B", "qwen2_vl")):
        out[name] = tmp_path / f"base-{name}"
        shutil.copytree(tiny_dirs[arch], out[name])
    return out


@pytest.fixture
def trained(bases: dict[str, Path], tmp_path: Path) -> Path:
    """A run folder of one step (one checkpoint) trained from base A."""
    out = tmp_path / "run"
    RLTrainer(_cfg(bases["A"], out)).train()
    assert len(list_checkpoints(out)) == 1 and (out / RUN_RECORD).is_file()
    return out


def _no_model_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make loading a policy fail loudly: a refusal must come before it."""

    def load(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the policy loaded before the run folder was checked")

    monkeypatch.setattr("evidra.rl.trainer.load_policy", load)
    monkeypatch.setattr("evidra.rl.sft.finetune.load_policy", load)


def test_a_run_started_on_another_base_is_refused_naming_both(
    trained: Path, bases: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    before = _files(trained)
    _no_model_loads(monkeypatch)
    with pytest.raises(ConfigError) as err:
        RLTrainer(_cfg(bases["B"], trained, "run.steps=2"))
    message = str(err.value)
    assert "\n" not in message and str(bases["A"]) in message and str(bases["B"]) in message
    assert short(fingerprint(bases["A"])) in message and short(fingerprint(bases["B"])) in message
    assert "new run.output_dir" in message
    assert _files(trained) == before, "the run's config.yaml and run.json must stay byte for byte"


def test_a_tiny_base_of_another_architecture_is_refused_through_the_cli(
    trained: Path,
    bases: dict[str, Path],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before = _files(trained)
    _no_model_loads(monkeypatch)
    assert main(["train", "rl", "model.path=tiny:qwen2_vl", f"run.output_dir={trained}", *SMALL]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert repr(str(bases["A"])) in err and "'tiny:qwen2_vl'" in err, err
    assert _files(trained) == before


def test_a_base_changed_in_place_is_refused_by_its_fingerprint(trained: Path, bases: dict[str, Path]) -> None:
    weights = bases["A"] / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-8:] = bytes(8)  # the same names and shapes, other values at the end of the file
    weights.write_bytes(bytes(data))
    before = _files(trained)
    with pytest.raises(ConfigError, match="fingerprint") as err:
        RLTrainer(_cfg(bases["A"], trained, "run.steps=2"))
    assert "\n" not in str(err.value) and _files(trained) == before


def test_the_same_base_moved_to_another_folder_resumes(trained: Path, bases: dict[str, Path]) -> None:
    moved = bases["A"].with_name("moved")
    bases["A"].rename(moved)
    trainer = RLTrainer(_cfg(moved, trained, "run.steps=2"))
    assert trainer.state.step == 1


def test_another_method_or_kind_of_training_is_refused(
    trained: Path, bases: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    before = _files(trained)
    _no_model_loads(monkeypatch)
    with pytest.raises(ConfigError, match=r"trained method 'toy\.length', not 'toy\.digits'") as err:
        RLTrainer(_cfg(bases["A"], trained, "data.task=toy.digits"))
    assert "\n" not in str(err.value)
    sft = load_config(
        SFTConfig,
        None,
        [f"model.path={bases['A']}", f"run.output_dir={trained}", "data.task=toy.key_value", "run.steps=1"],
    )
    with pytest.raises(ConfigError, match="holds a `train rl` run, not `train sft`"):
        SFTTrainer(sft)
    assert _files(trained) == before


def test_an_sft_run_is_checked_the_same_way(bases: dict[str, Path], tmp_path: Path) -> None:
    def sft(base: Path, *extra: str) -> SFTConfig:
        over = [
            f"model.path={base}",
            f"run.output_dir={tmp_path / 'sft'}",
            "data.task=toy.key_value",
            "data.size=4",
            "run.batch_size=2",
            "run.steps=1",
            *extra,
        ]
        return load_config(SFTConfig, None, over)

    SFTTrainer(sft(bases["A"])).train()
    before = _files(tmp_path / "sft")
    with pytest.raises(ConfigError, match="fingerprint") as err:
        SFTTrainer(sft(bases["B"], "run.steps=2"))
    assert "\n" not in str(err.value) and _files(tmp_path / "sft") == before
    assert SFTTrainer(sft(bases["A"], "run.steps=2")).state.step == 1


def test_trained_tensors_of_other_shapes_are_refused_before_the_checkpoint_loads(
    trained: Path, bases: dict[str, Path]
) -> None:
    (trained / "config.yaml").unlink()  # the config lost: the record alone still tells the shapes
    record = (trained / RUN_RECORD).read_bytes()
    with pytest.raises(ConfigError, match=r"with shape \[8, \d+\], this model's is \[4, \d+\]") as err:
        RLTrainer(_cfg(bases["A"], trained, "model.lora.r=4"))
    assert "\n" not in str(err.value) and (trained / RUN_RECORD).read_bytes() == record


def test_another_config_is_refused_naming_its_first_differing_key(
    trained: Path, bases: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    before = _files(trained)
    _no_model_loads(monkeypatch)
    with pytest.raises(ConfigError, match=r"started with optim\.lr=1e-05 \(its config\.yaml\), not 0\.5"):
        RLTrainer(_cfg(bases["A"], trained, "optim.lr=0.5"))
    with pytest.raises(ConfigError, match=r"started with data\.size=4 .*, not 8: .*resume with data\.size=4"):
        RLTrainer(_cfg(bases["A"], trained, "optim.lr=0.5", "data.size=8"))  # the first in the config's order
    assert _files(trained) == before


def test_a_legitimate_resume_continues_and_keeps_the_recorded_files(
    trained: Path, bases: dict[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    recorded = ("config.yaml", RUN_RECORD)
    before = {name: (trained / name).read_bytes() for name in recorded}
    with caplog.at_level(logging.INFO, logger="evidra.rl.runs.folder"):
        trainer = RLTrainer(_cfg(bases["A"], trained, "run.steps=2", "run.keep_checkpoints=3"))
    assert trainer.state.step == 1 and "run.steps=2 (was 1)" in caplog.text
    trainer.train()
    assert [p.name for p in list_checkpoints(trained)] == ["step-000001", "step-000002"]
    assert {name: (trained / name).read_bytes() for name in recorded} == before
    newest = (list_checkpoints(trained)[-1] / "config.yaml").read_text()
    assert "steps: 2" in newest  # each checkpoint records the values it was saved with


def test_a_folder_without_a_record_resumes_with_a_warning_and_is_recorded(
    trained: Path, bases: dict[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    record = (trained / RUN_RECORD).read_text()
    (trained / RUN_RECORD).unlink()  # a run folder of an evidra before the record
    with pytest.raises(ConfigError, match="trained from base model"):  # its config.yaml still names the base
        RLTrainer(_cfg(bases["B"], trained))
    with caplog.at_level(logging.WARNING):
        trainer = RLTrainer(_cfg(bases["A"], trained, "run.steps=2"))
    assert trainer.state.step == 1 and "has no run.json" in caplog.text
    assert json.loads((trained / RUN_RECORD).read_text()) == json.loads(record)


def _record(**fields: Any) -> bytes:
    base = {"format": 1, "kind": "rl", "method": "x", "base": "b", "base_fingerprint": "", "trainable": []}
    return json.dumps({**base, **fields}).encode()


@pytest.mark.parametrize(
    "content",
    [
        b"\xff\xfe not text",
        b"[1, 2, 3]",
        b"[" * 100_000,
        _record(base_fingerprint="md5:0"),
        _record(trainable=[["w", [-1]]]),
        _record(format=2),
        b" " * (MAX_RECORD_BYTES + 1),
    ],
    ids=["binary", "not-an-object", "deep", "fingerprint", "shape", "format", "huge"],
)
def test_a_hostile_record_is_refused_in_one_line(tmp_path: Path, content: bytes) -> None:
    (tmp_path / RUN_RECORD).write_bytes(content)
    with pytest.raises(ConfigError) as err:
        RunFolder.open(_cfg("tiny:qwen2_5_vl", tmp_path), "rl")
    message = str(err.value)
    assert "\n" not in message and RUN_RECORD in message and len(message) < 400, message


def test_a_record_that_is_a_device_or_a_bomb_config_is_refused_unread(tmp_path: Path) -> None:
    os.symlink("/dev/zero", tmp_path / RUN_RECORD)
    with pytest.raises(ConfigError, match="is not a regular file"):
        read_record(tmp_path)
    (tmp_path / RUN_RECORD).unlink()
    bomb = "a: &a [x, x]\nb: &b [*a, *a]\nc: [*b, *b]\n"
    (tmp_path / "config.yaml").write_text(bomb)
    with pytest.raises(ConfigError, match="YAML alias"):
        RunFolder.open(_cfg("tiny:qwen2_5_vl", tmp_path), "rl")


def test_config_changes_count_a_key_added_since_as_its_default() -> None:
    recorded = {"run": {"steps": 1}, "method": {"name": "lat", "old": 1}}
    now = {"run": {"steps": 1, "seed": 0}, "method": {"name": "lat"}}
    changes = [(key, before) for key, before, _ in config_changes(recorded, now, {"run": {"seed": 0}})]
    assert changes == [("method.old", 1)]  # run.seed: absent there, its default here; method.old: gone
    assert [k for k, *_ in config_changes({"a": True}, {"a": 1}, {})] == ["a"]  # a bool is not an int

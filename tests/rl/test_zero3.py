"""DeepSpeed ZeRO-3 pieces that need no second process: config, validation, checkpoint files.

Training itself (resume, equality with DDP, SFT) runs on two CPU processes in
test_distributed.py."""

from __future__ import annotations

import pickle
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from evidra.core.config import load_config
from evidra.core.errors import CheckpointError, ConfigError
from evidra.rl.parallel.precision import Precision
from evidra.rl.run_config import RLConfig, RunConfig

pytest.importorskip("deepspeed", reason="ZeRO-3 needs the deepspeed extra (in .[dev])")

from evidra.rl.parallel import zero3


def _over(*extra: str) -> list[str]:
    return ["model.path=tiny:qwen2_5_vl", "run.sharding=zero3", "data.task=toy.length", *extra]


def test_ds_config_follows_the_precision_and_clipping() -> None:
    bf16 = zero3.ds_config(Precision("float32", "bfloat16"), 0.5)
    assert bf16["bf16"]["enabled"] and bf16["gradient_clipping"] == 0.5
    assert bf16["zero_optimization"]["stage"] == 3 and bf16["gradient_accumulation_steps"] == 1
    fp32 = zero3.ds_config(Precision("float32", "float32"), 1.0, train=False)
    assert not fp32["bf16"]["enabled"] and "gradient_clipping" not in fp32


def test_zero3_with_a_vllm_sampler_is_refused_before_loading() -> None:
    from evidra.methods import check_config

    with pytest.raises(ConfigError, match=r"rollout\.backend=hf"):
        check_config(load_config(RLConfig, None, _over("rollout.backend=vllm")))


def test_a_missing_deepspeed_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from evidra.methods import check_config

    monkeypatch.setitem(sys.modules, "deepspeed", None)  # import deepspeed -> ImportError
    with pytest.raises(ConfigError, match=r"evidra\[deepspeed\]"):
        check_config(load_config(RLConfig, None, _over()))


def test_zero3_on_one_process_is_refused() -> None:
    from evidra.rl.parallel.processes import Engine

    with pytest.raises(ConfigError, match=r"run\.sharding=zero3 shards over processes"):
        Engine(RunConfig(sharding="zero3"), Precision("float32", "float32"))


def _optimizer() -> SimpleNamespace:
    return SimpleNamespace(loss_scaler=object(), partition_count=2, load_state_dict=lambda *a, **k: None)


def test_partitions_of_another_world_size_are_named(tmp_path: Path) -> None:
    import torch

    folder = tmp_path / "step-000002" / "optimizer"
    folder.mkdir(parents=True)
    torch.save({"partition_count": 1}, folder / "rank-00000.pt")
    with pytest.raises(CheckpointError, match="of 1 processes; resume it with 1 processes"):
        zero3.load_optimizer(_optimizer(), folder, rank=0, world=2)


class _Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (Path.touch, (str(self.marker),))  # type: ignore[return-value]


def test_a_planted_partition_is_never_executed(tmp_path: Path) -> None:
    import torch

    folder = tmp_path / "optimizer"
    folder.mkdir()
    marker = tmp_path / "owned"
    for rank in (0, 1):
        torch.save({"partition_count": 2, "x": _Payload(marker)}, folder / f"rank-{rank:05d}.pt")
    with pytest.raises(CheckpointError, match="unreadable"):
        zero3.load_optimizer(_optimizer(), folder, rank=1, world=2)
    assert not marker.exists()
    (folder / "rank-00001.pt").write_bytes(pickle.dumps({"partition_count": 2})[:5])  # torn
    with pytest.raises(CheckpointError, match=r"rank-00001\.pt is unreadable"):
        zero3.load_optimizer(_optimizer(), folder, rank=1, world=2)

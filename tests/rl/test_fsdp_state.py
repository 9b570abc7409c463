"""FSDP2 optimizer state is written and read without pickle (``rl/parallel/fsdp_state.py``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.slow
def test_a_planted_dcp_metadata_pickle_is_never_executed(tmp_path: Path) -> None:
    """Two CPU processes (gloo): an FSDP2 checkpoint resumes; a forged one, whose optimizer folder
    holds a pickle payload as ``.metadata`` and whose checksums cover it, is refused in one line
    and the payload never runs."""
    script = Path(__file__).with_name("fsdp_planted.py")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        str(script),
        str(tmp_path),
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["written"] == [
        "rank-00000.json",
        "rank-00000.safetensors",
        "rank-00001.json",
        "rank-00001.safetensors",
    ]
    assert result["resumed_from"] == 1
    assert not result["marker"] and not (tmp_path / "owned").exists()
    refused = result["refused"]
    assert "pickled .metadata" in refused and "\n" not in refused, refused


def _trained(seed: int) -> tuple[object, object]:
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.8, 0.9) if seed == 0 else (0.5, 0.5))
    torch.manual_seed(seed)
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
    return model, opt


def test_the_state_round_trips_and_damage_is_named_in_one_line(tmp_path: Path) -> None:
    """Without a process group the same files hold plain tensors: written, read back equal, and
    every damaged or foreign file refused in one line."""
    import torch

    from evidra.core.errors import CheckpointError
    from evidra.rl.parallel import fsdp_state

    folder = tmp_path / "step-000001" / "optimizer"
    model, opt = _trained(0)
    fsdp_state.save(model, opt, folder, 0, 1)
    fresh_model, fresh_opt = _trained(1)  # other moments, to be replaced
    fsdp_state.load(fresh_model, fresh_opt, folder, 0, 1, lambda ok: ok)
    for a, b in zip(opt.state.values(), fresh_opt.state.values(), strict=True):  # type: ignore[attr-defined]
        assert all(torch.equal(a[k], b[k]) for k in ("step", "exp_avg", "exp_avg_sq"))
    assert fresh_opt.param_groups[0]["betas"] == (0.8, 0.9)

    def refused(needle: str, agree: bool = True) -> None:
        with pytest.raises(CheckpointError, match=needle) as err:
            fsdp_state.load(fresh_model, fresh_opt, folder, 0, 1, lambda ok: ok and agree)
        assert "\n" not in str(err.value)

    refused("another process could not read", agree=False)
    good = (folder / "rank-00000.json").read_text()
    manifest = json.loads(good)
    key = next(iter(manifest["tensors"]))
    manifest["tensors"][key]["shape"] = [9, 9]
    (folder / "rank-00000.json").write_text(json.dumps(manifest))
    refused("was saved with another shape or sharding")
    (folder / "rank-00000.json").write_text("[" * 100_000)
    refused("manifest .* is unreadable")
    (folder / "rank-00000.json").write_text(good)
    (folder / "rank-00000.safetensors").write_bytes(b"\x08" + b"\x00" * 7 + b"{")
    refused("shard .* is unreadable")
    (folder / "rank-00001.json").write_text("{}")
    refused("of 2 processes; resume it with that many processes")
    (folder / ".metadata").write_bytes(b"\x80\x04N.")
    refused("pickled .metadata, which evidra does not read")

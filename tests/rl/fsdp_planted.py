"""Run by tests/rl/test_fsdp_state.py under torchrun: an FSDP2 checkpoint on 2 CPU processes,
resumed cleanly, then with a pickle payload planted as the optimizer folder's ``.metadata``
(torch.distributed.checkpoint's file) and in the checkpoint's checksums, as a forger would.

Rank 0 writes what the test checks to ``<out>/result.json``; the payload, if ever unpickled,
creates ``<out>/owned``.
"""

from __future__ import annotations

import hashlib
import json
import pickle
import sys
from pathlib import Path

import torch

from evidra.core.config import load_config
from evidra.core.errors import CheckpointError
from evidra.rl.run_config import RLConfig
from evidra.rl.runs.checkpoint import load_checkpoint
from evidra.rl.trainer import RLTrainer


class _Payload:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (Path.touch, (self.marker,))  # type: ignore[return-value]


def _cfg(out: Path, steps: int) -> RLConfig:
    over = [
        "model.path=tiny:qwen2_5_vl",
        f"run.output_dir={out}",
        f"run.steps={steps}",
        "run.batch_size=2",
        "run.micro_batch_size=2",
        "rollout.group_size=2",
        "rollout.max_new_tokens=3",
        "data.size=4",
        "model.lora.enabled=false",
        "data.task=toy.length",
        "run.sharding=fsdp2",
        "run.save_every=1",
    ]
    return load_config(RLConfig, None, over)


def _plant(ckpt: Path, marker: Path) -> None:
    """A forged checkpoint: the payload as DCP's metadata file, with matching checksums."""
    (ckpt / "optimizer" / ".metadata").write_bytes(pickle.dumps(_Payload(str(marker))))
    sums = {
        str(f.relative_to(ckpt)): hashlib.sha256(f.read_bytes()).hexdigest()
        for f in sorted(ckpt.rglob("*"))
        if f.is_file() and f.name != "checksums.json"
    }
    (ckpt / "checksums.json").write_text(json.dumps(sums))


def main(out: str) -> None:
    torch.set_num_threads(1)
    root = Path(out)
    first = RLTrainer(_cfg(root / "run", 1))
    first.train()
    result: dict[str, object] = {
        "written": sorted(p.name for p in (root / "run/checkpoints/step-000001/optimizer").iterdir())
    }
    resumed = RLTrainer(_cfg(root / "run", 2))
    result["resumed_from"] = resumed.state.step
    ckpt, marker = root / "run/checkpoints/step-000001", root / "owned"
    if resumed.engine.is_main_process:
        _plant(ckpt, marker)
    resumed.engine.wait()
    model = resumed.engine.unwrap(resumed.model)
    try:
        load_checkpoint(ckpt, model, resumed.optimizer, resumed.scheduler, resumed.engine)
        result["refused"] = ""
    except CheckpointError as exc:
        result["refused"] = str(exc)
    resumed.engine.wait()
    result["marker"] = marker.exists()
    if resumed.engine.is_main_process:
        (root / "result.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1])

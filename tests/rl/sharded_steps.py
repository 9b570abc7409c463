"""Run by tests/rl/test_distributed.py under torchrun: sharded training on 2 CPU processes,
with ``run.sharding`` FSDP2 or ZeRO-3 (the second argument).

In one launch: an uninterrupted 4-step run, a 2-step run resumed to 4 from its sharded
checkpoint, a DDP run and a sharded run of one step from the same start (fp32), and 2 sharded
SFT steps. Rank 0 writes what the test compares to ``<out>/result.pt``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from evidra.core.config import load_config
from evidra.rl.run_config import RLConfig, SFTConfig
from evidra.rl.sft.finetune import SFTTrainer
from evidra.rl.trainer import RLTrainer

SHARDING = sys.argv[2] if len(sys.argv) > 2 else "fsdp2"


def _cfg(out: Path, *extra: str) -> RLConfig:
    base = [
        "model.path=tiny:qwen2_5_vl",
        f"run.output_dir={out}",
        "run.batch_size=4",
        "run.micro_batch_size=3",
        "rollout.group_size=2",
        "rollout.max_new_tokens=5",
        "optim.lr=1e-3",
        "data.size=8",
        "model.lora.enabled=false",
        "data.task=toy.length",
        f"run.sharding={SHARDING}",
        "algo.kl=loss",
        "algo.kl_coef=0.1",
    ]
    return load_config(RLConfig, None, [*base, *extra])


def _weights(trainer: RLTrainer) -> dict[str, torch.Tensor]:
    from evidra.rl.runs.checkpoint import load_trainable_weights

    return load_trainable_weights(trainer.save())


def _held_fraction(trainer: RLTrainer) -> float:
    """The share of the policy's parameter elements this process holds (1.0 unsharded)."""
    model = trainer.engine.unwrap(trainer.model)
    held = total = 0
    for p in model.parameters():
        if hasattr(p, "ds_tensor"):  # ZeRO-3: this process's partition
            held, total = held + p.ds_tensor.numel(), total + p.ds_numel
        elif hasattr(p, "to_local"):  # FSDP2: a DTensor shard
            held, total = held + p.to_local().numel(), total + p.numel()
        else:
            held, total = held + p.numel(), total + p.numel()
    return held / total


def main(out: str) -> None:
    torch.set_num_threads(1)
    root = Path(out)
    result: dict[str, object] = {}
    full = RLTrainer(_cfg(root / "full", "run.steps=4", "run.save_every=2", "model.dtype=bfloat16"))
    result["held_fraction"] = _held_fraction(full)
    result["full"] = [m["loss"] for m in full.train()]
    result["full_weights"] = _weights(full)
    cut = RLTrainer(_cfg(root / "cut", "run.steps=2", "run.save_every=2", "model.dtype=bfloat16"))
    first = cut.train()
    resumed = RLTrainer(_cfg(root / "cut", "run.steps=4", "run.save_every=2", "model.dtype=bfloat16"))
    result["resumed_from"] = resumed.state.step
    result["cut"] = [m["loss"] for m in first + resumed.train()]
    result["cut_weights"] = _weights(resumed)
    for name, sharding in (("ddp", "none"), ("sharded", SHARDING)):  # fp32, one step, same start
        trainer = RLTrainer(_cfg(root / name, "run.steps=1", f"run.sharding={sharding}", "optim.lr=1e-2"))
        if sharding == "none":
            model = trainer.engine.unwrap(trainer.model)
            result["start_weights"] = {
                n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad
            }
        result[name] = trainer.train()[0]["loss"]
        result[f"{name}_weights"] = _weights(trainer)
        result["world"] = trainer.acc.num_processes
    sft_over = [
        "model.path=tiny:qwen2_5_vl",
        f"run.output_dir={root / 'sft'}",
        "run.steps=2",
        "run.batch_size=4",
        "run.micro_batch_size=1",
        "data.task=toy.key_value",
        "data.size=8",
        "model.lora.enabled=false",
        f"run.sharding={SHARDING}",
        "model.dtype=bfloat16",
    ]
    sft = load_config(SFTConfig, None, sft_over)
    result["sft"] = [m["loss"] for m in SFTTrainer(sft).train()]
    if full.acc.is_main_process:
        torch.save(result, root / "result.pt")


if __name__ == "__main__":
    main(sys.argv[1])

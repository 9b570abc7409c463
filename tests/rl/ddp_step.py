"""Run by tests/rl/test_distributed.py under torchrun: one RL step on each of 2 CPU processes."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from evidra.core.config import load_config
from evidra.rl.run_config import RLConfig
from evidra.rl.trainer import RLTrainer


def main(out: str) -> None:
    torch.set_num_threads(1)
    cfg = load_config(
        RLConfig,
        None,
        [
            f"run.output_dir={out}",
            "model.path=tiny:qwen2_5_vl",
            "run.steps=1",
            "run.batch_size=2",
            "rollout.group_size=2",
            "rollout.max_new_tokens=5",
            "optim.lr=1e-2",
            "data.size=8",
            "model.lora.enabled=false",
            "algo.kl=none",
            "data.task=toy.length",
        ],
    )
    trainer = RLTrainer(cfg)
    before = {n: p.detach().clone() for n, p in trainer.vlm.model.named_parameters() if p.requires_grad}
    samples = [s.id for s in trainer.cursor.take(trainer.state, 2, trainer.acc.process_index, 2)[0]]
    trainer.train()
    after = {n: p.detach().clone() for n, p in trainer.vlm.model.named_parameters() if p.requires_grad}
    rank = trainer.acc.process_index
    torch.save(
        {"before": before, "after": after, "samples": samples, "world": trainer.acc.num_processes},
        Path(out) / f"rank{rank}.pt",
    )


if __name__ == "__main__":
    main(sys.argv[1])

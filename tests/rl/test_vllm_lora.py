"""A LoRA policy on the colocated vLLM engine (make test-vllm): after an optimizer step, ``sync``
hands vLLM the base weights with the adapter merged in, so vLLM samples from the adapted policy."""

from __future__ import annotations

from typing import Any

import pytest
import torch

pytest.importorskip("vllm")

from evidra.core.config import load_config
from evidra.core.types import Message
from evidra.models.context import Context, collate_split, encode_messages
from evidra.models.generation import SamplingParams, forward_logprobs
from evidra.rl.run_config import RLConfig
from evidra.rl.trainer import RLTrainer

pytestmark = pytest.mark.vllm

TOLERANCE = 1e-3  # as in test_vllm_rollout.py


def _rescore(model: Any, pad_id: int, prompt: Context, ids: tuple[int, ...]) -> list[float]:
    inputs, resp, _ = collate_split([prompt.append_ids(ids)], [len(prompt)], pad_id, -1)
    with torch.no_grad():
        return list(forward_logprobs(model, inputs, resp, 1.0)[0].tolist())


def test_vllm_samples_from_the_adapted_policy_after_a_lora_step(tmp_path: Any) -> None:
    cfg = load_config(
        RLConfig,
        None,
        [
            "model.path=tiny:qwen2",
            "data.task=toy.digits",
            f"run.output_dir={tmp_path}",
            "run.steps=1",
            "run.batch_size=4",
            "run.micro_batch_size=16",
            "rollout.group_size=8",
            "rollout.max_new_tokens=16",
            "optim.lr=0.05",
            "model.lora.enabled=true",
            "algo.kl=none",
            "rollout.backend=vllm",
            "rollout.vllm.max_model_len=1024",
            "rollout.vllm.enforce_eager=true",
            "rollout.vllm.gpu_memory_utilization=0.3",  # room beside an earlier module's freed engine
        ],
    )
    trainer = RLTrainer(cfg)
    model, vlm = trainer.vlm.model, trainer.vlm
    assert hasattr(model, "disable_adapter"), "model.lora.enabled=true should give a PEFT model"
    history = trainer.train()
    assert "loss" in history[0] and history[0]["grad_norm"] > 0

    prompt = encode_messages(vlm.processor, [Message.text("user", "Count the rows.")])
    gen = trainer.backend.generate([prompt] * 2, SamplingParams(max_new_tokens=12, temperature=1.0, seed=3))
    for g in gen:
        adapted = _rescore(model, vlm.pad_token_id, prompt, g.token_ids)
        with model.disable_adapter():
            base = _rescore(model, vlm.pad_token_id, prompt, g.token_ids)
        # the step moved the adapter far enough that the base model is told apart ...
        assert max(abs(a - b) for a, b in zip(adapted, base, strict=True)) > 10 * TOLERANCE
        # ... and vLLM's log-probs are the adapted model's
        assert max(abs(a - b) for a, b in zip(g.logprobs, adapted, strict=True)) < TOLERANCE
    # sync unmerged the adapter again: training goes on with base weights and adapter apart
    lora_layers = [m for m in model.modules() if hasattr(m, "merged") and hasattr(m, "lora_A")]
    assert lora_layers and not any(m.merged for m in lora_layers)

"""Text-only policies (Qwen2 / Qwen3 causal LMs) through the VLM loader, rollout loop and trainer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from evidra.core.config import load_config
from evidra.core.errors import ModelLoadError
from evidra.core.types import ImagePart, Message, Sample, TextPart
from evidra.env import KeyValueEnv
from evidra.models.context import encode_messages
from evidra.models.generation import SamplingParams, sequence_logprobs
from evidra.models.loading import load_vlm
from evidra.models.tiny import build_tiny
from evidra.rl.run_config import RLConfig
from evidra.rl.trainer import RLTrainer
from evidra.rollout import HFBackend, RolloutLimits, rollout

CORPUS = {"alpha": "17", "beta": "42"}


@pytest.fixture(scope="module", params=["qwen2", "qwen3"])
def text_vlm(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    return load_vlm(build_tiny(request.param, tmp_path_factory.mktemp(request.param)))


def test_text_checkpoint_loads_as_a_policy_without_vision(text_vlm: Any) -> None:
    assert text_vlm.is_text_only and text_vlm.spec is None and text_vlm.arch in ("qwen2", "qwen3")
    assert text_vlm.image_token_id == -1
    config = text_vlm.model.config
    assert config.hidden_size // config.num_attention_heads >= 32  # vLLM's CPU attention needs it
    ctx = encode_messages(text_vlm.processor, [Message("user", (TextPart("a "), TextPart("b")))])
    # list-of-parts content is joined, not printed as a Python list
    assert "user\na b<|im_end|>" in text_vlm.tokenizer.decode(list(ctx.token_ids))


def test_text_policy_refuses_images(text_vlm: Any) -> None:
    from PIL import Image

    image = Image.new("RGB", (32, 32))
    with pytest.raises(ModelLoadError, match="text-only policy"):
        encode_messages(text_vlm.processor, [Message("user", (ImagePart(image), TextPart("hi")))])


def test_multi_turn_rollout_log_probs_match_teacher_forcing(text_vlm: Any) -> None:
    samples = [Sample(id=k, question=f"What is the value of {k}?", answers=(v,)) for k, v in CORPUS.items()]
    limits = RolloutLimits(max_turns=3, max_new_tokens=10, max_response_tokens=200)
    params = SamplingParams(temperature=1.0, seed=0, stop=("</search>",))
    episodes = rollout(HFBackend(text_vlm), lambda s: KeyValueEnv(CORPUS), samples, 2, params, limits)
    assert [ep.group for ep in episodes] == [0, 0, 1, 1]
    for ep in episodes:
        t = ep.trajectory
        assert len(t.token_ids) == len(t.policy_mask) == len(t.logprobs)
        assert sum(len(s) for s in t.turns) == t.num_policy_tokens > 0
        first = t.token_ids[t.turns[0].start : t.turns[0].end]
        want = t.logprobs[t.turns[0].start : t.turns[0].end]
        got = _rescore(text_vlm, t.prompt_ids, first)
        assert got == pytest.approx(list(want), abs=1e-4)


def _rescore(vlm: Any, prompt: tuple[int, ...], completion: tuple[int, ...]) -> list[float]:
    from evidra.models.context import Context, collate_split
    from evidra.models.generation import forward_logprobs

    full = Context(prompt).append_ids(completion)
    inputs, ids, _ = collate_split([full], [len(prompt)], vlm.pad_token_id, vlm.image_token_id)
    with torch.no_grad():
        return list(forward_logprobs(vlm.model, inputs, ids)[0].tolist())


def test_sequence_logprobs_runs_on_text_policy(text_vlm: Any) -> None:
    chats = [[Message.text("user", "What is the value of alpha?")]]
    (lp,) = sequence_logprobs(text_vlm, chats, [[5, 6, 7]])
    assert len(lp) == 3 and all(v < 0 for v in lp)


@pytest.mark.parametrize("task", ["toy.key_value", "toy.length"])
def test_trainer_steps_a_text_policy(tmp_path: Path, task: str) -> None:
    overrides = [
        "model.path=tiny:qwen2",
        f"data.task={task}",
        "data.size=4",
        f"run.output_dir={tmp_path}",
        "run.steps=1",
        "run.batch_size=2",
        "run.micro_batch_size=4",
        "rollout.group_size=2",
        "rollout.max_turns=2",
        "rollout.max_new_tokens=8",
        "optim.lr=1e-2",
    ]
    trainer = RLTrainer(load_config(RLConfig, None, overrides))
    assert trainer.vlm.is_text_only
    before = {n: p.detach().clone() for n, p in trainer.vlm.model.named_parameters() if p.requires_grad}
    assert before and all("lora_" in n for n in before)  # LoRA found the decoder's projections
    (metrics,) = trainer.train()
    assert metrics["episode/policy_tokens"] > 0 and torch.isfinite(torch.tensor(metrics["loss"]))
    if task == "toy.length":  # rewards differ inside a group, so the adapter must move
        after = dict(trainer.vlm.model.named_parameters())
        assert metrics["reward/std"] > 0
        assert any(not torch.equal(before[n], after[n].detach()) for n in before)
    else:  # the random policy never answers right: a valid step with all-zero advantages
        assert metrics["reward/mean"] == 0 and metrics["advantage/zero_frac"] == 1.0

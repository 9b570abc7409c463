"""TRL's ``GRPOTrainer`` driving an evidra environment and reward (skipped without trl).

Run with TRL installed (main's environment has none):
``pip install "trl>=1.0" datasets && pytest -q tests/integrations/test_trl_environment.py``.

The tiny random policy would never write a tool call by chance, so the test steers TRL's own
sampling with ``GRPOConfig.generation_kwargs["sequence_bias"]`` (a transformers logits
processor): after the question the policy writes a ``search`` tool call, after the tool result
an ``<answer>``. Everything else is TRL's: chat template with the tool schema, parsing the call,
calling the environment's method, inserting the result, the reward call and two optimizer steps.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from evidra.core.types import Parsed, Sample, Trajectory
from evidra.env.toy import KeyValueEnv
from evidra.integrations import SEARCH_TOOL, as_trl_environment, as_trl_reward
from evidra.rewards.reward import RewardResult
from evidra.rewards.toy import key_value_answer, parse_answer

CORPUS = {"capital": "Paris"}
QUESTION = "What is the capital?"
CALL = '<tool_call>\n{"name": "search", "arguments": {"query": "capital"}}\n</tool_call><|im_end|>'
AFTER_TOOL = "</tool_response><|im_end|>\n<|im_start|>assistant\n"
ANSWERS = ("Paris", "Rome")  # sampled between after the tool result: rewards differ in a group


def _forcing_bias(tokenizer: Any, script: list[tuple[str, str]], window: int = 12) -> list[list[Any]]:
    """``sequence_bias`` entries that make sampling write a ``target`` after its ``context``:
    each target token gets +100 when the ``window`` tokens before it match. Targets that share
    a context are sampled between (equal bias), the rest of each is then forced."""
    entries: set[tuple[int, ...]] = set()
    for context, target in script:
        ctx = tokenizer.encode(context, add_special_tokens=False)
        seq = ctx + tokenizer.encode(target, add_special_tokens=False)
        assert len(ctx) >= window
        entries.update(tuple(seq[j - window : j + 1]) for j in range(len(ctx), len(seq)))
    return [[list(key), 100.0] for key in sorted(entries)]


def test_grpo_trainer_runs_an_evidra_environment_and_reward(tmp_path: Path) -> None:
    """Run in its own process: TRL's trainer changes process-wide state (gradient-checkpointing
    wrappers among them) that later tests in the same process must not inherit."""
    pytest.importorskip("trl")
    pytest.importorskip("datasets")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, __file__, str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]


def _train_two_steps(tmp_path: Path) -> None:
    import datasets

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    import torch
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer
    from trl.chat_template_utils import qwen2_5_chat_template

    from evidra.models.tiny import build_tiny

    model_dir = build_tiny("qwen2", tmp_path / "policy")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    # TRL renders the tool schema and parses tool calls with the chat templates it knows.
    tokenizer.chat_template = qwen2_5_chat_template

    steps: list[str] = []

    def make_env(sample: Sample) -> KeyValueEnv:
        env = KeyValueEnv(CORPUS)
        original = env.step

        def step(text: str) -> Any:
            steps.append(text)
            return original(text)

        env.step = step  # type: ignore[method-assign]
        return env

    seen: list[tuple[str | None, tuple[str, ...], tuple[Any, ...]]] = []

    def reward(parsed: Parsed, sample: Sample, trajectory: Trajectory | None = None) -> RewardResult:
        assert trajectory is not None
        seen.append((parsed.answer, trajectory.texts, tuple(sample.answers)))
        # texts are the episode's actions: the search tool's action text, then the final answer
        return key_value_answer(parsed, sample, trajectory)

    Env = as_trl_environment(make_env, (SEARCH_TOOL,), name="KeyValueTRL")
    bias = _forcing_bias(
        tokenizer,
        [
            (f"{QUESTION}<|im_end|>\n<|im_start|>assistant\n", CALL),
            *((AFTER_TOOL, f"<answer>{a}</answer><|im_end|>") for a in ANSWERS),
        ],
    )
    args = GRPOConfig(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=96,
        max_tool_calling_iterations=2,
        max_steps=2,
        learning_rate=1e-4,
        use_cpu=True,
        report_to=[],
        logging_steps=1,
        save_strategy="no",
        seed=0,
        dataloader_num_workers=0,
        generation_kwargs={"sequence_bias": bias},
    )
    rows = {"prompt": [[{"role": "user", "content": QUESTION}]] * 2, "answer": ["Paris"] * 2}
    before = {n: p.detach().clone() for n, p in _load(model_dir).named_parameters()}
    trainer = GRPOTrainer(
        model=str(model_dir),
        reward_funcs=[as_trl_reward(reward, parse_answer, name="key_value_answer")],
        args=args,
        train_dataset=datasets.Dataset.from_dict(rows),
        processing_class=tokenizer,
        environment_factory=Env,
    )
    trainer.train()

    assert trainer.state.global_step == 2
    # per step, 4 search tool calls run by TRL, then the 4 final answers played at reward time
    for block in (steps[:8], steps[8:]):
        assert block[:4] == ["<search>capital</search>"] * 4, steps
        assert set(block[4:]) <= {f"<answer>{a}</answer>" for a in ANSWERS}, steps
    assert len(steps) == 16 and {s for s in steps if "Rome" in s}, steps
    # the reward saw each episode: the sample of its row, the actions and the step infos
    assert len(seen) == 8
    for answer, texts, gold in seen:
        assert texts == ("<search>capital</search>", f"<answer>{answer}</answer>") and gold == ("Paris",)
    episodes = [env.evidra_episode for env in trainer.environments]
    assert all(ep is not None and ep.infos[0].hit and ep.done for ep in episodes)
    logs = [log for log in trainer.state.log_history if "rewards/key_value_answer/mean" in log]
    expected = [1.1 if a == "Paris" else 0.1 for a, _, _ in seen]  # correct answer + 0.1 for searching
    assert [log["rewards/key_value_answer/mean"] for log in logs] == [
        pytest.approx(sum(expected[:4]) / 4),
        pytest.approx(sum(expected[4:]) / 4),
    ]
    assert [log["tools/call_frequency"] for log in logs] == [1.0, 1.0]
    assert all(log["grad_norm"] > 0 for log in logs)  # rewards differ within the group
    after = dict(trainer.model.named_parameters())
    assert any(not torch.equal(before[n], after[n].detach().cpu()) for n in before)  # the optimizer moved


def _load(model_dir: Path) -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)


if __name__ == "__main__":
    _train_two_steps(Path(sys.argv[1]))

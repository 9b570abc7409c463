"""Server mode against a real ``vllm serve`` on loopback, on a tiny text policy (make test-vllm).

The module starts one OpenAI-compatible vLLM server (its own process group, stopped at the end)
on the tiny checkpoint with the flags server mode needs, and one trainer whose rollouts go to it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch

pytest.importorskip("vllm")

from evidra.core.config import load_config
from evidra.core.types import Message
from evidra.models.context import Context, collate_split, encode_messages
from evidra.models.generation import SamplingParams, forward_logprobs
from evidra.models.tiny import build_tiny_text
from evidra.rl.run_config import RLConfig
from evidra.rl.trainer import RLTrainer

pytestmark = pytest.mark.vllm

TOLERANCE = 1e-3  # as for the colocated engine (test_vllm_rollout.py)
START_TIMEOUT_S = 300.0


def server_argv(model: Path, port: int) -> list[str]:
    """The command docs/vllm.md shows; the CPU-only flags are the last line."""
    return [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--seed",
        "0",
        "--logprobs-mode",
        "processed_logprobs",
        "--enable-prefix-caching",
        "--dtype",
        "float32",
        "--max-model-len",
        "1024",
        "--enforce-eager",
        # CPU: the memory share is of RAM; a seeded prefill must not be split across steps
        "--gpu-memory-utilization",
        "0.1",
        "--max-num-batched-tokens",
        "65536",
    ]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the server's process group (API server, engine core, worker), then SIGKILL."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_text("qwen2", tmp_path_factory.mktemp("tiny-qwen2"))


@pytest.fixture(scope="module")
def server(checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = _free_port()
    log = tmp_path_factory.mktemp("vllm-server") / "server.log"
    env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            server_argv(checkpoint, port),
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"vllm serve exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"vllm serve not healthy after {START_TIMEOUT_S}s:\n{log.read_text()[-3000:]}")
            time.sleep(1)
        yield url
    finally:
        _stop(proc)


@pytest.fixture(scope="module")
def trainer(checkpoint: Path, server: str, tmp_path_factory: pytest.TempPathFactory) -> RLTrainer:
    out = tmp_path_factory.mktemp("vllm-server-run")
    cfg = load_config(
        RLConfig,
        None,
        [
            f"model.path={checkpoint}",
            "data.task=toy.digits",
            f"run.output_dir={out}",
            "run.steps=3",
            "run.batch_size=4",
            "run.micro_batch_size=16",
            "rollout.group_size=8",
            "rollout.max_new_tokens=16",
            "optim.lr=3e-3",
            "model.lora.enabled=false",
            "algo.kl=none",
            "rollout.backend=vllm",
            "rollout.vllm.mode=server",
            f"rollout.vllm.server_url={server}",
            f"rollout.vllm.weights_dir={out / 'weights'}",
        ],
    )
    return RLTrainer(cfg)


def _prompts(vlm: Any) -> list[Context]:
    return [
        encode_messages(vlm.processor, [Message.text("user", f"Count the {w}.")]) for w in ("rows", "bars")
    ]


def _max_gap(trainer: RLTrainer, temperature: float) -> float:
    """Largest |server - trainer| log-prob over the sampled tokens of two prompts."""
    vlm = trainer.vlm
    prompts = _prompts(vlm)
    gaps = []
    gens = trainer.backend.generate(
        prompts, SamplingParams(max_new_tokens=12, temperature=temperature, seed=1)
    )
    for prompt, gen in zip(prompts, gens, strict=True):
        assert gen.prompt_ids == prompt.token_ids and len(gen.token_ids) == len(gen.logprobs) > 0
        inputs, resp, _ = collate_split(
            [prompt.append_ids(gen.token_ids)], [len(prompt)], vlm.pad_token_id, -1
        )
        with torch.no_grad():
            want = forward_logprobs(vlm.model, inputs, resp, temperature or 1.0)[0].tolist()
        gaps += [abs(a - b) for a, b in zip(gen.logprobs, want, strict=True)]
    return max(gaps)


@pytest.mark.parametrize("temperature", [1.0, 0.0])
def test_server_logprobs_match_the_trainers(trainer: RLTrainer, temperature: float) -> None:
    assert _max_gap(trainer, temperature) < TOLERANCE


def test_sync_loads_changed_weights_into_the_server(trainer: RLTrainer) -> None:
    model = trainer.vlm.model
    with torch.no_grad():  # a deterministic perturbation of every weight
        for p in model.parameters():
            p.add_(0.05 * torch.sin(torch.arange(p.numel(), dtype=p.dtype)).view_as(p))
    assert _max_gap(trainer, 1.0) > 0.1  # the server still holds the old weights
    trainer.backend.sync(model)
    assert (Path(trainer.cfg.rollout.vllm.weights_dir) / "model.safetensors").is_file()
    assert _max_gap(trainer, 1.0) < TOLERANCE


def test_training_with_a_server_updates_it_every_step(trainer: RLTrainer) -> None:
    before = {n: p.detach().clone() for n, p in trainer.vlm.model.named_parameters()}
    start = time.perf_counter()
    history = trainer.train()
    print(f"\n{len(history)} steps on the server in {time.perf_counter() - start:.1f}s")
    print(
        "reward", [m.get("reward/mean") for m in history], "grad norm", [m.get("grad_norm") for m in history]
    )
    updated = [m for m in history if "loss" in m]  # a step whose groups all tie has no update
    assert len(history) == 3 and updated and all(torch.isfinite(torch.tensor(m["loss"])) for m in updated)
    assert any(not torch.equal(before[n], p) for n, p in trainer.vlm.model.named_parameters())
    # each step's rollouts came from the weights synced after the step before
    assert max(m["mismatch/logp_abs_max"] for m in updated) < TOLERANCE
    assert _max_gap(trainer, 1.0) < TOLERANCE  # and the server holds the trained weights

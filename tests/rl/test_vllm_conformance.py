"""The text path of the conformance run with a vLLM sampler (make test-vllm): zero mismatches."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm")

from evidra.models.loading import load_vlm
from evidra.models.tiny import build_tiny
from evidra.models.vllm_backend import VLLMBackend, VLLMConfig
from evidra.rl.conformance_run import ConformanceSettings, text_batches
from evidra.rollout.recording import RecordingBackend

pytestmark = pytest.mark.vllm

# float32 on both sides; vLLM's CPU kernels sum in another order (tests/rl/test_vllm_rollout.py)
TOLERANCE = 1e-3


@pytest.fixture(scope="module")
def text_vlm(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return load_vlm(build_tiny("qwen2", Path(tmp_path_factory.mktemp("tiny")) / "qwen2"))


def test_text_episodes_sampled_by_vllm_never_mismatch(text_vlm: Any) -> None:
    # a small KV share, and the engine freed before the next module starts its own (vLLM on a CPU
    # refuses to start when an earlier engine still holds the memory it counts on)
    config = VLLMConfig(max_model_len=4096, enforce_eager=True, gpu_memory_utilization=0.1)
    engine = RecordingBackend(VLLMBackend(text_vlm, config))
    settings = ConformanceSettings(tolerance=TOLERANCE)
    try:
        checks = [c for b in text_batches(text_vlm, 64, seed=4, settings=settings, sampler=engine) for c in b]
        sampled = len(engine)
    finally:
        del engine
        gc.collect()
    assert len(checks) == 64
    assert [(i, c.problems) for i, c in enumerate(checks) if not c.ok] == []
    assert all(c.images == 0 and c.policy_tokens > 0 for c in checks)
    assert sampled > 10  # vLLM sampled free turns inside the episodes

"""The trainer's generation backend, chosen by ``rollout.backend``: transformers or vLLM.

A training backend generates (``GenerationBackend``), frees its memory for the policy update
(``release``) and takes the updated weights after every optimizer step (``sync``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from evidra.core.registry import Registry
from evidra.models.loading import VLM
from evidra.rl.run_config import RolloutConfig
from evidra.rollout import GenerationBackend, HFBackend

if TYPE_CHECKING:
    from evidra.models.hf_types import HFModel


class TrainingBackend(GenerationBackend, Protocol):
    def release(self) -> None: ...

    def sync(self, model: HFModel) -> None: ...


BackendFactory = Callable[[RolloutConfig, VLM, str], TrainingBackend]
BACKENDS: Registry[BackendFactory] = Registry("rollout backend")


def _hf(cfg: RolloutConfig, vlm: VLM, dtype: str) -> TrainingBackend:
    return HFBackend(vlm)


def _vllm(cfg: RolloutConfig, vlm: VLM, dtype: str) -> TrainingBackend:
    if cfg.vllm.mode == "server":
        from evidra.models.vllm_server import VLLMServerBackend

        return VLLMServerBackend(vlm, cfg.vllm)
    from evidra.models.vllm_backend import VLLMBackend

    return VLLMBackend(vlm, cfg.vllm, dtype=dtype)


BACKENDS.add("hf", _hf)
BACKENDS.add("vllm", _vllm)


def make_backend(cfg: RolloutConfig, vlm: VLM, dtype: str = "float32") -> TrainingBackend:
    """The backend ``cfg.backend`` names, built for ``vlm`` (whose weights it starts from)."""
    return BACKENDS.get(cfg.backend)(cfg, vlm, dtype)

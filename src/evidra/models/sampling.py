"""How to sample a completion: ``SamplingParams``, shared by every generation backend.

It lives apart from ``models.generation`` so that the sampling loop (``models.decode``), which
``generation`` runs, can read it without importing ``generation`` back.
"""

from __future__ import annotations

from dataclasses import dataclass

from evidra.core.errors import InvalidInputError


@dataclass(frozen=True)
class SamplingParams:
    """How to sample. ``temperature == 0`` means greedy decoding."""

    max_new_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 disables top-k
    stop: tuple[str, ...] = ()  # stop after the first occurrence of any of these strings
    seed: int | None = None
    # end-of-turn tokens are not sampled before this many new tokens (capped at max_new_tokens):
    # equal to max_new_tokens, every completion has exactly that length (equal work in benchmarks);
    # stop strings still stop. Log-probs stay those of the untruncated distribution.
    min_new_tokens: int = 0

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise InvalidInputError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.min_new_tokens < 0:
            raise InvalidInputError(f"min_new_tokens must be >= 0, got {self.min_new_tokens}")
        if self.temperature < 0:
            raise InvalidInputError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise InvalidInputError(f"top_p must be in (0, 1], got {self.top_p}")
        object.__setattr__(self, "stop", tuple(self.stop))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def min_tokens(self) -> int:
        """New tokens sampled before an end-of-turn token may be: ``min_new_tokens`` within the cap."""
        return min(self.min_new_tokens, self.max_new_tokens)

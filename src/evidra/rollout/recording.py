"""A generation backend wrapper that keeps the sampler's own record of every turn.

The trainer must score exactly the ids the sampler produced after exactly the context the sampler
saw. ``RecordingBackend`` wraps any backend (transformers, vLLM, a scripted one) and keeps, for
each context it was asked to continue, the completions it returned, so a checker can compare the
trainer's teacher-forced ids with the sampler's turn by turn (``rl.conformance``), independently
of the ``Trajectory`` the rollout loop assembled from them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from evidra.models.context import Context
from evidra.models.generation import Generation, SamplingParams
from evidra.rollout.loop import GenerationBackend

if TYPE_CHECKING:
    from evidra.models.hf_types import Processor


class RecordingBackend:
    """``inner`` with a record of ``context ids -> completions`` of every ``generate`` call."""

    def __init__(self, inner: GenerationBackend) -> None:
        self.inner = inner
        self._after: dict[tuple[int, ...], list[Generation]] = {}

    @property
    def processor(self) -> Processor:
        return self.inner.processor

    def generate(self, contexts: Sequence[Context], params: SamplingParams) -> list[Generation]:
        gens = self.inner.generate(contexts, params)
        for context, gen in zip(contexts, gens, strict=True):
            self._after.setdefault(context.token_ids, []).append(gen)
        return gens

    def after(self, context_ids: Sequence[int]) -> list[Generation]:
        """The completions sampled after exactly ``context_ids`` (several for a shared prompt)."""
        return list(self._after.get(tuple(context_ids), ()))

    def __len__(self) -> int:
        """How many distinct contexts were continued."""
        return len(self._after)

    def clear(self) -> None:
        """Forget the record (a long run checks and clears it batch by batch)."""
        self._after.clear()

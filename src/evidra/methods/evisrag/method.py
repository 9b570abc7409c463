"""EVisRAG: evidence-guided reasoning over synthetic documents, trained with RS-GRPO.

Rewards (EVisRAG Eqs. 11-13): perception (per-image evidence vs gold evidence), derivation
(answer F1; "insufficient to answer" when the context is insufficient) and format. RS-GRPO
(Eq. 7-10) applies each to its own token scopes: ``RewardResult.scopes`` holds the value of each
of the observe/evidence/think/answer channels (Eq. 8's mean of the rewards covering it) and
``scopes()`` finds their token spans on the sampled ids.

``method.reward_mode=upstream`` scores as the released code does instead: the six ``sum_all``
components (accuracy, evidence, format, overlong, isObserve, isThink), each a channel on the
token span the released router gives it (``UPSTREAM_SCOPE_RULES``). The released trainer
normalises each channel on its own and takes the loss per scope: ``algo.advantage=router``
(``configs/evisrag_upstream.yaml``).

Synthetic questions without an answer in the document are the insufficient-context items
(``Sample.sufficient = False``); their gold answer is "insufficient to answer".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from evidra.core.registry import Registry
from evidra.core.types import Message, Sample, Span, Trajectory
from evidra.env.single_turn import SingleTurnEnv
from evidra.methods._benchmark import IMAGE_QA, adapter, with_sufficiency
from evidra.methods._synth import synth_samples
from evidra.methods.evisrag.construction import evisrag_filter
from evidra.methods.evisrag.paradigm import (
    SCOPE_NAMES,
    EvidenceGuided,
    evidence_oracle_text,
    evidence_scopes,
    parse_evidence,
    upstream_scopes,
)
from evidra.methods.evisrag.reward import UPSTREAM_COMPONENTS, evisrag_reward
from evidra.methods.method import METHODS, Method, Resources, merged_weights
from evidra.rl.run_config import DataConfig
from evidra.rl.runs.model_card import Paper
from evidra.rl.tasks import Task

if TYPE_CHECKING:
    from evidra.models.hf_types import Tokenizer


def evisrag_samples(cfg: DataConfig) -> list[Sample]:
    return [with_sufficiency(s) for s in synth_samples(cfg, "synth.evisrag")]


def evisrag_oracle(sample: Sample) -> list[Message]:
    """The prompt plus the gold evidence block and answer (SFT cold start, EVisRAG §3.2)."""
    return [
        *EvidenceGuided().build_messages(sample, sample.pages),
        Message.text("assistant", evidence_oracle_text(sample)),
    ]


@dataclass(frozen=True)
class EvisragOptions:
    """The ``method:`` section of an EVisRAG recipe."""

    # paper: Eqs. 11-13 on four scopes; upstream: the released code's six components and scopes
    reward_mode: Literal["paper", "upstream"] = "paper"
    # reward component -> weight over its default of 1 (paper: perception, derivation, format;
    # upstream: the six released components); default: the plain sum
    weights: Mapping[str, float] = field(default_factory=dict)


# which token span each reward channel trains, per reward variant: the paper's four scopes (Eq. 7) or
# the released router's six components
ScopeFn = Callable[[Trajectory, "Tokenizer"], Mapping[str, tuple[Span, ...]]]
SCOPE_RULES: Registry[tuple[tuple[str, ...], ScopeFn]] = Registry("EVisRAG scope rules")
SCOPE_RULES.add("paper", (SCOPE_NAMES, evidence_scopes))
SCOPE_RULES.add("upstream", (UPSTREAM_COMPONENTS, upstream_scopes))


def build_evisrag(cfg: EvisragOptions, resources: Resources) -> Task:
    """EVisRAG's task: the paper's rewards on four scopes, or (``reward_mode=upstream``) the
    released code's six components, each on the token span the released router gives it."""
    scope_names, scopes = SCOPE_RULES.get(cfg.reward_mode)
    reward = evisrag_reward(cfg.reward_mode)
    reward = reward.reweighted(merged_weights("evisrag", reward.weights, cfg.weights))
    return Task(
        name="evisrag",
        samples=evisrag_samples,
        make_env=lambda s: SingleTurnEnv(EvidenceGuided()),
        parse=parse_evidence,
        reward=reward,
        oracle=evisrag_oracle,
        scope_names=scope_names,
        scopes=scopes,
        from_benchmark=adapter(IMAGE_QA, with_sufficiency, name="evisrag"),
        from_synthetic=adapter(IMAGE_QA, with_sufficiency, name="evisrag"),  # e.g. data.synthetic=[reading]
    )


METHODS.add(
    "evisrag",
    Method(
        name="evisrag",
        options=EvisragOptions,
        build=build_evisrag,
        paradigm="evidence",
        summary="EVisRAG: observe, per-image evidence, think, answer; RS-GRPO on scoped rewards",
        layout="evisrag",
        distill=evisrag_filter,
        stages=("distill", "filter"),
        citation=Paper(
            "VisRAG 2.0: Evidence-Guided Multi-Image Reasoning in Visual Retrieval-Augmented Generation",
            "Sun et al.",
            code="https://github.com/OpenBMB/VisRAG",
        ),
    ),
)

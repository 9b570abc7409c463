"""EVisRAG task: evidence-guided reasoning over synthetic documents, trained with RS-GRPO.

Rewards (EVisRAG Eqs. 11-13): perception (per-image evidence vs gold evidence), derivation
(answer F1; "insufficient to answer" when the context is insufficient) and format. RS-GRPO
(Eq. 7-10) applies each to its own token scopes: ``RewardResult.scopes`` holds the value of each
of the observe/evidence/think/answer channels (Eq. 8's mean of the rewards covering it) and
``scopes()`` finds their token spans on the sampled ids.

``reward.mode=upstream`` scores as the released code does instead: the six ``sum_all``
components (accuracy, evidence, format, overlong, isObserve, isThink), each a channel on the
token span the released router gives it (``UPSTREAM_SCOPE_RULES``). The released trainer
normalises each channel on its own and takes the loss per scope: ``algo.advantage=router``
(``configs/evisrag_upstream.yaml``).

Synthetic questions without an answer in the document are the insufficient-context items
(``Sample.sufficient = False``); their gold answer is "insufficient to answer".
"""

from __future__ import annotations

from dataclasses import replace

from evidra.env.single_turn import SingleTurnEnv
from evidra.paradigms.evidence import (
    SCOPE_NAMES,
    EvidenceGuided,
    evidence_oracle_text,
    evidence_scopes,
    parse_evidence,
    upstream_scopes,
)
from evidra.rewards.evisrag import UPSTREAM_COMPONENTS, EvisragReward
from evidra.rl.config import DataConfig
from evidra.rl.recipes._benchmark import IMAGE_QA, adapter, with_sufficiency
from evidra.rl.recipes._synth import synth_samples
from evidra.rl.tasks import TASKS, Task
from evidra.types import Message, Sample


def evisrag_samples(cfg: DataConfig) -> list[Sample]:
    return [with_sufficiency(s) for s in synth_samples(cfg, "synth.evisrag")]


def evisrag_oracle(sample: Sample) -> list[Message]:
    """The prompt plus the gold evidence block and answer (SFT cold start, EVisRAG §3.2)."""
    return [
        *EvidenceGuided().build_messages(sample, sample.pages),
        Message.text("assistant", evidence_oracle_text(sample)),
    ]


def _with_reward_mode(mode: str) -> Task:
    """The task scored with the paper's rewards (Eqs. 11-13, four scopes) or the released ones."""
    if mode == "paper":
        return EVISRAG_TASK
    return replace(
        EVISRAG_TASK,
        reward=EvisragReward(mode="upstream"),
        scope_names=UPSTREAM_COMPONENTS,
        scopes=upstream_scopes,
        with_reward_mode=_with_reward_mode,
    )


EVISRAG_TASK = Task(
    name="evisrag",
    samples=evisrag_samples,
    make_env=lambda s: SingleTurnEnv(EvidenceGuided()),
    parse=parse_evidence,
    reward=EvisragReward(),
    oracle=evisrag_oracle,
    scope_names=SCOPE_NAMES,
    scopes=evidence_scopes,
    from_benchmark=adapter(IMAGE_QA, with_sufficiency),
    with_reward_mode=_with_reward_mode,
)
TASKS.add("evisrag", EVISRAG_TASK)

"""The prompts are the seeds' text, word for word (whitespace aside).

The seed papers live in the design folder, outside the repository; the test is skipped where it
is absent (CI), and run wherever the seeds are.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from evidra.paradigms.baselines import BASELINES
from evidra.paradigms.evidence import EVIDENCE_PROMPT
from evidra.paradigms.toolchain import ACTION_RL_PROMPT, DEFAULT_TOOLBOX, LANG2ACT_PROMPT, tool_listing

SEEDS = Path("/work/shared/seeds")
EVISRAG, LANG2ACT = "001_730cc1f7038db040.txt", "002_2ac6d46365bc2a7b.txt"

PROMPTS = {
    "evidence": (EVIDENCE_PROMPT, EVISRAG),
    **{k: (BASELINES[k].template, EVISRAG) for k in ("cot", "ddcot", "ccot", "cocot")},
    **{k: (BASELINES[k].template, LANG2ACT) for k in ("vanilla", "tot", "got")},
    "action_rl": (ACTION_RL_PROMPT, LANG2ACT),
    "lang2act": (LANG2ACT_PROMPT.replace("{tools}", tool_listing(DEFAULT_TOOLBOX)), LANG2ACT),
}


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


@pytest.mark.parametrize("name", sorted(PROMPTS))
def test_prompt_is_verbatim_from_its_seed(name: str) -> None:
    prompt, seed = PROMPTS[name]
    if not (SEEDS / seed).is_file():
        pytest.skip(f"seed {seed} not available here")
    assert _norm(prompt) in _norm((SEEDS / seed).read_text(encoding="utf-8"))

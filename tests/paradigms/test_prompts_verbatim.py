"""The prompts are the papers' text, word for word (whitespace aside).

``tests/fixtures/prompts_verbatim.json`` holds each prompt as printed in its paper (EVisRAG's
appendix prompts, Lang2Act's), whitespace-normalised; the prompt builders must reproduce them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from evidra.methods.evisrag.paradigm import EVIDENCE_PROMPT
from evidra.methods.lang2act.paradigm import ACTION_RL_PROMPT, DEFAULT_TOOLBOX, LANG2ACT_PROMPT, tool_listing
from evidra.paradigms.baselines import BASELINES

PAPERS = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "prompts_verbatim.json").read_text())

PROMPTS = {
    "evidence": EVIDENCE_PROMPT,
    **{k: BASELINES[k].template for k in ("cot", "ddcot", "ccot", "cocot", "vanilla", "tot", "got")},
    "action_rl": ACTION_RL_PROMPT,
    "lang2act": LANG2ACT_PROMPT.replace("{tools}", tool_listing(DEFAULT_TOOLBOX)),
}


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def test_every_prompt_has_its_paper_text() -> None:
    assert set(PROMPTS) == set(PAPERS)


@pytest.mark.parametrize("name", sorted(PROMPTS))
def test_prompt_is_verbatim_from_its_paper(name: str) -> None:
    assert _norm(PROMPTS[name]) == PAPERS[name]["text"], (
        f"{name} differs from {PAPERS[name]['paper']}'s prompt"
    )

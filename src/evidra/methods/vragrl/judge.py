"""VRAG-RL's answer judge (Eq. 11): one item as the only, user, message; the released rm.py text
verbatim (the recorded cases: tests/fixtures/conformance)."""

from __future__ import annotations

from collections.abc import Sequence

from evidra.rewards.judge_prompts import JUDGE_PROMPTS, JudgePrompt, Messages, fill, one_item
from evidra.rewards.judge_protocol import JudgeItem

VRAGRL_JUDGE_TEMPLATE = """You are an expert evaluation system for a question answering chatbot.

You are given the following information:
- the query
- a generated answer
- a reference answer

Your task is to evaluate the correctness of the generated answer.

## Query
{query}

## Reference Answer
{reference_answer}

## Generated Answer
{generated_answer}

Your response should be formatted as following:
<judge>True or False</judge>

If the generated answer is correct, please set "judge" to True. Otherwise, please set "judge" to False.

Please note that the generated answer may contain additional information beyond the reference answer."""


def vragrl_judge_prompt(item: JudgeItem) -> str:
    """The VRAG-RL judge prompt for one item (sent as the only, user, message).

    Substitution is single-pass, so an answer containing ``{query}`` is not re-expanded
    (the released code chains ``str.replace``).
    """
    return fill(VRAGRL_JUDGE_TEMPLATE, item)


def _vragrl(items: Sequence[JudgeItem]) -> Messages:
    return [{"role": "user", "content": vragrl_judge_prompt(one_item(items, "vragrl"))}]


JUDGE_PROMPTS.add("vragrl", JudgePrompt("vragrl", _vragrl, per_request=1))

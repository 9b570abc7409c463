"""Lang2Act's judges: the training judge (Eq. 2 / Eq. 14; a batch as system prompt + one user
message, the released toolrl.py text verbatim) as ``lang2act``, and the evaluation judge (§4
"Evaluation Metrics", Figure 16 verbatim; one item per request) as ``lang2act.eval``, what
``evidra eval --method lang2act --judge openai`` asks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from evidra.rewards.judge_prompts import JUDGE_PROMPTS, JudgePrompt, Messages, fill, one_item
from evidra.rewards.judge_protocol import JudgeItem

LANG2ACT_JUDGE_SYSTEM_PROMPT = """You are an automated evaluation system. Your ONLY task is to compare a 'Generated Answer' to a 'Reference Answer' and determine if they are equivalent.
Follow these rules STRICTLY:
1.  For EACH item you evaluate, you MUST output EXACTLY ONE `<judge>` tag.
2.  Inside the tag, write 'True' if the generated answer is correct or equivalent to the reference.
3.  Inside the tag, write 'False' if the generated answer is incorrect, incomplete, or different from the reference.
4.  Your entire response MUST consist ONLY of a series of `<judge>` tags, one for each item.
5.  ABSOLUTELY DO NOT provide any text, explanation, reasoning, markdown, or any characters outside of the `<judge>True</judge>` or `<judge>False</judge>` tags.
Example for 2 items:
<judge>True</judge>
<judge>False</judge>
"""  # noqa: E501


def lang2act_user_message(items: Sequence[Mapping[str, object] | JudgeItem]) -> str:
    """Lang2Act's batched judge user message (toolrl.py ``evaluate_chunk_worker``).

    Dict items reproduce the upstream payloads: a missing key prints ``N/A``, a None value
    prints ``None``.

    >>> print(lang2act_user_message([JudgeItem("Q?", "A", "B")]))
    Evaluate the following items and output one <judge> tag per item.
    <BLANKLINE>
    --- ITEM 1 ---
    ## Query
    Q?
    <BLANKLINE>
    ## Reference Answer
    A
    <BLANKLINE>
    ## Generated Answer
    B
    """
    parts = ["Evaluate the following items and output one <judge> tag per item.\n"]
    for j, item in enumerate(items, start=1):
        if isinstance(item, JudgeItem):
            fields: Mapping[str, object] = {
                "query": item.query,
                "reference_answer": item.reference,
                "generated_answer": item.generated,
            }
        else:
            fields = item
        parts.append(
            f"\n--- ITEM {j} ---\n"
            f"## Query\n{fields.get('query', 'N/A')}\n\n"
            f"## Reference Answer\n{fields.get('reference_answer', 'N/A')}\n\n"
            f"## Generated Answer\n{fields.get('generated_answer', 'N/A')}"
        )
    return "".join(parts)


def _lang2act(items: Sequence[JudgeItem]) -> Messages:
    return [
        {"role": "system", "content": LANG2ACT_JUDGE_SYSTEM_PROMPT},
        {"role": "user", "content": lang2act_user_message(items)},
    ]


LANG2ACT_EVAL_JUDGE_SYSTEM_PROMPT = "You are an expert evaluation system for a question answering chatbot. You will be given one evaluation item. You will see a query, a reference answer, and a generated answer. Your task is to evaluate the correctness of the generated answer. Your response **MUST** be exactly one line, formatted as `<judge>True</judge>` if the generated answer is correct, or `<judge>False</judge>` otherwise. Do not add any other text or explanations."  # noqa: E501

LANG2ACT_EVAL_JUDGE_USER_TEMPLATE = (
    "Query: {query}\n\nReference Answer: {reference_answer}\n\nGenerated Answer: {generated_answer}"
)


def lang2act_eval_user_message(item: JudgeItem) -> str:
    """Figure 16's user prompt for one item (single-pass substitution).

    >>> print(lang2act_eval_user_message(JudgeItem("Q?", "A", "B")))
    Query: Q?
    <BLANKLINE>
    Reference Answer: A
    <BLANKLINE>
    Generated Answer: B
    """
    return fill(LANG2ACT_EVAL_JUDGE_USER_TEMPLATE, item)


def _lang2act_eval(items: Sequence[JudgeItem]) -> Messages:
    item = one_item(items, "lang2act.eval")
    return [
        {"role": "system", "content": LANG2ACT_EVAL_JUDGE_SYSTEM_PROMPT},
        {"role": "user", "content": lang2act_eval_user_message(item)},
    ]


JUDGE_PROMPTS.add("lang2act", JudgePrompt("lang2act", _lang2act))
JUDGE_PROMPTS.add("lang2act.eval", JudgePrompt("lang2act.eval", _lang2act_eval, per_request=1))

"""The prompts that carry answers to an LLM judge, one registered ``JudgePrompt`` per paper.

A prompt turns a batch of ``JudgeItem``s into the chat messages of one request and says how
many items a request holds; the reply is read by ``judge_protocol.parse_verdicts`` (one
``<judge>True|False</judge>`` per item). A recipe names its prompt (``judge.prompt``); a method
names its paper's default.

* ``vragrl``: VRAG-RL Eq. 11, one item as the only (user) message; the released rm.py text.
* ``lang2act``: Lang2Act Eq. 2 / Eq. 14, a batch as system prompt + one user message; the
  released toolrl.py text.
* ``lang2act.eval``: Lang2Act's evaluation judge (§4 "Evaluation Metrics", Figure 16, verbatim),
  one item per request as system prompt + user prompt; what ``evidra eval --method lang2act
  --judge openai`` asks.
* ``cave``: CAVE's answer-correctness anchor (§3.3). The paper prints no judge prompt; its
  benchmarks (TRACER, Tunnel Vision) score short answers (a colour, yes/no, a letter, a
  component name) by exact match of the braced answer, so this prompt (our wording) asks for
  exactly that: no credit for an answer that merely contains the reference.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from evidra.core.errors import InvalidInputError
from evidra.core.registry import METHOD_PLUGINS, Registry
from evidra.rewards.judge_protocol import JudgeItem

Messages = list[dict[str, str]]


@dataclass(frozen=True)
class JudgePrompt:
    """How items reach a judge: ``messages(items)`` for one request of at most ``per_request``
    items (0: as many as the judge's ``batch_size``)."""

    name: str
    messages: Callable[[Sequence[JudgeItem]], Messages]
    per_request: int = 0


JUDGE_PROMPTS: Registry[JudgePrompt] = Registry("judge prompt", plugins=METHOD_PLUGINS)


# --- the released prompts (verbatim, see tests/fixtures/conformance/README.md) -----------------

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

_PLACEHOLDER = re.compile(r"\{(query|reference_answer|generated_answer)\}")


def vragrl_judge_prompt(item: JudgeItem) -> str:
    """The VRAG-RL judge prompt for one item (sent as the only, user, message).

    Substitution is single-pass, so an answer containing ``{query}`` is not re-expanded
    (the released code chains ``str.replace``).
    """
    values = {"query": item.query, "reference_answer": item.reference, "generated_answer": item.generated}
    return _PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), VRAGRL_JUDGE_TEMPLATE)


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


def _vragrl(items: Sequence[JudgeItem]) -> Messages:
    _one(items, "vragrl")
    return [{"role": "user", "content": vragrl_judge_prompt(items[0])}]


def _lang2act(items: Sequence[JudgeItem]) -> Messages:
    return [
        {"role": "system", "content": LANG2ACT_JUDGE_SYSTEM_PROMPT},
        {"role": "user", "content": lang2act_user_message(items)},
    ]


# --- Lang2Act's evaluation judge (Figure 16, verbatim from the paper) -------------------------

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
    values = {"query": item.query, "reference_answer": item.reference, "generated_answer": item.generated}
    return _PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), LANG2ACT_EVAL_JUDGE_USER_TEMPLATE)


def _lang2act_eval(items: Sequence[JudgeItem]) -> Messages:
    _one(items, "lang2act.eval")
    return [
        {"role": "system", "content": LANG2ACT_EVAL_JUDGE_SYSTEM_PROMPT},
        {"role": "user", "content": lang2act_eval_user_message(items[0])},
    ]


# --- CAVE (our wording; the paper prints none) -----------------------------------------------

CAVE_JUDGE_SYSTEM_PROMPT = """You grade answers to visual reasoning puzzles. Each reference answer is short: a colour, yes or no, a letter, a number, or the name of a component or object.
If the generated answer puts its final answer inside braces, for example {B}, only the text inside the first pair of braces counts; otherwise the whole generated answer counts.
The generated answer is correct only if it states exactly the reference answer, ignoring letter case and surrounding spaces. An answer that lists several candidates, hedges between options, or contains the reference inside a longer, different answer is incorrect.
Reply with exactly one tag and nothing else: <judge>True</judge> if the generated answer is correct, otherwise <judge>False</judge>."""  # noqa: E501


def _cave(items: Sequence[JudgeItem]) -> Messages:
    _one(items, "cave")
    item = items[0]
    user = (
        f"## Question\n{item.query}\n\n## Reference Answer\n{item.reference}\n\n"
        f"## Generated Answer\n{item.generated}"
    )
    return [{"role": "system", "content": CAVE_JUDGE_SYSTEM_PROMPT}, {"role": "user", "content": user}]


def _one(items: Sequence[JudgeItem], name: str) -> None:
    if len(items) != 1:
        raise InvalidInputError(f"the {name} judge prompt takes one item per request, got {len(items)}")


JUDGE_PROMPTS.add("vragrl", JudgePrompt("vragrl", _vragrl, per_request=1))
JUDGE_PROMPTS.add("lang2act", JudgePrompt("lang2act", _lang2act))
JUDGE_PROMPTS.add("lang2act.eval", JudgePrompt("lang2act.eval", _lang2act_eval, per_request=1))
JUDGE_PROMPTS.add("cave", JudgePrompt("cave", _cave, per_request=1))


def build_messages(prompt: str, items: Sequence[JudgeItem]) -> Messages:
    """OpenAI chat messages of one judge request with the registered prompt ``prompt``."""
    return JUDGE_PROMPTS.get(prompt).messages(items)

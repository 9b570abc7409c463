"""CAVE's answer-correctness judge (§3.3). The paper prints no judge prompt; its benchmarks
(TRACER, Tunnel Vision) score short answers (a colour, yes/no, a letter, a component name) by
exact match of the braced answer, so this prompt (our wording) asks for exactly that: no credit
for an answer that merely contains the reference."""

from __future__ import annotations

from collections.abc import Sequence

from evidra.rewards.judge_prompts import JUDGE_PROMPTS, JudgePrompt, Messages, one_item
from evidra.rewards.judge_protocol import JudgeItem

CAVE_JUDGE_SYSTEM_PROMPT = """You grade answers to visual reasoning puzzles. Each reference answer is short: a colour, yes or no, a letter, a number, or the name of a component or object.
If the generated answer puts its final answer inside braces, for example {B}, only the text inside the first pair of braces counts; otherwise the whole generated answer counts.
The generated answer is correct only if it states exactly the reference answer, ignoring letter case and surrounding spaces. An answer that lists several candidates, hedges between options, or contains the reference inside a longer, different answer is incorrect.
Reply with exactly one tag and nothing else: <judge>True</judge> if the generated answer is correct, otherwise <judge>False</judge>."""  # noqa: E501


def _cave(items: Sequence[JudgeItem]) -> Messages:
    item = one_item(items, "cave")
    user = (
        f"## Question\n{item.query}\n\n## Reference Answer\n{item.reference}\n\n"
        f"## Generated Answer\n{item.generated}"
    )
    return [{"role": "system", "content": CAVE_JUDGE_SYSTEM_PROMPT}, {"role": "user", "content": user}]


JUDGE_PROMPTS.add("cave", JudgePrompt("cave", _cave, per_request=1))

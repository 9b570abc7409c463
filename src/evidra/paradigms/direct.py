"""Direct answering over given pages: VRAG-RL's "Vanilla RAG" prompt (VRAG-RL App. I.1).

The pages are shown first, then the question; the model reasons in <think> and answers in
<answer>. ``evidra ask --paradigm direct`` and the prompt baseline of the papers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from evidra.core.types import ImagePart, Message, Page, Parsed, Sample, TextPart
from evidra.paradigms.paradigm import PARADIGMS, first_tag

# VRAG-RL, Appendix I.1 (Figure 11), system prompt verbatim.
VANILLA_RAG_SYSTEM = (
    "Answer the given question. You must conduct reasoning inside <think> and </think> first every "
    "time you get new information. After reasoning, you should directly provide the answer inside "
    "<answer> and </answer>, without detailed illustrations. For example, <answer> Beijing </answer>."
)


@dataclass(frozen=True)
class Direct:
    """Think-then-answer over the given page images."""

    name: str = "direct"
    system_prompt: str = VANILLA_RAG_SYSTEM

    def build_messages(self, sample: Sample, pages: Sequence[Page]) -> list[Message]:
        parts: list[ImagePart | TextPart] = [ImagePart(p.image_path, page_id=p.id) for p in pages]
        parts.append(TextPart(f"Question: {sample.question}"))
        return [Message.text("system", self.system_prompt), Message("user", tuple(parts))]

    def parse(self, text: str) -> Parsed:
        errors: list[str] = []
        think = first_tag(text, "think")
        answer = first_tag(text, "answer")
        if think is None:
            errors.append("missing <think>...</think>")
        if answer is None:
            errors.append("missing <answer>...</answer>")
        fields = {"think": think} if think is not None else {}
        return Parsed(
            text=text,
            answer=answer.strip() if answer is not None else None,
            fields=fields,
            errors=tuple(errors),
        )

    def reward_names(self) -> tuple[str, ...]:
        return ("answer", "format")


PARADIGMS.add("direct", Direct)

"""Prompt baselines of the papers: think/answer prompts that are compared without training.

* EVisRAG App. A.6: the CoT baseline prompt (Figure 11) and its adaptations of DDCOT
  (Figure 12), CCOT (Figure 13) and COCOT (Figure 14). Layout as EVisRAG's: one user turn,
  instruction with the question first, images after.
* Lang2Act App. A.13: Vanilla VLM (Figure 7), Tree-of-Thoughts (Figure 12) and
  Graph-of-Thoughts (Figure 13). Layout as Lang2Act's: system prompt, then a user turn
  "Query: ..." followed by the images.

Every template is verbatim from the seed (including the papers' typos, e.g. "your your").
All answer in ``<answer>``; the parser reads ``<think>`` and ``<answer>`` and never raises.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from evidra.core.types import ImagePart, Message, Page, Parsed, Sample, TextPart
from evidra.paradigms.paradigm import PARADIGMS, Paradigm
from evidra.rewards.boxes import extract_tag

_INSUFFICIENT = (
    "If you think there are no relevant information from the picture that can help you answer the question, "
    "answer {q}<answer>insufficient to answer</answer>{q} after your thinking."
)

# EVisRAG Figure 11 (backticks as printed in the paper).
COT_PROMPT = (
    "You are an AI assistant. I will provide a question and some images.\n\n"
    "Put your reasoning process within `<think></think>`.\n\n"
    "Please answer the questions based on the multiple pictures given to you, and put your your final "
    "answer in `<answer></answer>`.\n\n"
    "Please try to remove irrelevant content in the final answer.\n\n"
    + _INSUFFICIENT.format(q="`")
    + "\n\nQuestion: {query}"
)

# EVisRAG Figure 12.
DDCOT_PROMPT = (
    "You are an AI assistant. I will provide a query and some images. Follow these two steps:\n\n"
    "In the first step:\n"
    "Please think step-by-step about the preliminary knowledge to answer the question, deconstruct the "
    "question as completely as possible down to necessary sub-questions based on context, questions and "
    "options. Then with the aim of helping humans answer the original question, try to answer the "
    "sub-questions. The expected answering form is as follows:\n\n"
    "Sub-questions:\n\n1. <sub-question 1>\n2. <sub-question 2>\n- ...\n\n"
    "Sub-answers:\n\n1. <sub-answer 1> or 'Uncertain'\n2. <sub-answer 2> or 'Uncertain'\n- ...\n\n"
    "For a question, assume that you do not have any information about the picture, but try to answer the "
    "sub-questions and prioritize whether your general knowledge can answer it, and then consider whether "
    "the context can help. If sub-questions can be answered, then answer in as short a sentence as possible. "
    "If sub-questions cannot be determined without information in images, please formulate corresponding "
    'sub-answer into "Uncertain".\n\n'
    "In the second step:\n"
    "Put your your final answer in `<answer></answer>` based on the scene graphs. Please try to remove "
    "irrelevant content in the final answer. Like if the question is asking for yes or no, then only answer "
    "`<answer>yes</answer>` after your thinking. " + _INSUFFICIENT.format(q="`") + "\n\nQuestion: {query}"
)

_SECOND_STEP_PLAIN = (
    "Please try to remove irrelevant content in the final answer. Like if the question is asking for yes or "
    "no, then only answer <answer>yes</answer> after your thinking.\n" + _INSUFFICIENT.format(q="")
)

# EVisRAG Figure 13.
CCOT_PROMPT = (
    "You are an AI assistant. I will provide a query and some images. Follow these two steps:\n\n"
    "In the first step:\n"
    "For the provided images and its associated question, **generate a scene graph** for each images "
    "includes the following:\n\n"
    "1. Objects that are relevant to answering the question\n"
    "2. Object attributes that are relevant to answering the question\n"
    "3. Object relationships that are relevant to answering the question\n\n"
    "Then reason the answer of question based on scene graphs.\n"
    "Put these process within <think></think>.\n\n"
    "In the second step:\n"
    "Put your your final answer in <answer></answer> based on the scene graphs.\n"
    + _SECOND_STEP_PLAIN
    + "\n\nQuestion: {query}"
)

# EVisRAG Figure 14.
COCOT_PROMPT = (
    "You are an AI assistant. I will provide a query, and some images. Follow these two steps:\n\n"
    "In the first step:\n"
    "Find the **similarities and differences** of these images.\n"
    "Output separately all the same points and all the differences you find.\n"
    "Then reason the answer of question based on your findings.\n"
    "Put these process within <think></think>.\n\n"
    "In the second step:\n"
    "Put your your final answer in <answer></answer>.\n" + _SECOND_STEP_PLAIN + "\n\nQuestion: {query}"
)

# Lang2Act Figure 7.
VANILLA_PROMPT = (
    "Answer the given question based on the {num_images} image(s) provided. You must conduct reasoning "
    "inside <think> and </think> first. After reasoning, you should directly provide the answer inside "
    "<answer> and </answer>, without detailed illustrations."
)

# Lang2Act Figure 12.
TOT_PROMPT = (
    "You are an AI assistant. I will provide a query and {num_images} image(s). You must use a 'Tree of "
    "Thoughts' approach to arrive at the answer.\n\n"
    "Follow these two steps:\n\n"
    "In the first step (within the <think> tag):\n\n"
    "1. **Deconstruct the Problem:** Break down the main question into smaller, manageable sub-problems.\n"
    "2. **Generate Multiple Thoughts:** For each sub-problem, generate at least two potential lines of "
    "reasoning or 'thoughts' on how to solve it using the provided images.\n"
    "3. **Evaluate Thoughts:** Assess each thought's validity. Analyze the evidence in the images that "
    "supports or refutes each thought. State which thoughts are dead ends and which are promising.\n"
    "4. **Conclude:** Based on your evaluation, synthesize the most promising thoughts to form a final, "
    "coherent reasoning chain.\n\n"
    "In the second step (within the <answer> tag):\n\n"
    "Provide only the final, concise answer that results from your 'Tree of Thoughts' analysis. If the "
    "question asks for a 'yes' or 'no', only provide that."
)

# Lang2Act Figure 13.
GOT_PROMPT = (
    "You are an AI assistant. I will provide a query and {num_images} image(s). You must use a 'Graph of "
    "Thoughts' approach to solve the problem.\n\n"
    "Follow these two steps:\n\n"
    "In the first step (within the <think> tag):\n\n"
    "1. **Generate Initial Thoughts:** Create several initial, independent thoughts or approaches to "
    "answering the question based on the images.\n"
    "2. **Transform and Refine:** For each thought, consider how it can be improved, refined, or combined "
    "with others. Merge promising thoughts into a more powerful, synthesized line of reasoning. Discard "
    "thoughts that are incorrect.\n"
    "3. **Structure as a Graph:** Explain your final reasoning process as a graph where thoughts are nodes. "
    "Show how you progressed from initial thoughts to the final synthesized conclusion.\n\n"
    "In the second step (within the <answer> tag):\n\n"
    "Provide only the final, concise answer derived from your 'Graph of Thoughts' analysis."
)


def parse_think_answer(text: str) -> Parsed:
    """``<think>`` and ``<answer>`` blocks (first of each; an unclosed one runs to the end).

    Errors: a missing block, a repeated block, or ``<answer>`` before ``<think>``.
    """
    errors = []
    think, answer = extract_tag(text, "think"), extract_tag(text, "answer")
    for tag, value in (("think", think), ("answer", answer)):
        if value is None:
            errors.append(f"missing <{tag}>")
        elif text.count(f"<{tag}>") > 1:
            errors.append(f"<{tag}> repeated")
    if think is not None and answer is not None and text.find("<answer>") < text.find("<think>"):
        errors.append("<answer> before <think>")
    if answer is not None and "</answer>" not in text:
        errors.append("unclosed <answer> (truncated)")
    fields = {"think": think} if think is not None else {}
    return Parsed(
        text=text, answer=answer.strip() if answer is not None else None, fields=fields, errors=tuple(errors)
    )


@dataclass(frozen=True)
class InstructionBaseline:
    """EVisRAG layout: one user turn, the template (with ``{query}``) first, images after."""

    name: str
    template: str

    def build_messages(self, sample: Sample, pages: Sequence[Page]) -> list[Message]:
        parts: list[ImagePart | TextPart] = [TextPart(self.template.replace("{query}", sample.question))]
        parts.extend(ImagePart(p.image_path, page_id=p.id) for p in pages)
        return [Message("user", tuple(parts))]

    def parse(self, text: str) -> Parsed:
        return parse_think_answer(text)

    def reward_names(self) -> tuple[str, ...]:
        return ("answer",)


@dataclass(frozen=True)
class SystemBaseline:
    """Lang2Act layout: system template (with ``{num_images}``), user "Query: q" + images."""

    name: str
    template: str

    def build_messages(self, sample: Sample, pages: Sequence[Page]) -> list[Message]:
        system = self.template.replace("{num_images}", str(len(pages)))
        parts: list[ImagePart | TextPart] = [TextPart(f"Query: {sample.question}\n\nImages: ")]
        parts.extend(ImagePart(p.image_path, page_id=p.id) for p in pages)
        return [Message.text("system", system), Message("user", tuple(parts))]

    def parse(self, text: str) -> Parsed:
        return parse_think_answer(text)

    def reward_names(self) -> tuple[str, ...]:
        return ("answer",)


BASELINES: dict[str, InstructionBaseline | SystemBaseline] = {
    "cot": InstructionBaseline("cot", COT_PROMPT),
    "ddcot": InstructionBaseline("ddcot", DDCOT_PROMPT),
    "ccot": InstructionBaseline("ccot", CCOT_PROMPT),
    "cocot": InstructionBaseline("cocot", COCOT_PROMPT),
    "vanilla": SystemBaseline("vanilla", VANILLA_PROMPT),
    "tot": SystemBaseline("tot", TOT_PROMPT),
    "got": SystemBaseline("got", GOT_PROMPT),
}


def _factory(paradigm: InstructionBaseline | SystemBaseline) -> Callable[[], Paradigm]:
    return lambda: paradigm


for _name, _paradigm in BASELINES.items():
    PARADIGMS.add(_name, _factory(_paradigm))

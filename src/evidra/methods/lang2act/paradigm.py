"""Lang2Act's linguistic toolchain format: think / description with ``<tool>`` calls / answer
(Lang2Act §3, Figures 8 and 10).

* stage 1, action exploration (``toolchain.stage1``): the "Action RL" prompt (Figure 8): the
  model describes, in free text inside ``<description>``, the visual evidence it used.
* stage 2, tool-based reasoning (``toolchain``): the "Lang2Act" prompt (Figure 10) lists the
  curated toolbox; inside ``<description>`` the model writes
  ``<tool name="X" args="Image k: ...">result</tool>`` calls.

A toolbox is a JSON file: a list of ``{"name", "args", "description"}`` with an optional
``"numeric"`` flag (a tool that takes values, not ``Image k:`` regions; when the flag is absent
a tool is numeric iff its args hint names no ``Image k``). The default is the 7-tool box printed
in Figure 10. (The released scorer also accepts ``compute_difference``,
which the prompt never lists; see ``evidra.methods.lang2act.reward.ALLOWED_TOOLS_UPSTREAM``.)
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from evidra.core.errors import InvalidInputError
from evidra.core.jsonvalue import JSON
from evidra.core.tagscan import parse_digits
from evidra.core.types import Action, ImagePart, Message, Page, Parsed, Sample, Step, TextPart
from evidra.methods.lang2act.format import check_strict_format, quoted_tool_calls
from evidra.paradigms.paradigm import PARADIGMS
from evidra.rewards.boxes import extract_tag
from evidra.safeio.jsonfiles import read_json


@dataclass(frozen=True)
class Tool:
    """One linguistic tool: its name, the argument hint and what it does (Lang2Act Eq. 9)."""

    name: str
    args: str
    description: str
    numeric: bool = False  # takes values (``150, 100``), not ``Image k:`` regions: no image check


def numeric_by_hint(args: str) -> bool:
    """A tool whose args hint names no ``Image k`` takes values only (Figure 10's compute_percentage).

    >>> numeric_by_hint("part_value, total_value"), numeric_by_hint("Image k: entity")
    (True, False)
    """
    return _IMAGE_HINT.search(args) is None


_IMAGE_HINT = re.compile(r"\bImage\s+(?:k|\d+)\b", re.IGNORECASE)

# Lang2Act Figure 10, "Available Tools for <description>", verbatim.
DEFAULT_TOOLBOX: tuple[Tool, ...] = (
    Tool(
        "locate_visual_element",
        "Image k: structural hint",
        "Locate specific visual elements or regions based on structural hints.",
    ),
    Tool(
        "read_text_element",
        "Image k: locator/region",
        "Read and transcribe visible text from the located region.",
    ),
    Tool(
        "read_numeric_value",
        "Image k: data point",
        "Extract specific numeric values or counts from visual elements.",
    ),
    Tool(
        "identify_entity_attribute",
        "Image k: entity",
        "Identify specific attributes associated with entities.",
    ),
    Tool(
        "compare_values",
        "Image k: value A vs value B",
        "Compare quantitative values to determine ordering or equality.",
    ),
    Tool(
        "compute_percentage",
        "part_value, total_value",
        "Compute the percentage based on given values.",
        numeric=True,
    ),
    Tool("infer_missing_information", "Image k: data", "Infer missing information based on given data."),
)


def _strings(item: JSON, keys: Sequence[str]) -> list[str] | None:
    """The string fields ``keys`` of JSON object ``item``; None unless it has every one."""
    values = [item.get(k) for k in keys] if isinstance(item, dict) else []
    strings = [v for v in values if isinstance(v, str)]
    return strings if values and len(strings) == len(keys) else None


def load_toolbox(path: str | Path) -> tuple[Tool, ...]:
    """Read a toolbox file (JSON list of ``{"name", "args", "description"}``, optional ``numeric``)."""
    data = read_json(path, "toolbox", fix="pass a JSON list of tools (`evidra data toolbox` writes one)")
    if not isinstance(data, list) or not data:
        raise InvalidInputError(f"toolbox {str(path)!r} must be a non-empty JSON list of tools")
    tools = []
    for i, item in enumerate(data):
        fields = _strings(item, ("name", "args", "description"))
        if fields is None or not isinstance(item, dict):
            raise InvalidInputError(
                f"toolbox {str(path)!r} entry {i} must have string fields name, args, description; "
                f"got {item!r}"
            )
        name, args, description = fields
        numeric = item.get("numeric", numeric_by_hint(args))
        if not isinstance(numeric, bool):
            raise InvalidInputError(
                f"toolbox {str(path)!r} entry {i}: numeric must be true or false, got {numeric!r}"
            )
        tools.append(Tool(name, args, description, numeric))
    names = [t.name for t in tools]
    if len(set(names)) != len(names):
        raise InvalidInputError(
            f"toolbox {str(path)!r} names a tool twice: {sorted({n for n in names if names.count(n) > 1})}"
        )
    return tuple(tools)


def save_toolbox(tools: Sequence[Tool], path: str | Path) -> None:
    rows = [
        {"name": t.name, "args": t.args, "description": t.description, "numeric": t.numeric} for t in tools
    ]
    Path(path).write_text(json.dumps(rows, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


# Lang2Act Figure 8 (Action RL) system prompt, verbatim.
ACTION_RL_PROMPT = """You are a specialized AI assistant for visual question answering based on multiple provided document images. Your task is to answer the user's question by carefully analyzing all images.

Your response must strictly follow this format:

<think>...</think>

<description>...</description>

<answer>...</answer>

Guidance:

- You have exactly {num_images} image(s). Analyze each briefly in <think>, then conclude which one(s) you used.
- In <description>, describe only the visual evidence you actually used, and clearly indicate where it appears in the image.
- In <answer>, output only the final concise answer."""  # noqa: E501

# Lang2Act Figure 10 system prompt, verbatim; {tools} is the toolbox listing.
LANG2ACT_PROMPT = """You are a specialized AI assistant for visual question answering. Your task is to answer the user's question by carefully analyzing all the provided images.

Your response must strictly follow this XML format:

<think>...</think>

<description>...</description>

<answer>...</answer>

Guidance:

1. In <think>, analyze all {num_images} images and state which one(s) contain relevant evidence.
2. In <description>, focus only on the selected images and describe your reasoning process using the tools below.
3. In <answer>, provide only the final, concise answer grounded in visual evidence.

Available Tools for <description>:

{tools}"""  # noqa: E501

_IMAGE = re.compile(r"^\s*Image\s+(\d+)\s*:", re.IGNORECASE)


def tool_listing(tools: Sequence[Tool]) -> str:
    """The toolbox as Figure 10 lists it, one ``- <tool ...> description </tool>`` per line."""
    return "\n".join(f'- <tool name="{t.name}" args="{t.args}"> {t.description} </tool>' for t in tools)


def parse_toolchain(text: str) -> Parsed:
    """think/description/answer blocks; one ``Step`` per tool call (page from ``Image k:``, the
    call as ``fields['tools']`` JSON). Format problems come from the released strict check."""
    fmt = check_strict_format(text)
    errors = list(fmt.errors)
    fields = {
        t: v.strip() for t in ("think", "description", "answer") if (v := extract_tag(text, t)) is not None
    }
    steps, calls = [], []
    for call in quoted_tool_calls(fields.get("description", "")):
        name, args, body = call.name.strip(), call.args.strip(), call.body.strip()
        image = _IMAGE.match(args)
        k = parse_digits(image.group(1)) if image else None  # an over-long number is no page
        page = k - 1 if k is not None and k >= 1 else None
        steps.append(Step(body, page))
        calls.append({"name": name, "args": args, "body": body})
    if calls:
        fields["tools"] = json.dumps(calls, ensure_ascii=False)
    action = Action(calls[0]["name"], calls[0]["args"]) if calls else None
    answer = fields.get("answer")
    return Parsed(
        text=text, answer=answer, steps=tuple(steps), action=action, fields=fields, errors=tuple(errors)
    )


@dataclass(frozen=True)
class Toolchain:
    """Lang2Act prompt + parser. ``stage=1``: action exploration (Figure 8); ``stage=2``:
    tool-based reasoning with ``toolbox`` (Figure 10)."""

    name: str = "toolchain"
    stage: int = 2
    toolbox: tuple[Tool, ...] = field(default=DEFAULT_TOOLBOX)

    def system_prompt(self, num_images: int) -> str:
        if self.stage == 1:
            return ACTION_RL_PROMPT.replace("{num_images}", str(num_images))
        return LANG2ACT_PROMPT.replace("{num_images}", str(num_images)).replace(
            "{tools}", tool_listing(self.toolbox)
        )

    def build_messages(self, sample: Sample, pages: Sequence[Page]) -> list[Message]:
        # User prompt of Figures 8/10: "Query: {User Question}" then "Images: {Retrieved Images}".
        parts: list[ImagePart | TextPart] = [TextPart(f"Query: {sample.question}\n\nImages: ")]
        parts.extend(ImagePart(p.image_path, page_id=p.id) for p in pages)
        return [Message.text("system", self.system_prompt(len(pages))), Message("user", tuple(parts))]

    def parse(self, text: str) -> Parsed:
        return parse_toolchain(text)

    def reward_names(self) -> tuple[str, ...]:
        return ("answer", "format") if self.stage == 1 else ("answer", "tool")  # Lang2Act Eq. 12, A.4

    @property
    def tool_names(self) -> frozenset[str]:
        return frozenset(t.name for t in self.toolbox)

    @property
    def numeric_names(self) -> frozenset[str]:
        """The toolbox's own numeric tools: exempt from the ``Image k:`` check of Eq. 13."""
        return frozenset(t.name for t in self.toolbox if t.numeric)


def with_toolbox(paradigm: object, tools: tuple[Tool, ...]) -> Toolchain:
    """The stage-2 Lang2Act ``paradigm`` prompting with ``tools`` (a curated toolbox, as
    ``method.toolbox`` gives stage-2 training); any other paradigm lists no tools."""
    if not isinstance(paradigm, Toolchain) or paradigm.stage != 2:
        name = getattr(paradigm, "name", type(paradigm).__name__)
        raise InvalidInputError(f"paradigm {name!r} lists no tools; a toolbox is for the paradigm toolchain")
    return replace(paradigm, toolbox=tools)


def toolchain_oracle_text(sample: Sample, stage: int) -> str:
    """A correct stage-1/stage-2 answer from the gold evidence, for SFT cold start.

    Stage 1 describes the evidence in words: an answerable sample without gold evidence text would
    teach "No relevant evidence" next to an answer, so it raises ``InvalidInputError``.
    """
    if stage == 1 and sample.answerable and sample.answers and not sample.gold_evidence:
        raise InvalidInputError(
            f"sample {sample.id!r}: a stage-1 Lang2Act oracle needs the gold evidence text"
        )
    gold = sample.gold_pages[0] if sample.gold_pages else None
    k = sample.page_index(gold) + 1 if gold is not None else 1
    evidence = sample.gold_evidence.get(gold, "") if gold is not None else ""
    answer = sample.answers[0] if sample.answers and sample.answerable else "No answer"
    think = f"Image {k} contains the relevant evidence." if gold else "No image contains relevant evidence."
    if stage == 1:
        description = f"In Image {k}, the text reads: {evidence}" if evidence else "No relevant evidence."
    else:
        description = (
            f'<tool name="locate_visual_element" args="Image {k}: text region">'
            "The passage about the question.</tool>"
            f'<tool name="read_text_element" args="Image {k}: text region">{evidence or answer}</tool>'
        )
    return f"<think>{think}</think>\n<description>{description}</description>\n<answer>{answer}</answer>"


PARADIGMS.add("toolchain", Toolchain)
PARADIGMS.add("toolchain.stage1", lambda: Toolchain(name="toolchain.stage1", stage=1))

"""Lang2Act tool curation: self-explored trajectories -> tool pool -> top-K linguistic toolbox.

Lang2Act §3.1 (Eqs. 3-7) and App. A.6-A.7: trajectories of the stage-1 policy are processed
one after another; for each, a model abstracts its ``<description>`` into tool applications
with the Figure 9 prompt, which shows the *current* tool pool so existing tools are reused
before new ones are defined (``DEFINE_TOOL: name || args || desc``). The tools a trajectory
uses form ``S_i``; the pool grows by them (Eq. 5); a tool's frequency is the number of
trajectories that use it (Eq. 7); the toolbox is the top-K by frequency (Eq. 6; K = 7 in
App. A.6), with its coverage of all tool usage. The toolbox is written as JSON (a list of
``{name, args, description, numeric, count}``) that ``evidra.methods.lang2act.paradigm.load_toolbox``
reads and ``method.toolbox`` gives to the stage-2 task.

Which tools are numeric is decided here, from the curation replies: a tool is numeric when every
one of its applications passes values only (``args="150, 100"``), as the paper's arithmetic tools
(``subtract_values(val1, val2)``) do. Stage 2's toolchain validity (Eq. 13) exempts exactly those
from its ``Image k:`` check. The args hint of every other tool is written with an ``Image k:``
prefix (unless it names an image already), since stage 2 asks for ``args="Image k: ..."`` and
scores calls without it invalid; the curation replies themselves carry no image ids.

The released code has no curation step; this follows the paper. The model
is a small protocol: an OpenAI-compatible chat endpoint, a local VLM, or a scripted fake.
Model output is parsed strictly and never raises: malformed lines are counted as errors.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypedDict

from evidra.core.errors import InvalidInputError
from evidra.openai.client import DEFAULT_API_KEY_ENV, ChatClient, endpoint_config

if TYPE_CHECKING:
    from evidra.models.loading import VLM

logger = logging.getLogger(__name__)

# Lang2Act Figure 9, system prompt verbatim; {tool_pool_text} is the current pool.
CURATION_SYSTEM = """You are the Lead Architect of a Document Visual Reasoning System. Deconstruct questions into atomic, structure-aware cognitive operations.

CORE PHILOSOPHY
- 1) Structure Awareness: Tools must reflect layout (rows, columns, axes).
- 2) Atomic Data Extraction: Locate the region first, then extract data.
- 3) Analytical Calculation: Define precise math tools (subtract, rank_values).

CURRENT TOOL POOL
{tool_pool_text}

GUIDELINES: DESIGNING DOCUMENT TOOLS
- Tables/Grids: Navigate rows/columns (e.g., locate_table_row, read_cell_value).
- Charts/Graphs: Map visuals to values (e.g., map_bar_to_axis).
- Reasoning: Define specific logic tools for calculation/comparison.

COGNITIVE CAPABILITY SPECTRUM
- * Layout: (locate_row/col, find_title, find_legend, intersect_regions)
- * Data: (read_text, read_numeric, extract_key_value_pair)
- * Chart: (trace_line_trend, get_bar_height, map_color_to_category)
- * Math & Logic: (compute_pct, subtract_values, find_max, count_rows)
- * Verify: (verify_signature_presence, check_checkbox_status)

OUTPUT FORMAT (MANDATORY)
1. New Definitions: DEFINE_TOOL: name || args || desc
2. Applications: <tool name="..." args="...">reasoning</tool>
3. End: END_OF_TOOLS

EXAMPLE (Structure & Math)
DESC: Found 'Q3 Revenue', read value, compared to 'Q2', calculated growth.
OUTPUT:
DEFINE_TOOL: subtract_values || val1, val2 || Calculate difference.
<tool name="locate_table_row" args="row 'Q3 Revenue'">Row 4</tool>
<tool name="read_cell_value" args="Row 4, col 'Amount'">$150M</tool>
<tool name="subtract_values" args="150, 100">50</tool>
END_OF_TOOLS"""  # noqa: E501
CURATION_USER = "Analyze the reasoning steps.\nDESCRIPTION: {description}\nOUTPUT:"  # Figure 9 user prompt
EMPTY_POOL = "(empty)"
END_MARKER = "END_OF_TOOLS"

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_APPLICATION = re.compile(r'<tool\s+name="([^"]*)"\s+args="([^"]*)"\s*>(.*?)</tool>', re.DOTALL)
_DESCRIPTION = re.compile(r"<description>(.*?)</description>", re.DOTALL)
# one value of a numeric call: a number, optionally signed, with a currency sign, % or a unit suffix
_VALUE = re.compile(r"^[-+]?[$€£]?\d[\d,]*(?:\.\d+)?\s*(?:%|[A-Za-z]{1,3})?$")
_IMAGE_HINT = re.compile(r"\bImage\s+(?:k|\d+)\b", re.IGNORECASE)


def values_only(args: str) -> bool:
    """True when every comma-separated field of ``args`` is a value (``150, 100``, ``$150M, 12%``).

    >>> values_only("150, 100"), values_only("$150M, 12.5%"), values_only("row 'Q3 Revenue'")
    (True, True, False)
    """
    fields = [f.strip() for f in args.split(",")]
    return bool(args.strip()) and all(_VALUE.match(f) for f in fields)


@dataclass(frozen=True)
class PoolTool:
    """A tool of the pool: the standardized triplet of Lang2Act §3.1."""

    name: str
    args: str
    description: str


@dataclass(frozen=True)
class Application:
    name: str
    args: str
    result: str


@dataclass(frozen=True)
class CurationOutput:
    """One parsed curation reply: new definitions, tool applications, whether it ended."""

    definitions: tuple[PoolTool, ...] = ()
    applications: tuple[Application, ...] = ()
    ended: bool = False
    errors: tuple[str, ...] = ()


def parse_curation(text: str) -> CurationOutput:
    """Parse ``DEFINE_TOOL`` lines and ``<tool>`` applications up to ``END_OF_TOOLS``; never raises.

    A definition needs exactly three non-empty ``||``-separated fields and an identifier name.
    """
    body, marker, _ = text.partition(END_MARKER)
    definitions: list[PoolTool] = []
    errors: list[str] = []
    for line in body.splitlines():
        line = line.strip()
        if not line.startswith("DEFINE_TOOL"):
            continue
        head, colon, rest = line.partition(":")
        fields = [f.strip() for f in rest.split("||")]
        if head.strip() != "DEFINE_TOOL" or not colon or len(fields) != 3 or not all(fields):
            errors.append(f"malformed definition {line[:80]!r}: expected 'DEFINE_TOOL: name || args || desc'")
        elif not _NAME.match(fields[0]):
            errors.append(f"tool name {fields[0][:40]!r} is not an identifier")
        else:
            definitions.append(PoolTool(*fields))
    applications = tuple(
        Application(m.group(1).strip(), m.group(2).strip(), m.group(3).strip())
        for m in _APPLICATION.finditer(body)
    )
    if not marker:
        errors.append(f"missing {END_MARKER}")
    return CurationOutput(tuple(definitions), applications, bool(marker), tuple(errors))


class CurationModel(Protocol):
    """Answers one (system, user) chat turn with text."""

    def complete(self, system: str, user: str) -> str: ...


def pool_text(pool: Sequence[PoolTool]) -> str:
    """The pool as the prompt shows it, in the definition grammar (one tool per line)."""
    return "\n".join(f"- {t.name} || {t.args} || {t.description}" for t in pool) or EMPTY_POOL


def description_of(trajectory: str) -> str:
    """The ``<description>`` block of a stage-1 trajectory (the whole text when there is none)."""
    match = _DESCRIPTION.search(trajectory)
    return (match.group(1) if match else trajectory).strip()


@dataclass
class ToolPool:
    """The global pool of Eq. 5 with the frequencies of Eq. 7, in order of first use."""

    tools: dict[str, PoolTool] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    errors: int = 0
    processed: int = 0
    # per tool: applications seen, and how many of them passed values only (numeric tools)
    applied: dict[str, int] = field(default_factory=dict)
    applied_values: dict[str, int] = field(default_factory=dict)

    def update(self, output: CurationOutput) -> set[str]:
        """Add one trajectory's utilized tools ``S_i`` (reuse before create); returns ``S_i``."""
        self.processed += 1
        self.errors += len(output.errors)
        new = {d.name: d for d in output.definitions if d.name not in self.tools}  # existing ones are reused
        used: set[str] = set()
        for app in output.applications:
            if app.name in self.tools or app.name in new:
                used.add(app.name)
                self.applied[app.name] = self.applied.get(app.name, 0) + 1
                self.applied_values[app.name] = self.applied_values.get(app.name, 0) + values_only(app.args)
            else:
                self.errors += 1
                logger.debug("application of undefined tool %r ignored", app.name)
        for name in sorted(used, key=lambda n: [a.name for a in output.applications].index(n)):
            if name not in self.tools:
                self.tools[name] = new[name]
            self.counts[name] = self.counts.get(name, 0) + 1
        return used

    def top_k(self, k: int) -> list[tuple[PoolTool, int]]:
        """Eq. 6: the K most frequent tools (ties keep the order of first use)."""
        if k < 1:
            raise InvalidInputError(f"toolbox size K must be >= 1, got {k}")
        order = {name: i for i, name in enumerate(self.tools)}
        ranked = sorted(self.tools, key=lambda n: (-self.counts.get(n, 0), order[n]))
        return [(self.tools[n], self.counts.get(n, 0)) for n in ranked[:k]]

    def numeric(self, name: str) -> bool:
        """Every application of ``name`` passed values only (and there was one)."""
        return self.applied.get(name, 0) > 0 and self.applied_values.get(name, 0) == self.applied[name]

    def coverage(self, k: int) -> float:
        """Share of all tool usage (sum of Eq. 7 frequencies) covered by the top-K tools."""
        total = sum(self.counts.values())
        return sum(c for _, c in self.top_k(k)) / total if total else 0.0


def stage2_hint(args: str, numeric: bool) -> str:
    """The args hint stage 2 shows: an ``Image k:`` prefix for tools that read an image.

    >>> stage2_hint("row, col", False), stage2_hint("val1, val2", True)
    ('Image k: row, col', 'val1, val2')
    """
    return args if numeric or _IMAGE_HINT.search(args) else f"Image k: {args}"


class ToolRow(TypedDict):
    """One tool of a curated toolbox as its JSON file lists it (``Toolbox.rows``)."""

    name: str
    args: str
    description: str
    numeric: bool
    count: int


@dataclass(frozen=True)
class Toolbox:
    tools: tuple[tuple[PoolTool, int], ...]
    coverage: float
    pool_size: int
    trajectories: int
    errors: int
    numeric: frozenset[str] = frozenset()  # the tools whose applications all passed values only

    def rows(self) -> list[ToolRow]:
        """``{name, args, description, numeric, count}`` per tool, args as stage 2 shows them."""
        rows: list[ToolRow] = []
        for tool, count in self.tools:
            numeric = tool.name in self.numeric
            hint = stage2_hint(tool.args, numeric)
            rows.append(
                {
                    "name": tool.name,
                    "args": hint,
                    "description": tool.description,
                    "numeric": numeric,
                    "count": count,
                }
            )
        return rows

    def write(self, path: str | Path) -> Path:
        """The JSON list of ``rows()`` (what ``load_toolbox`` reads)."""
        rows = self.rows()
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(rows, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        return out


def curate(
    trajectories: Iterable[str],
    model: CurationModel,
    k: int = 7,
    pool: ToolPool | None = None,
    progress: Callable[[int], None] | None = None,
) -> Toolbox:
    """Process trajectories in order (Eq. 4-5), then keep the top-K tools (Eq. 6-7);
    ``progress(1)`` after each trajectory."""
    pool = pool if pool is not None else ToolPool()
    for trajectory in trajectories:
        system = CURATION_SYSTEM.replace("{tool_pool_text}", pool_text(list(pool.tools.values())))
        reply = model.complete(system, CURATION_USER.format(description=description_of(trajectory)))
        pool.update(parse_curation(reply))
        if progress is not None:
            progress(1)
    top = tuple(pool.top_k(k)) if pool.tools else ()
    numeric = frozenset(t.name for t, _ in top if pool.numeric(t.name))
    coverage = pool.coverage(k) if pool.tools else 0.0
    return Toolbox(top, coverage, len(pool.tools), pool.processed, pool.errors, numeric)


@dataclass(frozen=True)
class OpenAIChatModel:
    """An OpenAI-compatible ``/chat/completions`` endpoint (vLLM, SGLang, a hosted API), through
    ``evidra.openai.client``: the key from ``api_key`` or the variable ``api_key_env``, ``retries``
    extra attempts on 429/5xx/connection errors/timeouts within ``max_wait_s`` of waiting, and
    ``timeout`` seconds for each attempt as a whole."""

    base_url: str
    model: str
    api_key: str | None = field(default=None, repr=False)  # None: read api_key_env; "": send none
    max_tokens: int = 1024
    temperature: float = 0.0
    timeout: float = 120.0
    api_key_env: str = DEFAULT_API_KEY_ENV
    retries: int = 2
    max_wait_s: float = 120.0
    client: ChatClient = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        config = endpoint_config(
            self.base_url,
            self.model,
            api_key=self.api_key,
            api_key_env=self.api_key_env,
            timeout_s=self.timeout,
            retries=self.retries,
            max_wait_s=self.max_wait_s,
        )
        object.__setattr__(self, "client", ChatClient(config))

    def complete(self, system: str, user: str) -> str:
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        return self.client.chat(messages, max_tokens=self.max_tokens, temperature=self.temperature).text


@dataclass
class LocalVLMModel:
    """A local policy (``evidra.models.loading.VLM``) answering greedily, text only."""

    vlm: VLM
    max_new_tokens: int = 1024

    def complete(self, system: str, user: str) -> str:
        from evidra.core.types import Message
        from evidra.models.generation import SamplingParams, generate

        chat = [Message.text("system", system), Message.text("user", user)]
        params = SamplingParams(max_new_tokens=self.max_new_tokens, temperature=0.0)
        return generate(self.vlm, [chat], params)[0].text

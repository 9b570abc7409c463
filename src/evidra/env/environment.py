"""The environment protocol: one episode of a paradigm, turn by turn.

``reset(sample)`` returns the prompt messages; ``step(text)`` takes the policy's text of one
turn and returns the observation to insert (user messages with text and images) or ``done``.
A single-turn paradigm is an environment that ends after one step, so one rollout loop serves
every paradigm.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypedDict, runtime_checkable

from evidra.core.jsonfields import (
    get_bool,
    get_int,
    get_list,
    get_opt_bool,
    get_opt_float,
    get_opt_str,
    get_str,
)
from evidra.core.jsonvalue import JSON, json_kind, need_int
from evidra.core.registry import Registry
from evidra.core.types import Message, Parsed, Sample

if TYPE_CHECKING:
    from evidra.core.box_formats import BoxFormat
    from evidra.retrieval.interfaces import Hit


@dataclass(frozen=True)
class StepInfo:
    """What one environment step did: read by the trainer's metrics, the rewards that look at
    actions (VRAG-RL's retrieved pages, CAVE's zoom ratios) and the evaluation's process scores.

    ``action`` is the action's name (``answer``, ``search``, ``bbox``, ``zoom``, a tool's name,
    ``invalid`` for a turn that named no valid action, ``none`` when the turn limit ended the episode
    on a turn without one). Regions (``crop``) are page pixels.
    """

    action: str = "answer"
    invalid: bool = False
    reason: str = ""  # why the action was invalid
    answer: str | None = None
    query: str | None = None  # a search's query
    page_id: str | None = None  # the page a search inserted or a crop/zoom cut (None: no result)
    crop: tuple[int, int, int, int] | None = None  # (x1, y1, x2, y2) in page pixels
    area_ratio: float | None = None  # crop area / page area
    hit: bool | None = None  # a lookup found its key (key-value environments)
    retrieved: tuple[str, ...] = ()  # page ids inserted so far, first insertion first
    candidates: tuple[str, ...] = ()  # the pages one search showed to choose from, best first
    invalid_count: int = 0  # invalid turns so far
    turn: int = 0  # policy turns so far, this one included
    turn_limit: bool = False  # the episode ended because it reached its turn limit

    def to_json(self) -> dict[str, object]:
        """The fields that differ from their defaults, JSON-ready (tuples as lists)."""
        out: dict[str, object] = {"action": self.action}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value != f.default:
                out[f.name] = list(value) if isinstance(value, tuple) else value
        return out

    @classmethod
    def from_json(cls, row: Mapping[str, JSON]) -> StepInfo:
        """The inverse of ``to_json``; keys it does not know (older rows) are ignored, a field of
        another type is a ``TypeError`` naming it."""
        return cls(
            action=get_str(row, "action", "answer"),
            invalid=get_bool(row, "invalid", False),
            reason=get_str(row, "reason", ""),
            answer=get_opt_str(row, "answer"),
            query=get_opt_str(row, "query"),
            page_id=get_opt_str(row, "page_id"),
            crop=_crop(row.get("crop")),
            area_ratio=get_opt_float(row, "area_ratio"),
            hit=get_opt_bool(row, "hit"),
            retrieved=tuple(str(v) for v in get_list(row, "retrieved")),
            candidates=tuple(str(v) for v in get_list(row, "candidates")),
            invalid_count=get_int(row, "invalid_count", 0),
            turn=get_int(row, "turn", 0),
            turn_limit=get_bool(row, "turn_limit", False),
        )


def _crop(value: JSON) -> tuple[int, int, int, int] | None:
    """A stored ``crop``: four whole page pixels, or None."""
    if value is None:
        return None
    if not isinstance(value, list) or len(value) != 4:
        raise TypeError(f"'crop' is {json_kind(value)}, not [x1, y1, x2, y2]")
    x1, y1, x2, y2 = (need_int(v, "a crop coordinate") for v in value)
    return x1, y1, x2, y2


class StepFields(TypedDict, total=False):
    """The ``StepInfo`` fields one step sets; the environment adds its counts (``invalid_count``,
    ``turn``) and, where it keeps them, the pages ``retrieved`` so far."""

    action: str
    invalid: bool
    reason: str
    answer: str | None
    query: str | None
    page_id: str | None
    crop: tuple[int, int, int, int] | None
    area_ratio: float | None
    hit: bool | None
    candidates: tuple[str, ...]
    turn_limit: bool


@dataclass(frozen=True)
class StepResult:
    """What the environment answers to one policy turn."""

    observation: tuple[Message, ...] = ()  # inserted as the next user turn(s); empty when done
    done: bool = False
    info: StepInfo = StepInfo()
    # the environment's parse of this turn's text (its paradigm's ``parse``), kept so that scoring
    # reuses it instead of parsing the text again; None when the environment parsed nothing
    parsed: Parsed | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "observation", tuple(self.observation))


class Environment(Protocol):
    """One episode at a time; create one instance per episode (they keep state)."""

    @property
    def stop(self) -> tuple[str, ...]:
        """Strings that end a policy turn besides end-of-turn (e.g. ``</search>``)."""
        ...

    def reset(self, sample: Sample) -> list[Message]: ...

    def step(self, text: str) -> StepResult: ...


@runtime_checkable
class ReadsBoxes(Protocol):
    """An environment whose actions carry a box (a crop, a zoom): it reads them by ``box_format``
    (``evidra.core.box_formats``), the answering model's convention; None reads them in the
    environment's own frame, as evidra's trained policies write them."""

    box_format: BoxFormat | None


class Searcher(Protocol):
    """What the environment needs of an index (BM25Retriever, engine retrievers, SearchClient)."""

    def search(
        self, queries: Sequence[str], k: int = 10, exclude: Sequence[Collection[str]] | None = None
    ) -> list[list[Hit]]: ...


@dataclass(frozen=True)
class SearchRequest:
    """A search an environment is about to run for the policy's text of this turn: the rollout
    loop gathers the requests of every active episode and asks each index once per turn."""

    searcher: Searcher  # the index (anything with ``search(queries, k, exclude)``)
    query: str
    k: int
    exclude: frozenset[str]


@runtime_checkable
class BatchedSearch(Protocol):
    """An environment whose searches the rollout loop may run in a batch for it."""

    def pending_search(self, text: str) -> SearchRequest | None:
        """The search ``step(text)`` would run, or None."""
        ...

    def prefetch(self, hits: list[Hit]) -> None:
        """The hits of that search, used by the next ``step`` instead of asking the index."""
        ...


ENVIRONMENTS: Registry[Any] = Registry("environment")


def play_script(env: Environment, sample: Sample, turns: list[str]) -> list[Message]:
    """The conversation of ``turns`` played through ``env`` (an oracle trajectory for SFT):
    the prompt, then each assistant turn followed by the observation it produced."""
    messages = env.reset(sample)
    for text in turns:
        result = env.step(text)
        messages.append(Message.text("assistant", text))
        messages.extend(result.observation)
    return messages  # name -> factory(**options) -> Environment

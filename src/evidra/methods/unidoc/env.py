"""UniDoc-RL's environment: the search environment with a ``<select>`` action between search and crop.

Per turn (the released rollout): a ``<search>`` shows the best ``candidates`` pages (3) that no
earlier search of the episode had selected, numbered from 0, and selects the first by default;
``<select>i</select>`` keeps candidate i of the last search and shows it again alone; a ``<bbox>``
crops a region of the selected page (the pixel frame of the last image shown, as
``evidra.env.search``); ``<answer>`` ends the episode. The search's candidates are recorded in
``StepInfo.candidates``, a selection in ``StepInfo.page_id`` of a ``select`` step and a crop in
``StepInfo.crop`` (page pixels): UniDoc-RL's dense rewards read them
(``evidra.methods.unidoc.reward.action_log``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from evidra.core.geometry import Displayed
from evidra.core.types import Message, Part, Sample, TextPart
from evidra.env.environment import SearchRequest, StepResult
from evidra.env.search import NO_RESULT_MESSAGE, SearchEnv
from evidra.methods.unidoc.paradigm import UniDocAgent, parse_select
from evidra.paradigms.paradigm import Paradigm

if TYPE_CHECKING:
    from evidra.retrieval.interfaces import Hit

INVALID_MESSAGE = (
    "Your previous action is invalid: {reason}. Think inside <think> and </think>, then write exactly "
    "one action: a search query inside <search> and </search>, the number of one retrieved image inside "
    "<select> and </select>, a region of the last image inside <bbox>[x1, y1, x2, y2]</bbox>, or the "
    "final answer inside <answer> and </answer>. Please try again."
)
CANDIDATES_HEADER = "The list of retrieved images is as follows:"  # the released observation texts
SELECTED_HEADER = "The selected image is:"


@dataclass
class SelectSearchEnv(SearchEnv):
    """One UniDoc-RL episode over an index; ``candidates`` pages per search (released: 3)."""

    paradigm: Paradigm = field(default_factory=UniDocAgent)
    stop: tuple[str, ...] = ("</search>", "</select>", "</bbox>", "</answer>")
    candidates: int = 3
    selected: list[str] = field(default_factory=list, init=False)  # one page per search, best first
    _round: list[str] = field(default_factory=list, init=False, repr=False)  # last search's candidates
    _displays: dict[str, Displayed] = field(default_factory=dict, init=False, repr=False)

    def reset(self, sample: Sample) -> list[Message]:
        self.selected, self._round, self._displays = [], [], {}
        return super().reset(sample)

    def pending_search(self, text: str) -> SearchRequest | None:
        """The base environment's batched search, excluding the pages already selected."""
        request = super().pending_search(text)
        return None if request is None else replace(request, exclude=frozenset(self.selected))

    def _step(self, text: str) -> StepResult:
        parsed = self._parse(text)
        action = parsed.action
        if action is not None and action.name == "select" and self.turns + 1 < self.max_turns:
            self.turns += 1
            return self._select(action.argument)
        return super()._step(text)

    def _hits(self, query: str) -> list[Hit]:
        if self._prefetched is not None:  # the rollout loop ran this search in its batch
            hits, self._prefetched = self._prefetched, None
            return hits
        return self.searcher.search([query], k=self.top_k, exclude=[set(self.selected)])[0]

    def _search(self, query: str) -> StepResult:
        picks: list[tuple[str, str]] = []
        for hit in self._hits(query):
            page = self.pages.get(hit.page_id)
            path = page.image_path if page is not None else hit.image_path
            known = {pid for pid, _ in picks}
            if path and hit.page_id not in self.selected and hit.page_id not in known:
                picks.append((hit.page_id, path))
            if len(picks) == self.candidates:
                break
        if not picks:
            reply = Message.text("user", NO_RESULT_MESSAGE.format(query=query))
            return self._result((reply,), False, action="search", query=query, page_id=None)
        parts: list[Part] = [TextPart(CANDIDATES_HEADER)]
        for index, (page_id, path) in enumerate(picks):
            shown = self._show(page_id, path)  # records the page as retrieved, sets self._shown
            assert self._shown is not None
            self._displays[page_id] = self._shown
            parts.extend((TextPart(f"\nImage {index}:"), *shown.content))
        self._round = [pid for pid, _ in picks]
        self.selected.append(self._round[0])  # released: the first candidate until a <select>
        self._shown = self._last_page = self._displays[self._round[0]]
        return self._result(
            (Message("user", tuple(parts)),),
            False,
            action="search",
            query=query,
            page_id=self._round[0],
            candidates=tuple(self._round),
        )

    def _select(self, argument: str) -> StepResult:
        if not self._round:
            return self._invalid("there are no retrieved images to select from yet; search first", "select")
        index = parse_select(argument)
        if index is None or index >= len(self._round):
            last = len(self._round) - 1
            reason = f"<select> takes an image number from 0 to {last}, got {argument[:20]!r}"
            return self._invalid(reason, "select")
        page_id = self._round[index]
        self.selected[-1] = page_id
        shown = self._show(page_id, self._displays[page_id].image_path)
        obs = Message("user", (TextPart(SELECTED_HEADER), *shown.content))
        return self._result((obs,), False, action="select", page_id=page_id)

    def _invalid(self, reason: str, action: str = "invalid") -> StepResult:
        self.invalid += 1
        reply = Message.text("user", INVALID_MESSAGE.format(reason=reason))
        return self._result((reply,), False, action=action, invalid=True, reason=reason)

"""UniDoc-RL's environment: search shows candidates, select keeps one, bbox crops the kept page."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from evidra.core.types import ImagePart, Page, Sample, TextPart
from evidra.env.environment import StepResult
from evidra.env.search import SearchEnv
from evidra.methods.unidoc.env import SelectSearchEnv
from evidra.methods.unidoc.reward import SearchRound, action_log
from evidra.retrieval.interfaces import Hit


class FixedRanking:
    """Every query ranks the pages in one order, minus the excluded ones (as an index would)."""

    def __init__(self, order: Sequence[str]) -> None:
        self.order = list(order)
        self.calls: list[tuple[str, frozenset[str]]] = []

    def search(
        self, queries: Sequence[str], k: int = 10, exclude: Sequence[Collection[str]] | None = None
    ) -> list[list[Hit]]:
        out = []
        for i, query in enumerate(queries):
            skip = frozenset(exclude[i]) if exclude else frozenset()
            self.calls.append((query, skip))
            ranked = [p for p in self.order if p not in skip][:k]
            out.append([Hit(p, 1.0 / (1 + r)) for r, p in enumerate(ranked)])
        return out


SAMPLE = Sample(id="s", question="q?", answers=("a",), gold_pages=("p1",))


def _play(env: SelectSearchEnv, texts: Sequence[str]) -> list[StepResult]:
    env.reset(SAMPLE)
    return [env.step(t) for t in texts]


def test_search_shows_three_numbered_candidates_and_keeps_the_first(pages: dict[str, Page]) -> None:
    env = SelectSearchEnv(FixedRanking(["p0", "p1", "p2", "p3"]), pages)
    (step,) = _play(env, ["<think>t</think><search>q</search>"])
    assert step.info.candidates == ("p0", "p1", "p2") and step.info.page_id == "p0"
    parts = step.observation[0].content
    texts = [p.text for p in parts if isinstance(p, TextPart)]
    assert texts == ["The list of retrieved images is as follows:", "\nImage 0:", "\nImage 1:", "\nImage 2:"]
    assert [p.page_id for p in parts if isinstance(p, ImagePart)] == ["p0", "p1", "p2"]
    assert env.selected == ["p0"] and step.info.retrieved == ("p0", "p1", "p2")


def test_select_crop_and_the_next_search(pages: dict[str, Page]) -> None:
    ranking = FixedRanking(["p0", "p1", "p2", "p3"])
    env = SelectSearchEnv(ranking, pages)
    steps = _play(
        env,
        [
            "<think>t</think><search>q</search>",
            "<think>t</think><select>1</select>",
            "<think>t</think><bbox>[0, 0, 100, 100]</bbox>",
            "<think>t</think><search>again</search>",
            "<think>t</think><answer>a</answer>",
        ],
    )
    select, crop, again, answer = steps[1:]
    assert select.info.action == "select" and select.info.page_id == "p1" and not select.info.invalid
    assert [type(p) for p in select.observation[0].content] == [TextPart, ImagePart]
    assert crop.info.action == "bbox" and crop.info.page_id == "p1" and crop.info.crop is not None
    # the kept page is not shown again; the other candidates are
    assert again.info.candidates == ("p0", "p2", "p3") and ranking.calls[-1] == ("again", frozenset({"p1"}))
    assert answer.done and env.selected == ["p1", "p0"]
    infos = [s.info for s in steps]
    assert action_log(infos)[0] == SearchRound(("p0", "p1", "p2"), "p1", (action_log(infos)[0].boxes[0],))
    assert len(action_log(infos)) == 2 and action_log(infos)[1].selected == "p0"


def test_invalid_selections_are_answered_and_counted(pages: dict[str, Page]) -> None:
    env = SelectSearchEnv(FixedRanking(["p0", "p1"]), pages)
    first, search, out_of_range, word = _play(
        env,
        [
            "<think>t</think><select>0</select>",  # nothing to select yet
            "<think>t</think><search>q</search>",
            "<think>t</think><select>2</select>",  # two candidates: 0 or 1
            "<think>t</think><select>two</select>",
        ],
    )
    assert first.info.invalid and "search first" in first.info.reason
    assert search.info.candidates == ("p0", "p1")
    assert out_of_range.info.invalid and "from 0 to 1" in out_of_range.info.reason
    assert word.info.invalid and word.info.invalid_count == 3 and env.selected == ["p0"]
    assert "<select>" in out_of_range.observation[0].plain_text


def test_a_search_with_nothing_new_shows_no_candidates(pages: dict[str, Page]) -> None:
    env = SelectSearchEnv(FixedRanking(["p0"]), pages)
    _, second = _play(env, ["<think>t</think><search>q</search>", "<think>t</think><search>q</search>"])
    assert second.info.candidates == () and second.info.page_id is None and not second.done


def test_batched_search_excludes_the_selected_pages(pages: dict[str, Page]) -> None:
    env = SelectSearchEnv(FixedRanking(["p0", "p1", "p2", "p3"]), pages)
    _play(env, ["<think>t</think><search>q</search>"])
    request = env.pending_search("<think>t</think><search>more</search>")
    assert request is not None and request.exclude == frozenset({"p0"}) and request.query == "more"


def test_the_plain_search_environment_still_refuses_select(pages: dict[str, Page]) -> None:
    env = SearchEnv(FixedRanking(["p0"]), pages)
    env.reset(SAMPLE)
    env.step("<think>t</think><search>q</search>")
    step = env.step("<think>t</think><select>0</select>")
    assert step.info.invalid and "</select>" not in env.stop


def test_candidates_survive_the_prediction_cache() -> None:
    from evidra.env.environment import StepInfo

    info = StepInfo("search", query="q", page_id="p0", candidates=("p0", "p1"), retrieved=("p0", "p1"))
    row = info.to_json()
    assert row["candidates"] == ["p0", "p1"] and StepInfo.from_json(row) == info
    assert "candidates" not in StepInfo("answer").to_json()  # defaults are not written

"""The page budget: each question shown its top-k pages (Lang2Act: the top 3 per query)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from pathlib import Path

import pytest

from evidra.core.config import load_config
from evidra.core.errors import ConfigError, InvalidInputError
from evidra.core.types import Box, EvidenceBox, Page, Sample
from evidra.data.pages import top_pages
from evidra.methods import build_task, check_config
from evidra.retrieval.interfaces import Hit
from evidra.rl.run_config import DataConfig, RLConfig
from evidra.rl.tasks import task_samples


def _page(pid: str) -> Page:
    return Page(pid, f"/img/{pid}.png", 10, 10)


class _Ranking:
    """A searcher that returns a fixed ranking per question (and records its calls)."""

    def __init__(self, rankings: dict[str, list[str]]) -> None:
        self.rankings = rankings
        self.calls: list[tuple[list[str], int]] = []

    def search(
        self, queries: Sequence[str], k: int = 10, exclude: Sequence[Collection[str]] | None = None
    ) -> list[list[Hit]]:
        self.calls.append((list(queries), k))
        return [[Hit(p, 1.0 / (r + 1)) for r, p in enumerate(self.rankings[q])][:k] for q in queries]


A = Sample(
    "a",
    "alpha?",
    ("1",),
    pages=(_page("a1"), _page("a2"), _page("a3"), _page("a4")),
    gold_pages=("a1", "a4"),
    gold_boxes=(EvidenceBox("a4", Box(0, 0, 1, 1)),),
    gold_evidence={"a1": "one", "a4": "four"},
)
B = Sample("b", "beta?", ("2",), pages=(_page("b1"), _page("b2")), gold_pages=("b2",))


def test_without_a_retriever_the_samples_own_order() -> None:
    a, b = top_pages([A, B], 3)
    assert [p.id for p in a.pages] == ["a1", "a2", "a3"] and a.gold_pages == ("a1",)
    assert a.gold_boxes == () and dict(a.gold_evidence) == {"a1": "one"}  # a4 is cut with its box
    assert a.extras["retrieved"] == ["a1", "a2", "a3"]
    assert [p.id for p in b.pages] == ["b1", "b2"] and b.gold_pages == ("b2",)  # fewer than k: all


def test_a_retriever_ranks_every_page_of_the_samples() -> None:
    """The corpus is every page of the given samples: b's page can be a's context; a page the
    corpus lacks (x9) is skipped, a repeated hit counts once."""
    searcher = _Ranking({"alpha?": ["x9", "a4", "b2", "a4", "a2", "a1"], "beta?": ["b2", "a3"]})
    a, b = top_pages([A, B], 3, searcher)
    assert [p.id for p in a.pages] == ["a4", "b2", "a2"]
    assert (
        a.gold_pages == ("a4",) and a.gold_boxes == A.gold_boxes and dict(a.gold_evidence) == {"a4": "four"}
    )
    assert [p.id for p in b.pages] == ["b2", "a3"]
    assert searcher.calls == [(["alpha?", "beta?"], 12)]  # one call for the batch, 4 x k deep


def test_bad_budget_and_a_retriever_that_knows_none_of_the_pages() -> None:
    with pytest.raises(InvalidInputError, match=">= 1 page per question"):
        top_pages([A], 0)
    with pytest.raises(InvalidInputError, match="none of the samples' pages for 'a'"):
        top_pages([A], 2, _Ranking({"alpha?": ["x1", "x2"]}))


def test_lang2act_trains_on_its_top_pages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """method.pages_per_question cuts the pages; with method.index the index ranks them."""
    import evidra.retrieval.lifecycle.index_folder as engine

    method = dict(name="lang2act", stage=2)
    cfg = DataConfig(size=4, path=str(tmp_path))
    full = task_samples(build_task(method), cfg)
    assert max(len(s.pages) for s in full) == 2
    one = task_samples(build_task({**method, "pages_per_question": 1}), cfg)
    assert [s.pages for s in one] == [s.pages[:1] for s in full]
    last = {
        s.question: [p.id for p in reversed(s.pages)] for s in full
    }  # the index ranks the last page first
    opened: list[str] = []

    def fake_open(where: str, required: Collection[str] = ()) -> _Ranking:
        opened.append(where)
        return _Ranking(last)

    monkeypatch.setattr(engine, "open_searcher", fake_open)
    ranked = task_samples(build_task({**method, "pages_per_question": 1, "index": "idx/"}), cfg)
    assert opened == ["idx/"] and [s.pages for s in ranked] == [s.pages[-1:] for s in full]


def test_page_budget_is_checked_before_loading(tmp_path: Path) -> None:
    def cfg(*over: str) -> RLConfig:
        return load_config(RLConfig, None, ["model.path=x", f"run.output_dir={tmp_path}", *over])

    check_config(cfg("method.name=lang2act", "method.stage=1", "method.pages_per_question=3"))
    with pytest.raises(ConfigError, match=r"method\.pages_per_question is no option of method 'evisrag'"):
        check_config(cfg("method.name=evisrag", "method.pages_per_question=3"))
    with pytest.raises(ConfigError, match="must be >= 0"):
        check_config(cfg("method.name=lang2act", "method.stage=1", "method.pages_per_question=-1"))

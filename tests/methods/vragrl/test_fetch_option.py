"""``method.fetch`` turns on ALDEN's ``<fetch>N</fetch>`` in VRAG-RL's search environment."""

from __future__ import annotations

from collections.abc import Callable

from evidra.core.types import Page, Sample
from evidra.methods import METHODS
from evidra.paradigms.search_agent import FETCH_PROMPT


def _env(pages: tuple[Page, ...], section: dict[str, object]) -> object:
    task = METHODS.get("vragrl").task(section)
    sample = Sample(
        id="s", question="What grew?", answers=("revenue",), gold_pages=(pages[0].id,), pages=pages
    )
    return task.make_env(sample)


def test_the_option_opens_fetch_and_its_prompt(page_factory: Callable[..., Page]) -> None:
    pages = (page_factory(), page_factory("doc-p0002"))
    plain, fetching = _env(pages, {}), _env(pages, {"fetch": True})
    assert not plain.fetch and "</fetch>" not in plain.stop  # type: ignore[attr-defined]
    assert fetching.fetch and "</fetch>" in fetching.stop  # type: ignore[attr-defined]
    sample = Sample(id="s", question="What grew?", pages=pages)
    assert FETCH_PROMPT in fetching.reset(sample)[0].plain_text  # type: ignore[attr-defined]
    assert FETCH_PROMPT not in plain.reset(sample)[0].plain_text  # type: ignore[attr-defined]

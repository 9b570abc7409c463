"""ALDEN's fetch action in the search environment: pages by number, bad numbers as data."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from evidra.core.types import ImagePart, Page, Sample
from evidra.env.search import MAX_PAGE_DIGITS, FetchError, SearchEnv, bm25_searcher, page_at
from evidra.paradigms.search_agent import FETCH_PROMPT, VRAGRL_SYSTEM, SearchAgent, parse_action, with_fetch

SAMPLE = Sample(id="s", question="How did revenue grow in 2021?", answers=("10%",), gold_pages=("pA",))


def _env(pages: dict[str, Page], **kw: object) -> SearchEnv:
    return SearchEnv(bm25_searcher(pages.values()), pages, fetch=True, max_turns=20, **kw)  # type: ignore[arg-type]


def _run(env: SearchEnv, texts: Sequence[str]) -> list:
    env.reset(SAMPLE)
    return [env.step(t) for t in texts]


def test_prompt_and_stop_mention_fetch_only_when_enabled(pages: dict[str, Page]) -> None:
    plain = SearchEnv(bm25_searcher(pages.values()), pages)
    assert plain.reset(SAMPLE)[0].plain_text == VRAGRL_SYSTEM and "</fetch>" not in plain.stop
    env = _env(pages)
    assert env.reset(SAMPLE)[0].plain_text == f"{VRAGRL_SYSTEM} {FETCH_PROMPT}"
    assert "</fetch>" in env.stop and env.stop.count("</fetch>") == 1
    assert with_fetch(with_fetch(SearchAgent())).actions == ("search", "bbox", "answer", "fetch")


def test_fetch_shows_the_numbered_page_and_records_it(pages: dict[str, Page]) -> None:
    # pages in order pA, pB, pC: page 2 is pB
    fetched, again, crop = _run(
        _env(pages),
        [
            "<think>the table is on page 2</think><fetch> 2 </fetch>",
            "<think>once more</think><fetch>2</fetch>",
            "<think>zoom</think><bbox>[100, 200, 300, 400]</bbox>",
        ],
    )
    assert fetched.info.action == "fetch" and fetched.info.page_id == "pB" and not fetched.info.invalid
    image = fetched.observation[0].content[0]
    assert isinstance(image, ImagePart) and image.page_id == "pB" and image.image.size == (448, 896)
    assert again.info.retrieved == ("pB",)  # a page is recorded once, at its first insertion
    assert crop.info.action == "bbox" and crop.info.page_id == "pB"


def test_fetch_then_search_skips_the_fetched_page(pages: dict[str, Page]) -> None:
    fetched, searched = _run(
        _env(pages), ["<think>a</think><fetch>1</fetch>", "<think>b</think><search>revenue</search>"]
    )
    assert fetched.info.page_id == "pA" and searched.info.page_id == "pC"
    assert searched.info.retrieved == ("pA", "pC")


@pytest.mark.parametrize(
    ("argument", "message"),
    [
        ("0", "page 0 is out of range: this document has pages 1 to 3"),
        ("4", "page 4 is out of range: this document has pages 1 to 3"),
        ("-1", "page -1 is out of range"),
        ("9" * 5000, "page 9999999999... is out of range"),  # past int()'s digit limit: never converted
        ("1234567", "page 1234567... is out of range"),  # more than MAX_PAGE_DIGITS digits
        ("three", "<fetch> takes one page number such as 3, got 'three'"),
        ("2.0", "got '2.0'"),
        ("1e3", "got '1e3'"),
        ("[1]", "got '[1]'"),
    ],
)
def test_bad_page_numbers_are_one_line_invalid_actions(
    pages: dict[str, Page], argument: str, message: str
) -> None:
    (step,) = _run(_env(pages), [f"<think>x</think><fetch>{argument}</fetch>"])
    assert step.info.action == "fetch" and step.info.invalid and step.info.invalid_count == 1
    assert message in step.info.reason and not step.done
    text = step.observation[0].plain_text
    assert "\n" not in text and message in text and "<fetch>" in text and len(text) < 600


def test_empty_fetch_and_fetch_while_disabled(pages: dict[str, Page]) -> None:
    (empty,) = _run(_env(pages), ["<think>x</think><fetch>  </fetch>"])
    assert empty.info.invalid and empty.info.reason == "the page number is empty"
    plain = SearchEnv(bm25_searcher(pages.values()), pages, max_turns=5)
    (off,) = _run(plain, ["<think>x</think><fetch>1</fetch>"])  # the default parser sees no action
    assert (
        off.info.invalid and off.info.action == "invalid" and "<fetch>" not in off.observation[0].plain_text
    )


def test_page_at_is_total() -> None:
    assert page_at("3", ["a", "b", "c"]) == "c"
    assert page_at("\u0662", ["a", "b"]) == "b"  # digits of other scripts are numbers too
    assert isinstance(page_at("1", []), FetchError)
    assert MAX_PAGE_DIGITS == 6


def test_parse_reads_fetch_only_when_asked() -> None:
    assert parse_action("<fetch>3</fetch><search>q</search>").action.name == "search"  # type: ignore[union-attr]
    parsed = parse_action("<fetch>3</fetch><search>q</search>", ("search", "bbox", "answer", "fetch"))
    assert parsed.action is not None and parsed.action.name == "fetch" and parsed.action.argument == "3"
    assert "empty <fetch> page number" in parse_action("<fetch></fetch>", ("fetch",)).errors


FRAGMENTS = [
    "<fetch>",
    "</fetch>",
    "<search>",
    "</search>",
    "<think>",
    "</think>",
    "<bbox>",
    "</bbox>",
    "<answer>",
    "</answer>",
    "9" * 5000,
    "-",
    "+",
    "0",
    "3",
    "\u0661",
    "\uff11",
    "NaN",
    "1e999",
    " ",
    "\n",
    "\x00",
    "[",
    "]",
    "\ud7ff",
    "page",
    "<fetch>2</fetch>",
    "<fetch>" + "1" * 400,
]


def test_fetch_environment_is_total_on_hostile_text(pages: dict[str, Page]) -> None:
    rng = random.Random(0)
    env = _env(pages)
    env.reset(SAMPLE)
    seen = set()
    for _ in range(300):
        text = "".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(1, 12)))
        step = env.step(text)  # never raises
        assert step.info.action in ("fetch", "search", "bbox", "answer", "invalid")
        seen.add((step.info.action, step.info.invalid))
        if step.info.action == "fetch":  # a fetch's message quotes at most 40 characters of the text
            assert all(len(m.plain_text) < 1000 for m in step.observation)
        if step.done or env.turns >= env.max_turns - 1:
            env.reset(SAMPLE)
    assert {("fetch", True), ("fetch", False)} <= seen  # both valid and invalid fetches were exercised

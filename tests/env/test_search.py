"""VRAG-RL search environment episodes driven by scripted policies over a real BM25 index."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from evidra.core.errors import InvalidInputError
from evidra.core.types import ImagePart, Page, Sample
from evidra.env import ENVIRONMENTS
from evidra.env.search import SearchEnv, bm25_searcher
from evidra.paradigms.react import ReAct
from evidra.paradigms.search_agent import VRAGRL_SYSTEM

SAMPLE = Sample(id="s", question="How did revenue grow in 2021?", answers=("10%",), gold_pages=("pA",))


def _run(env: SearchEnv, texts: Sequence[str]) -> list:
    env.reset(SAMPLE)
    return [env.step(t) for t in texts]


def test_prompt_is_the_paper_prompt(pages: dict[str, Page]) -> None:
    env = SearchEnv(bm25_searcher(pages.values()), pages)
    messages = env.reset(SAMPLE)
    assert messages[0].plain_text == VRAGRL_SYSTEM
    assert messages[1].plain_text == "Query: How did revenue grow in 2021?"
    assert ENVIRONMENTS.get("search") is SearchEnv


def test_search_crop_answer_episode(pages: dict[str, Page]) -> None:
    env = SearchEnv(bm25_searcher(pages.values()), pages)
    steps = _run(
        env,
        [
            "<think>look</think><search>revenue 2021</search>",
            "<think>again</think><search>revenue</search>",  # pA already seen: the next best unseen page
            "<think>zoom</think><bbox>[100, 200, 300, 400]</bbox>",
            "<think>done</think><answer>10%</answer>",
        ],
    )
    first, second, crop, answer = steps
    assert first.info.page_id == "pA" and not first.done
    image = first.observation[0].content[0]
    assert isinstance(image, ImagePart) and image.page_id == "pA"
    assert image.image.size == (448, 896)  # process_image: 1000 x 2000 shrunk by sqrt(401408 / 2e6)
    assert second.info.page_id == "pC" and second.info.retrieved == ("pA", "pC")
    # the box is in the 448 x 896 frame of pC: x scale 1000 / 448, y scale 2000 / 896
    assert crop.info.crop == (
        int(100 * 1000 / 448),
        int(200 * 2000 / 896),
        int(300 * 1000 / 448),
        int(400 * 2000 / 896),
    )
    assert crop.info.page_id == "pC"
    assert crop.info.area_ratio == pytest.approx((669 - 223) * (892 - 446) / 2e6)
    assert answer.done and answer.info.answer == "10%" and answer.info.retrieved == ("pA", "pC")
    assert env.invalid == 0


def test_invalid_actions_are_counted_and_explained(pages: dict[str, Page]) -> None:
    env = SearchEnv(bm25_searcher(pages.values()), pages, max_turns=10)
    steps = _run(
        env,
        [
            "I think the answer is 10%",  # no action
            "<think>x</think><bbox>[0, 0, 10, 10]</bbox>",  # nothing to crop yet
            "<think>x</think><search>revenue</search>",
            "<think>x</think><bbox>[50, 50, 10, 10]</bbox>",  # inverted
            "<think>x</think><bbox>[-1, 0, 10, 10]</bbox>",  # negative (upstream validate_bbox_action)
            "<think>x</think><search>   </search>",
            "<think>x</think><search>zebra giraffe</search>",  # no hit: not invalid
        ],
    )
    assert [s.info.invalid for s in steps] == [True, True, False, True, True, True, False]
    assert steps[-1].info.invalid_count == 5 and env.invalid == 5
    assert "Your previous action is invalid" in steps[0].observation[0].plain_text
    assert "no image to crop" in steps[1].observation[0].plain_text
    assert "No new page" in steps[-1].observation[0].plain_text
    assert not any(s.done for s in steps)


def test_turn_limit_ends_the_episode(pages: dict[str, Page]) -> None:
    env = SearchEnv(bm25_searcher(pages.values()), pages, max_turns=2)
    steps = _run(env, ["<think>a</think><search>revenue</search>", "<think>b</think><search>chart</search>"])
    assert not steps[0].done
    assert steps[1].done and steps[1].info.turn_limit and steps[1].observation == ()


def test_all_pages_seen_and_react_has_no_bbox(pages: dict[str, Page]) -> None:
    env = SearchEnv(bm25_searcher(pages.values()), pages, paradigm=ReAct(), max_turns=10)
    steps = _run(env, ["<search>revenue</search>"] * 3 + ["<bbox>[0, 0, 5, 5]</bbox>"])
    assert [s.info.page_id for s in steps[:3]] == ["pA", "pC", None]  # pB has no 'revenue'
    assert steps[3].info.invalid  # ReAct has no crop action


def test_crop_of_crop_paper_vs_upstream(pages: dict[str, Page]) -> None:
    texts = [
        "<search>revenue 2021</search>",
        "<bbox>[0, 0, 448, 448]</bbox>",
        "<bbox>[0, 0, 100, 100]</bbox>",
    ]
    paper = _run(SearchEnv(bm25_searcher(pages.values()), pages), texts)
    upstream = _run(SearchEnv(bm25_searcher(pages.values()), pages, crop_mode="upstream"), texts)
    assert paper[1].info.crop == upstream[1].info.crop == (0, 0, 1000, 1000)
    # the crop (1000 x 1000) is shown at 633 x 633; paper mode zooms into it
    assert paper[2].info.crop == (0, 0, int(100 * 1000 / 633), int(100 * 1000 / 633))
    # upstream scales by the crop's display size but maps onto the whole page
    assert upstream[2].info.crop == (0, 0, int(100 * 1000 / 633), int(100 * 2000 / 633))


def test_bm25_needs_a_text_layer(pages: dict[str, Page]) -> None:
    bare = [Page(p.id, p.image_path, p.width, p.height) for p in pages.values()]
    with pytest.raises(InvalidInputError):
        bm25_searcher(bare)


def test_search_client_backend_behind_the_same_protocol(pages: dict[str, Page]) -> None:
    from evidra.retrieval.service.client import SearchClient
    from evidra.retrieval.service.server import SearchService

    local = _run(SearchEnv(bm25_searcher(pages.values()), pages), ["<search>revenue</search>"] * 2)
    service = SearchService(bm25_searcher(pages.values()), n_pages=len(pages))
    with service.running() as url, SearchClient(url, timeout=10) as client:
        remote = _run(SearchEnv(client, pages), ["<search>revenue</search>"] * 2)
    assert [s.info.page_id for s in remote] == [s.info.page_id for s in local] == ["pA", "pC"]


def test_a_search_service_cannot_choose_which_local_file_an_episode_opens(
    pages: dict[str, Page], tmp_path: object
) -> None:
    from PIL import Image

    from evidra.retrieval.interfaces import Hit
    from evidra.retrieval.service.client import SearchClient
    from evidra.retrieval.service.server import SearchService

    secret = Image.new("RGB", (64, 64), "red")
    outside = f"{tmp_path}/private-photo.png"  # a local image the service names as its page
    secret.save(outside)

    class Hostile:
        def search(self, queries: Sequence[str], k: int = 10, exclude: object = None) -> list[list[Hit]]:
            return [[Hit("not-in-corpus", 9.0, outside)] for _ in queries]

    opened: list[str] = []
    with SearchService(Hostile()).running() as url, SearchClient(url, timeout=10) as client:
        (hits,) = client.search(["anything"], k=1)
        assert hits[0].page_id == "not-in-corpus" and hits[0].image_path == ""  # the path is dropped
        env = SearchEnv(client, pages)
        import evidra.env.search as search_module

        real_open = search_module._open
        search_module._open = lambda path: opened.append(path) or real_open(path)  # type: ignore[assignment]
        try:
            env.reset(SAMPLE)
            step = env.step("<think>look</think><search>anything</search>")
        finally:
            search_module._open = real_open  # type: ignore[assignment]
    assert opened == [] and not step.done
    assert "not in this corpus" in step.observation[0].plain_text


def test_a_crop_too_thin_for_the_processor_is_invalid(pages: dict[str, Page]) -> None:
    env = SearchEnv(bm25_searcher(pages.values()), pages, max_turns=10)
    search, thin = _run(env, ["<search>revenue 2021</search>", "<bbox>[10, 0, 11, 800]</bbox>"])
    assert search.info.page_id == "pA"
    assert thin.info.invalid and not thin.done
    assert "is too thin: its sides differ" in thin.observation[0].plain_text

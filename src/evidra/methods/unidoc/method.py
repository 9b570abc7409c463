"""UniDoc-RL: search a document corpus, select one of the retrieved pages, crop it, answer.

The corpus, its samples and its search engine are VRAG-RL's (``evidra.methods.vragrl.method``:
synthetic PDFs ingested into a page store with a text layer and searched with in-process BM25, or
``method.index`` / ``Resources.searcher``); the environment is ``SelectSearchEnv``, the search
environment with UniDoc-RL's ``<select>`` action. The reward (``reward.py``) scores each action
type from the environment's step infos, which is why training scores whole episodes
(``Task.score_episodes``) and evaluation calls ``Task.score_steps``. The answer judge is offline
``RuleJudge`` unless ``method.judge`` names a model (the released judge is Qwen2.5-72B-Instruct
with VRAG-RL's prompt). The oracle conversation (for SFT) searches the question, selects the gold
page among the candidates, crops its evidence region, writes what it read and answers.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

from evidra.core.errors import ConfigError
from evidra.core.geometry import Displayed, page_box_to_displayed
from evidra.core.types import Message, Page, Sample
from evidra.env.environment import play_script
from evidra.env.search import Searcher, bm25_searcher
from evidra.methods.method import METHODS, Method, Resources, merged_weights, method_judge
from evidra.methods.unidoc.env import SelectSearchEnv
from evidra.methods.unidoc.paradigm import parse_unidoc
from evidra.methods.unidoc.reward import WEIGHTS, UniDocReward
from evidra.methods.vragrl.method import Corpora
from evidra.retrieval.interfaces import Hit
from evidra.rewards.judge import RuleJudge
from evidra.rewards.judge_config import JudgeConfig
from evidra.rewards.reward import RewardResult
from evidra.rl.runs.model_card import Paper
from evidra.rl.tasks import Task

if TYPE_CHECKING:
    from evidra.models.loading import VLM
    from evidra.rewards.judge_protocol import Judge
    from evidra.rollout import Episode

MAX_TURNS = 11  # released max_turns=10 action turns, then one final answer turn


class SelectCorpora(Corpora):
    """VRAG-RL's corpora with UniDoc-RL's environment (``candidates`` pages per search)."""

    def __init__(self, searcher: Searcher | None = None, index: str = "", candidates: int = 3) -> None:
        super().__init__(searcher, index)
        self.candidates = candidates

    def make_env(self, sample: Sample) -> SelectSearchEnv:
        searcher: Searcher
        if sample.corpus is None:
            searcher, pages = bm25_searcher(sample.pages), {p.id: p for p in sample.pages}
        else:
            searcher, pages = self._store(sample.corpus)
        return SelectSearchEnv(searcher, pages, max_turns=MAX_TURNS, candidates=self.candidates)


def score_episodes(vlm: VLM, episodes: Sequence[Episode], reward: UniDocReward) -> list[RewardResult]:
    """The dense reward per episode, its actions read from the environment's infos; one judge call."""
    batch = [(ep.final_parsed(parse_unidoc), ep.sample, ep.trajectory, tuple(ep.infos)) for ep in episodes]
    return reward.score_batch(batch)


class _Ranked:
    """A searcher that returns the given pages in order (the oracle's search result)."""

    def __init__(self, pages: Sequence[Page]) -> None:
        self.pages = list(pages)

    def search(
        self, queries: Sequence[str], k: int = 10, exclude: Sequence[Collection[str]] | None = None
    ) -> list[list[Hit]]:
        hits = [Hit(p.id, 1.0 / (1 + i), p.image_path) for i, p in enumerate(self.pages[:k])]
        return [list(hits) for _ in queries]


def oracle(sample: Sample, candidates: int = 3) -> list[Message]:
    """Search the question; among the candidates (other pages first, the gold page last) select
    the gold page; crop its evidence region (displayed frame); write what it shows; answer."""
    gold = next(p for p in sample.pages if p.id == sample.gold_pages[0])
    others = [p for p in sample.pages if p.id != gold.id][: candidates - 1]
    ranked = [*others, gold]
    pages = {p.id: p for p in ranked}
    env = SelectSearchEnv(_Ranked(ranked), pages, max_turns=MAX_TURNS, candidates=candidates)
    evidence = sample.evidence_box
    box = evidence.box if evidence is not None and evidence.page_id == gold.id else sample.gold_boxes[0].box
    coords = page_box_to_displayed(box, Displayed.page(gold.id, gold.image_path, gold.size))
    answer, index = sample.answers[0], len(others)
    turns = [
        f"<think>I need to find: {sample.question}</think><search>{sample.question}</search>",
        f"<think>Image {index} is the page that answers the question.</think><select>{index}</select>",
        f"<think>The answer is in this region, too small to read.</think><bbox>{json.dumps(coords)}</bbox>",
        f"<think>The magnified region shows the answer.</think><information>The region reads {answer}."
        f"</information><answer>{answer}</answer>",
    ]
    return play_script(env, sample, turns)


def make_unidoc_task(judge: Judge | None, weights: Mapping[str, float], corpora: SelectCorpora) -> Task:
    """The UniDoc-RL task whose answer reward asks ``judge`` and whose components weigh ``weights``."""
    reward = UniDocReward(judge, weights)
    return Task(
        name="unidoc",
        samples=corpora.samples,
        make_env=corpora.make_env,
        parse=parse_unidoc,
        reward=reward,
        oracle=partial(oracle, candidates=corpora.candidates),
        score_episodes=partial(score_episodes, reward=reward),
        score_steps=reward.score_steps,
        from_benchmark=corpora.from_benchmark,
        from_synthetic=corpora.from_synthetic,
    )


@dataclass(frozen=True)
class UnidocOptions:
    """The ``method:`` section of a UniDoc-RL recipe."""

    # component (answer, retrieval, select, crop, format) -> weight over the released 0.6, 0.1 x 4
    weights: Mapping[str, float] = field(default_factory=dict)
    judge: JudgeConfig = field(default_factory=JudgeConfig)  # the answer judge; default: the offline rule
    index: str = ""  # the search engine: an index directory or a serve-index URL; empty: BM25
    candidates: int = 3  # pages a search shows to select from (released: 3)


def build_unidoc(cfg: UnidocOptions, resources: Resources) -> Task:
    """UniDoc-RL's task with its judge, weights, candidates per search and search engine."""
    if not 1 <= cfg.candidates <= 10:
        raise ConfigError(f"method.candidates must be 1 to 10 pages per search, got {cfg.candidates}")
    weights = merged_weights("unidoc", WEIGHTS, cfg.weights)
    judge = method_judge(cfg.judge, resources, UNIDOC.judge_prompt, RuleJudge())
    return make_unidoc_task(judge, weights, SelectCorpora(resources.searcher, cfg.index, cfg.candidates))


UNIDOC = Method(
    name="unidoc",
    options=UnidocOptions,
    build=build_unidoc,
    paradigm="unidoc",
    summary="UniDoc-RL: search, select a page, crop, answer; a dense reward per action type",
    judge_prompt="vragrl",  # the released evaluator's prompt is VRAG-RL's, word for word
    stages=("filter",),
    citation=Paper(
        "UniDoc-RL: Coarse-to-Fine Visual RAG with Hierarchical Actions and Dense Rewards",
        "Wang et al.",
        2026,
        url="https://arxiv.org/abs/2604.14967",
        code="https://github.com/deepglint/UniDoc-RL",
    ),
)
METHODS.add("unidoc", UNIDOC)

"""VRAG-RL: search a synthetic document corpus, crop and zoom, answer (VRAG-RL §2).

Samples are questions about synthetic PDFs (``evidra.data.synth.documents``), ingested into a
page store so every page has its text layer; the search engine is an in-process BM25 index
over all pages of that corpus (the paper's retriever is ColPali, App. B; any ``Searcher`` fits ``SearchEnv``,
e.g. ``SearchClient`` to ``evidra serve-index``, through ``method.index`` or
``Resources.searcher``). The reward is VRAG-RL Eq. 12, by default with the released code's
weights (0.2 NDCG of the retrieved pages, 0.7 judge, 0.1 pattern; the paper gives none but
gamma; ``method.weights``, which ``configs/vragrl.yaml`` sets to gamma = 0 after SFT) and the
judge of ``method.judge`` (default: the offline ``RuleJudge``; the recipe asks the paper's
Qwen2.5-7B-Instruct on an OpenAI-compatible endpoint, the rule judge its fallback); the retrieved
page ids come from the environment's infos, which is why this
task scores whole episodes (``Task.score_episodes``). ``method.reward_mode=upstream`` scores as the
released reward manager: the whole decoded episode is checked, and without both a ``<search>``
and an ``<answer>`` in it the reward is 0. The oracle conversation (for SFT) searches the
question, is shown the gold page, crops the evidence region and answers.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from evidra.core.errors import ConfigError, InvalidInputError
from evidra.core.geometry import Displayed, page_box_to_displayed
from evidra.core.types import Message, Page, Sample
from evidra.env.environment import play_script
from evidra.env.search import SearchEnv, Searcher, bm25_searcher
from evidra.methods._benchmark import has_gold_pages, images_on_disk, is_answerable
from evidra.methods._synth import private_cache_dir
from evidra.methods.method import METHODS, Method, Resources, merged_weights, method_judge
from evidra.methods.vragrl.construction import vragrl_filter
from evidra.methods.vragrl.reward import WEIGHTS, VragRLReward, VragRLRules, check_eq12, vragrl_reward
from evidra.paradigms.search_agent import SearchAgent
from evidra.retrieval.interfaces import Hit
from evidra.retrieval.lifecycle.index_folder import open_searcher
from evidra.rewards.judge import RuleJudge
from evidra.rewards.judge_config import JudgeConfig
from evidra.rewards.judge_protocol import Judge
from evidra.rewards.reward import RewardResult
from evidra.rl.run_config import DataConfig
from evidra.rl.runs.model_card import Paper
from evidra.rl.tasks import Task, usable

if TYPE_CHECKING:
    from evidra.data.synth.documents import SynthCorpus
    from evidra.models.loading import VLM
    from evidra.rollout import Episode

logger = logging.getLogger(__name__)


DPI = 72  # small synthetic pages (612 x 792): fast on CPU, still legible to a real VLM
MAX_TURNS = 5  # the released rollout: 4 action turns plus a final answer turn


def corpus_dir(cfg: DataConfig, name: str) -> Path:
    """``data.path``, or a per-seed folder of the user's private cache, holding the synthetic
    corpus and its store."""
    base = Path(cfg.path) if cfg.path else private_cache_dir() / "recipes"
    return base / f"{name}-seed{cfg.seed}-n{cfg.size}"


def synth_once(root: Path, build: Callable[[Path], SynthCorpus]) -> SynthCorpus:
    """``build(root)`` once per folder, across processes; later calls read its JSON (nothing in it
    can run; one that does not parse is rebuilt with a warning)."""
    from evidra.data.synth.corpus_json import build_once, corpus_from_json, corpus_to_json

    return build_once(
        root / "corpus.json", lambda: build(root), corpus_to_json, corpus_from_json, "corpus cache"
    )


def _build(root: Path, n_docs: int, seed: int) -> SynthCorpus:
    from evidra.corpus import ingest
    from evidra.data.synth.documents import generate_documents

    corpus = generate_documents(root / "synth", n_docs=n_docs, seed=seed, dpi=DPI)
    ingest(corpus.docs_dir, root / "store", dpi=DPI)
    return corpus


def _has_text_layer(sample: Sample) -> str | None:
    return None if any(p.words for p in sample.pages) else "without a text layer to search (BM25)"


class Corpora:
    """The search corpora of one task: key (a Sample's ``corpus``) -> (searcher, pages by id).

    Filled when the samples are made (every rank of a distributed run builds its own task, so
    holds its own); a page store named by a sample but not made here is indexed with BM25 on
    first use. ``searcher`` (``Resources.searcher``) or ``index`` (``method.index``) replaces
    BM25 for the task's own corpus and for benchmark pages.
    """

    def __init__(self, searcher: Searcher | None = None, index: str = "", fetch: bool = False) -> None:
        self.searcher, self.index, self.fetch = searcher, index, fetch
        self.known: dict[str, tuple[Searcher, dict[str, Page]]] = {}

    def _given(self, gold: set[str]) -> Searcher | None:
        if self.searcher is not None:
            return self.searcher
        return open_searcher(self.index, gold) if self.index else None

    def samples(self, cfg: DataConfig) -> list[Sample]:
        from evidra.corpus.store import PageStore

        root = corpus_dir(cfg, "vragrl")
        corpus = synth_once(root, lambda r: _build(r, max(2, cfg.size // 2 + 1), cfg.seed))
        store = root / "store"
        with PageStore.open(store) as opened:
            pages = {p.id: p for p in opened.pages()}
        samples = [s for s in corpus.samples(pages, dataset="synth.vragrl") if s.answerable]
        samples = [replace(s, corpus=str(store)) for s in samples[: cfg.size]]
        given = self._given({g for s in samples for g in s.gold_pages})
        if given is not None:  # search the store with that engine (e.g. ColQwen2) instead of BM25
            self.known[str(store)] = (given, pages)
        return samples

    def from_benchmark(self, samples: list[Sample], cfg: DataConfig) -> list[Sample]:
        """Benchmark questions searched over the pages of every loaded sample (VRAG-RL's corpus).

        The NDCG term needs gold pages. The pages are searched with the given engine or
        ``method.index`` (an index built over the same loader's pages, or a service) or, when they
        carry a text layer, with BM25.
        """
        pages = {p.id: p for s in samples for p in s.pages}
        kept = usable(samples, (is_answerable, has_gold_pages, images_on_disk), f"vragrl on {cfg.source}")
        searcher = self._given({g for s in kept for g in s.gold_pages})
        if searcher is None and any(p.words for p in pages.values()):
            searcher = bm25_searcher(pages.values())
        if searcher is None:
            raise ConfigError(
                f"the pages of {cfg.source} have no text layer, so BM25 would find nothing: build an index "
                f"(evidra index build --dataset {cfg.source} --data {cfg.path} --out DIR --encoder colqwen2 "
                "--model CKPT) and pass method.index=DIR, or a serve-index URL"
            )
        key = f"{cfg.source}:{Path(cfg.path).resolve()}"
        self.known[key] = (searcher, pages)
        return [replace(s, corpus=key) for s in kept]

    def from_synthetic(self, samples: list[Sample], cfg: DataConfig) -> list[Sample]:
        """Generated samples (``data.synthetic``, e.g. ``[reading]``), each searched over its own
        pages with BM25 on their text layer: a one-page sample's search always finds its page, so
        the retrieval reward pays for searching at all and the answer reward for reading."""
        checks = (is_answerable, has_gold_pages, images_on_disk, _has_text_layer)
        return usable(samples, checks, f"search on {'+'.join(cfg.synthetic)}")

    def _store(self, store: str) -> tuple[Searcher, dict[str, Page]]:
        """The BM25 index and pages of one page store, built once."""
        from evidra.corpus.store import PageStore

        if store not in self.known:
            with PageStore.open(store) as opened:
                pages = {p.id: p for p in opened.pages()}
            self.known[store] = (bm25_searcher(pages.values()), pages)
        return self.known[store]

    def make_env(self, sample: Sample) -> SearchEnv:
        searcher: Searcher
        if sample.corpus is None:
            searcher, pages = bm25_searcher(sample.pages), {p.id: p for p in sample.pages}
        else:
            searcher, pages = self._store(sample.corpus)
        return SearchEnv(searcher, pages, max_turns=MAX_TURNS, fetch=self.fetch)


def _scored_text(vlm: VLM, ep: Episode, rules: VragRLRules) -> str:
    """What the reward reads: the last policy turn (paper; the reward also reads every policy turn
    from the trajectory), or the whole decoded response with its observation turns (rules that read
    ``whole_response``, as the released reward does, so text the environment inserts counts too)."""
    if rules.whole_response:
        return str(vlm.tokenizer.decode(list(ep.trajectory.token_ids), skip_special_tokens=False))
    return ep.trajectory.texts[-1] if ep.trajectory.texts else ""


def score_episodes(vlm: VLM, episodes: Sequence[Episode], reward: VragRLReward) -> list[RewardResult]:
    """VRAG-RL Eq. 12 per episode, the retrieved pages read from the environment's infos."""
    batch = []
    for ep in episodes:
        retrieved = ep.infos[-1].retrieved if ep.infos else ()
        text = _scored_text(vlm, ep, reward.rules)
        parsed = SearchAgent().parse(text)
        batch.append((dataclasses.replace(parsed, text=text, retrieved=retrieved), ep.sample, ep.trajectory))
    return reward.score_batch(batch)


class _Fixed:
    """A searcher that always returns one page (the oracle is shown the gold page)."""

    def __init__(self, page: Page) -> None:
        self.page = page

    def search(
        self, queries: Sequence[str], k: int = 10, exclude: Sequence[Collection[str]] | None = None
    ) -> list[list[Hit]]:
        return [[Hit(self.page.id, 1.0, self.page.image_path)] for _ in queries]


def oracle(sample: Sample) -> list[Message]:
    """Search the question, see the gold page, crop its evidence region (displayed frame), answer."""
    gold = next(p for p in sample.pages if p.id == sample.gold_pages[0])
    env = SearchEnv(_Fixed(gold), {gold.id: gold}, max_turns=MAX_TURNS)
    evidence = sample.evidence_box
    box = evidence.box if evidence is not None and evidence.page_id == gold.id else sample.gold_boxes[0].box
    coords = page_box_to_displayed(box, Displayed.page(gold.id, gold.image_path, gold.size))
    turns = [
        f"<think>I need to find: {sample.question}</think><search>{sample.question}</search>",
        f"<think>The answer is in this region of the page.</think><bbox>{json.dumps(coords)}</bbox>",
        f"<think>The zoomed region shows the answer.</think><answer>{sample.answers[0]}</answer>",
    ]
    return play_script(env, sample, turns)


def make_vragrl_task(
    judge: Judge,
    mode: str = "paper",
    weights: Mapping[str, float] | None = None,
    corpora: Corpora | None = None,
) -> Task:
    """The VRAG-RL task whose answer reward asks ``judge`` (offline: a rule judge); ``mode``
    "upstream" scores as the released reward manager does; ``weights`` (retrieval, answer,
    pattern) replace the paper's; ``corpora`` holds its search engines."""
    reward = vragrl_reward(mode, judge=judge)
    reward = reward.reweighted(weights or {})
    corpora = corpora if corpora is not None else Corpora()
    return Task(
        name="vragrl",
        samples=corpora.samples,
        make_env=corpora.make_env,
        parse=SearchAgent().parse,
        reward=reward,
        oracle=oracle,
        score_episodes=partial(score_episodes, reward=reward),
        from_benchmark=corpora.from_benchmark,
        from_synthetic=corpora.from_synthetic,
    )


@dataclass(frozen=True)
class VragrlOptions:
    """The ``method:`` section of a VRAG-RL recipe."""

    # paper: Eq. 12 on the last turn; upstream: the released reward manager (docs/methods.md)
    reward_mode: Literal["paper", "upstream"] = "paper"
    # reward component (retrieval, answer, pattern) -> weight over the released 0.2, 0.7, 0.1 (sum 1)
    weights: Mapping[str, float] = field(default_factory=dict)
    judge: JudgeConfig = field(default_factory=JudgeConfig)  # r_Ans's judge; default: the offline rule
    index: str = ""  # the search engine: an index directory or a serve-index URL; empty: BM25
    # ALDEN's <fetch>N</fetch> beside <search>: the policy may open page N of the episode's corpus
    fetch: bool = False


def build_vragrl(cfg: VragrlOptions, resources: Resources) -> Task:
    """VRAG-RL's task with its judge, weights, reward variant and search engine."""
    try:
        weights = check_eq12(merged_weights("vragrl", WEIGHTS, cfg.weights))
    except InvalidInputError as exc:
        raise ConfigError(f"method.weights: {exc}") from None
    judge = method_judge(cfg.judge, resources, VRAGRL.judge_prompt, RuleJudge())
    return make_vragrl_task(
        judge, cfg.reward_mode, weights, Corpora(resources.searcher, cfg.index, cfg.fetch)
    )


VRAGRL = Method(
    name="vragrl",
    options=VragrlOptions,
    build=build_vragrl,
    paradigm="search_agent",
    summary="VRAG-RL: search the corpus, crop and zoom, answer; NDCG + judge + pattern reward",
    judge_prompt="vragrl",
    distill=vragrl_filter,
    regrounds_boxes=True,
    stages=("distill", "multiexpert", "filter"),
    citation=Paper(
        "VRAG-RL: Empower Vision-Perception-Based RAG for Visually Rich Information Understanding via "
        "Iterative Reasoning with Reinforcement Learning",
        "Wang et al.",
        code="https://github.com/Alibaba-NLP/VRAG",
    ),
)
METHODS.add("vragrl", VRAGRL)

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from evidra.core.types import ImagePart, Message, Page, Sample
from evidra.env import KeyValueEnv, SingleTurnEnv, StepResult
from evidra.models.context import collate_split
from evidra.models.generation import Generation, SamplingParams, forward_logprobs
from evidra.paradigms import Direct
from evidra.rollout import HFBackend, RolloutLimits, rollout

CORPUS = {"alpha": "17", "beta": "42", "gamma": "99"}


def _samples() -> list[Sample]:
    return [
        Sample(id=k, question=f"What is the value of {k}?", answers=(v,)) for k, v in list(CORPUS.items())[:2]
    ]


def _rescore(vlm: Any, episodes: list[Any]) -> list[list[float]]:
    contexts = [ep.context for ep in episodes]
    prompt_lens = [len(ep.trajectory.prompt_ids) for ep in episodes]
    inputs, ids, mask = collate_split(contexts, prompt_lens, vlm.pad_token_id, vlm.image_token_id)
    with torch.no_grad():
        lp = forward_logprobs(vlm.model, inputs, ids, temperature=1.0)
    return [lp[i, : int(mask[i].sum())].tolist() for i in range(len(episodes))]


class _ScriptedEnv(KeyValueEnv):
    """Key-value env whose observations also carry an image, to test image insertion."""

    def step(self, text: str) -> StepResult:
        result = super().step(text)
        if result.done:
            return result
        image = Image.fromarray(np.full((60, 90, 3), 200, dtype=np.uint8))
        obs = Message("user", (ImagePart(image), *result.observation[0].content))
        return StepResult((obs,), info=result.info)


@pytest.mark.parametrize("env_cls", [KeyValueEnv, _ScriptedEnv])
def test_multi_turn_rollout_keeps_exact_tokens_and_masks(tiny_vlms: dict[str, Any], env_cls: type) -> None:
    vlm = tiny_vlms["qwen2_5_vl"]
    limits = RolloutLimits(max_turns=3, max_new_tokens=12, max_response_tokens=400)
    params = SamplingParams(temperature=1.0, seed=0)
    episodes = rollout(HFBackend(vlm), lambda s: env_cls(CORPUS), _samples(), 2, params, limits)
    assert [ep.group for ep in episodes] == [0, 0, 1, 1]
    for ep in episodes:
        t = ep.trajectory
        assert len(t.token_ids) == len(t.policy_mask) == len(t.logprobs) <= limits.max_response_tokens
        assert 1 <= t.num_turns <= limits.max_turns
        assert sum(len(s) for s in t.turns) == t.num_policy_tokens
        for span in t.turns:  # every policy turn is masked in, with negative log-probs
            assert all(t.policy_mask[i] == 1 and t.logprobs[i] <= 0 for i in range(span.start, span.end))
        assert ep.context.token_ids == t.prompt_ids + t.token_ids
        obs_ids = [tok for tok, m in zip(t.token_ids, t.policy_mask, strict=True) if m == 0]
        if t.num_turns > 1:  # an observation sits between turns, ending with the assistant header
            text = vlm.tokenizer.decode(obs_ids)
            assert "<|im_start|>user" in text and text.endswith("<|im_start|>assistant\n")
            assert ("<information>" in text) or ("Invalid action" in text)
        if env_cls is _ScriptedEnv:
            assert ep.context.num_images == t.num_turns - 1  # one image per inserted observation
        assert t.finished != t.truncated
    # teacher forcing over the whole multi-turn context reproduces the sampled log-probs
    for ep, ref in zip(episodes, _rescore(vlm, episodes), strict=True):
        t = ep.trajectory
        sampled = [lp for lp, m in zip(t.logprobs, t.policy_mask, strict=True) if m]
        rescored = [lp for lp, m in zip(ref, t.policy_mask, strict=True) if m]
        assert np.allclose(sampled, rescored, atol=1e-4)


def test_turn_limit_truncates(tiny_vlms: dict[str, Any]) -> None:
    vlm = tiny_vlms["qwen2_5_vl"]
    limits = RolloutLimits(max_turns=1, max_new_tokens=6, max_response_tokens=200)
    (ep,) = rollout(
        HFBackend(vlm), lambda s: KeyValueEnv(CORPUS), _samples()[:1], 1, SamplingParams(seed=1), limits
    )
    # a random policy virtually never writes a well-formed action in 6 tokens: invalid -> truncated
    if ep.infos[0].action != "answer":
        assert ep.trajectory.truncated and ep.trajectory.num_turns == 1
        assert ep.trajectory.policy_mask == (1,) * len(ep.trajectory.token_ids)


def test_token_budget_cuts_a_turn(tiny_vlms: dict[str, Any]) -> None:
    vlm = tiny_vlms["qwen2_5_vl"]
    limits = RolloutLimits(max_turns=5, max_new_tokens=16, max_response_tokens=20)
    episodes = rollout(
        HFBackend(vlm), lambda s: KeyValueEnv(CORPUS), _samples(), 2, SamplingParams(seed=2), limits
    )
    for ep in episodes:
        assert len(ep.trajectory.token_ids) <= 20


def test_single_turn_env_with_pages(tiny_vlms: dict[str, Any], tmp_path: Any) -> None:
    vlm = tiny_vlms["qwen2_vl"]
    path = tmp_path / "p.png"
    Image.new("RGB", (200, 260), "white").save(path)
    page = Page(id="p-p0001", image_path=str(path), width=200, height=260)
    sample = Sample(id="s", question="Year?", answers=("1987",), pages=(page,))
    limits = RolloutLimits(max_turns=1, max_new_tokens=8)
    episodes = rollout(
        HFBackend(vlm), lambda s: SingleTurnEnv(Direct()), [sample], 3, SamplingParams(seed=0), limits
    )
    assert len(episodes) == 3 and all(ep.trajectory.num_turns == 1 for ep in episodes)
    assert all(ep.context.num_images == 1 for ep in episodes)
    assert all(sum(ep.trajectory.policy_mask) == len(ep.trajectory.token_ids) for ep in episodes)
    for ep in episodes:  # an answer cut at the token limit is truncated, not finished
        t = ep.trajectory
        assert t.finished != t.truncated
        assert not t.truncated or len(t.token_ids) == limits.max_new_tokens


class _CutBackend:
    """Plays one fixed completion per call, reported as stopped by ``reason``."""

    def __init__(self, vlm: Any, text: str, reason: str) -> None:
        self.vlm, self.text, self.reason = vlm, text, reason

    @property
    def processor(self) -> Any:
        return self.vlm.processor

    def generate(self, contexts: Any, params: SamplingParams) -> list[Generation]:
        ids = tuple(self.vlm.tokenizer(self.text, add_special_tokens=False)["input_ids"])
        return [Generation(c.token_ids, ids, (0.0,) * len(ids), self.text, self.reason) for c in contexts]


@pytest.mark.parametrize("reason", ["length", "eos"])
def test_a_single_turn_answer_cut_by_the_token_limit_is_truncated(
    tiny_vlms: dict[str, Any], reason: str
) -> None:
    vlm = tiny_vlms["qwen2_5_vl"]
    sample = Sample(id="s", question="Year?", answers=("1987",), pages=())
    backend = _CutBackend(vlm, "The answer is 19", reason)
    limits = RolloutLimits(max_turns=1, max_new_tokens=8)
    (ep,) = rollout(backend, lambda s: SingleTurnEnv(Direct()), [sample], 1, SamplingParams(seed=0), limits)
    assert ep.trajectory.truncated == (reason == "length")
    assert ep.trajectory.finished == (reason == "eos")


class _Counting:
    """An index that records how many queries each call carried."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.calls = inner, []

    def search(self, queries: Any, k: int = 10, exclude: Any = None) -> Any:
        self.calls.append(len(queries))
        return self.inner.search(queries, k=k, exclude=exclude)


class _ScriptedTurns:
    """Plays scripts[j][turn] for the j-th context of each call."""

    def __init__(self, vlm: Any, scripts: list[list[str]]) -> None:
        self.vlm, self.scripts, self.turn = vlm, scripts, 0

    @property
    def processor(self) -> Any:
        return self.vlm.processor

    def generate(self, contexts: Any, params: SamplingParams) -> list[Generation]:
        out = []
        for j, c in enumerate(contexts):
            text = self.scripts[j][self.turn]
            ids = tuple(self.vlm.tokenizer(text, add_special_tokens=False)["input_ids"])
            out.append(Generation(c.token_ids, ids, (0.0,) * len(ids), text, "stop"))
        self.turn += 1
        return out


def test_searches_of_a_turn_are_batched_with_the_one_by_one_results(
    tiny_vlms: dict[str, Any], tmp_path: Any
) -> None:
    from evidra.core.types import Box, Word
    from evidra.env.search import SearchEnv, bm25_searcher

    texts = {
        "pA": "quarterly revenue table 2021",
        "pB": "employee headcount by region",
        "pC": "revenue forecast 2022 outlook",
        "pD": "revenue by region 2020",
    }
    pages = {}
    for pid, text in texts.items():
        path = tmp_path / f"{pid}.png"
        Image.new("RGB", (112, 224), "white").save(path)
        words = tuple(Word(w, Box(10.0 * j, 10.0, 10.0 * j + 8, 20.0)) for j, w in enumerate(text.split()))
        pages[pid] = Page(pid, str(path), 112, 224, words=words)
    queries = ["revenue", "region", "2022 outlook", "headcount", "revenue 2021", "forecast"]
    scripts = [
        [f"<search>{q}</search>", f"<search>{queries[-1 - j]}</search>", "<answer>x</answer>"]
        for j, q in enumerate(queries)
    ]
    samples = [Sample(id=f"s{i}", question="Revenue?", answers=("x",)) for i in range(3)]
    limits = RolloutLimits(max_turns=4, max_new_tokens=16, max_response_tokens=4000)

    class OneByOne(SearchEnv):
        def pending_search(self, text: str) -> None:
            return None

    runs = {}
    for name, env_cls in (("batched", SearchEnv), ("one_by_one", OneByOne)):
        index = _Counting(bm25_searcher(pages.values()))
        backend = _ScriptedTurns(tiny_vlms["qwen2_5_vl"], scripts)
        make = partial(env_cls, index, pages, max_pixels=112 * 224, min_pixels=3136)
        eps = rollout(backend, lambda s, m=make: m(), samples, 2, SamplingParams(seed=0), limits)
        runs[name] = (index.calls, eps)
    (batched_calls, batched), (single_calls, single) = runs["batched"], runs["one_by_one"]
    assert batched_calls == [6, 6] and single_calls == [1] * 12  # one index call per turn
    for a, b in zip(batched, single, strict=True):
        assert a.trajectory.token_ids == b.trajectory.token_ids
        assert a.infos == b.infos
    assert {i.page_id for ep in batched for i in ep.infos if i.action == "search"} >= {"pA", "pB"}

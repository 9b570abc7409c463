from __future__ import annotations

import math
from typing import Any

import pytest

from evidra.core.types import Parsed, Sample, Trajectory
from evidra.integrations import as_trl_reward, as_verl_compute_score
from evidra.methods.vragrl.reward import VragRLReward
from evidra.rewards.reward import RewardResult
from evidra.rewards.toy import parse_answer


def _exact(parsed: Parsed, sample: Sample, trajectory: Trajectory | None = None) -> RewardResult:
    if sample.extras.get("judge_down"):
        return RewardResult.unscored("judge")
    hit = float(parsed.answer is not None and parsed.answer in sample.answers)
    return RewardResult(
        total=hit, components={"answer": hit, "index_page": float(sample.extras.get("index_page", 0))}
    )


def test_trl_reward_with_the_arguments_grpo_trainer_passes() -> None:
    fn = as_trl_reward(_exact, parse_answer)
    logged: list[Any] = []
    prompts = [
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Who wrote it?"}]}],
        [{"role": "user", "content": "Year?"}],
        [{"role": "user", "content": "Year?"}],
    ]
    completions = [
        [{"role": "assistant", "content": "<think>x</think><answer>Jane</answer>"}],
        [{"role": "assistant", "content": "<answer>1987</answer>"}],
        [{"role": "assistant", "content": "no tags"}],
    ]
    out = fn(
        prompts=prompts,
        completions=completions,
        completion_ids=[[1, 2], [3], [4]],
        answer=["Jane", "1988", "1987"],
        index_page=[0, 1, -1],
        judge_down=[False, False, True],
        trainer_state=object(),
        log_extra=logged.append,
        log_metric=lambda *a: None,
    )
    assert out == [1.0, 0.0, None]  # the unscored item is None, which TRL turns into NaN
    assert fn.__name__ == "_exact"


def test_trl_reward_plain_text_completions() -> None:
    fn = as_trl_reward(_exact, parse_answer, name="exact")
    assert fn(
        prompts=["Q?"], completions=["<answer>a</answer>"], completion_ids=[[1]], answer=[["a", "b"]]
    ) == [1.0]
    assert fn.__name__ == "exact"


def test_verl_compute_score_signature_and_components() -> None:
    score = as_verl_compute_score(_exact, parse_answer, keys=("answer", "index_page"))
    out = score(
        "vidoseek", "<answer>Paris</answer>", ["Paris", "paris"], {"question": "Capital?", "index_page": 2}
    )
    assert out == {"score": 1.0, "scored": 1.0, "answer": 1.0, "index_page": 2.0}
    down = score("vidoseek", "<answer>Paris</answer>", "Paris", {"judge_down": True})
    # the same keys for every sample (verl gathers each key into one list per batch)
    assert down == {"score": 0.0, "scored": 0.0, "answer": 0.0, "index_page": 0.0}


def test_adapters_refuse_a_reward_that_cannot_score() -> None:
    import pytest

    from evidra.core.errors import ConfigError
    from evidra.methods.lat.reward import LatReward
    from evidra.methods.lat.similarity import TextOverlapSimilarity

    for adapt in (as_trl_reward, as_verl_compute_score):
        with pytest.raises(ConfigError, match="StepSimilarity service"):
            adapt(LatReward())
    score = as_verl_compute_score(LatReward(similarity=TextOverlapSimilarity()))
    out = score("visa", "<think>x</think><answer>Paris</answer>", "Paris", {"question": "Capital?"})
    assert set(out) == {"score", "scored", "accuracy", "step", "ground", "format"}


def test_a_paper_reward_through_both_adapters() -> None:
    reward = VragRLReward()
    text = "<think>look</think><search>orion</search><answer>1987</answer>"
    trl = as_trl_reward(reward)(prompts=["When?"], completions=[text], completion_ids=[[1]], answer=["1987"])
    verl = as_verl_compute_score(reward)("rag", text, "1987", {"question": "When?"})
    assert trl[0] is not None and math.isfinite(trl[0]) and trl[0] == verl["score"]


def test_verl_compute_score_reads_the_pages_the_tools_retrieved() -> None:
    """verl hands the tools' extra_fields to the reward as extra_info: retrieved_pages (a list)
    becomes the NDCG input, gold_pages the sample's gold (VRAG-RL Eq. 9)."""
    from evidra.methods.vragrl.reward import retrieval_reward

    score = as_verl_compute_score(retrieval_reward)
    info = {"question": "q", "gold_pages": ["p2", "p9"], "retrieved_pages": ["p1", "p2"]}
    # DCG = 1/log2(3) (p2 at rank 2); IDCG over the 2 gold pages = 1 + 1/log2(3)
    expected = (1 / math.log2(3)) / (1 + 1 / math.log2(3))
    assert math.isclose(score("vragrl", "<answer>x</answer>", "x", info)["score"], expected)
    assert score("vragrl", "<answer>x</answer>", "x", {**info, "retrieved_pages": []})["score"] == 0.0


def test_rewards_are_named_by_their_registry_names() -> None:
    from evidra.core.errors import ConfigError
    from evidra.integrations import as_trl_reward, as_verl_compute_score

    fmt = as_trl_reward("lat.format")  # LAT's R_format: 1 for a well-formed chain, -1 otherwise
    assert fmt.__name__ == "lat.format"
    assert fmt(prompts=["q"], completions=["junk"], answers=[["x"]]) == [-1.0]
    assert as_verl_compute_score("lat.format")("visa", "junk", ["x"])["score"] == -1.0
    with pytest.raises(ConfigError, match=r"did you mean 'lat\.format'"):
        as_trl_reward("lat.formt")
    with pytest.raises(ConfigError, match="needs a StepSimilarity service"):  # lat's R_step: no service
        as_trl_reward("lat")

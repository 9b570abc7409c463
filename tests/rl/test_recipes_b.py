"""The VRAG-RL and CAVE recipes train for 2 steps on the tiny model from their YAML files.

Full multi-turn episodes run against the tiny policy and a real BM25 index (VRAG-RL) or the
zoom environment (CAVE); the rewards are the papers' components, CAVE's through the
teacher-forcing service.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from evidra.core.config import load_config
from evidra.methods import rl_trainer, task_for
from evidra.rl.run_config import RLConfig

ROOT = Path(__file__).resolve().parents[2]

RECIPES = {  # recipe -> (reward components the paper names, rl advantage)
    "vragrl": ({"retrieval", "answer", "pattern"}, "grpo"),
    "cave": ({"accuracy", "format", "belief", "evidence", "focus"}, "turn_credit"),
    "unidoc": ({"answer", "retrieval", "select", "crop", "format"}, "grpo"),
}


def _small(tmp: Path, name: str) -> list[str]:
    return [
        "model.path=tiny:qwen2_5_vl",
        "model.dtype=float32",
        "model.min_pixels=3136",
        "model.max_pixels=12544",
        "run.steps=2",
        "run.batch_size=1",
        "run.micro_batch_size=2",
        "algo.mini_batch_size=0",
        "rollout.group_size=2",
        "rollout.max_turns=3",
        "rollout.max_new_tokens=8",
        "rollout.max_response_tokens=400",
        "data.size=2",
        f"data.path={tmp / 'synth'}",
        f"run.output_dir={tmp / name}",
    ]


@pytest.mark.slow
@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_recipe_trains_two_steps(recipe: str, tmp_path: Path) -> None:
    components, advantage = RECIPES[recipe]
    cfg = load_config(RLConfig, ROOT / "configs" / f"{recipe}.yaml", _small(tmp_path, recipe))
    assert task_for(cfg).name == recipe and cfg.algo.advantage == advantage
    metrics = rl_trainer(cfg).train()
    assert len(metrics) == 2
    for row in metrics:
        assert math.isfinite(row["loss"])
        assert {f"reward/{c}" for c in components} <= set(row)
        assert row["episode/turns"] >= 2  # random text is invalid: the environment answers, episodes go on


# --- full episodes with scripted turns: real environments, real index, tiny-model processor ---

from collections.abc import Sequence  # noqa: E402
from typing import Any  # noqa: E402

from evidra.methods import build_task  # noqa: E402
from evidra.models.context import Context  # noqa: E402
from evidra.models.generation import Generation, SamplingParams  # noqa: E402
from evidra.rl.run_config import DataConfig  # noqa: E402
from evidra.rollout import RolloutLimits, rollout  # noqa: E402


class Scripted:
    """A generation backend that plays fixed turns (episode j of the batch plays scripts[j])."""

    def __init__(self, vlm: Any, scripts: Sequence[Sequence[str]]) -> None:
        self.vlm, self.scripts, self.calls = vlm, scripts, 0

    @property
    def processor(self) -> Any:
        return self.vlm.processor

    def generate(self, contexts: Sequence[Context], params: SamplingParams) -> list[Generation]:
        out = []
        for j, ctx in enumerate(contexts):
            text = self.scripts[j][self.calls]
            ids = tuple(self.vlm.tokenizer(text, add_special_tokens=False)["input_ids"])
            out.append(Generation(ctx.token_ids, ids, (0.0,) * len(ids), text, "stop"))
        self.calls += 1
        return out


@pytest.fixture(scope="module")
def small_vlm(tiny_dirs: dict[str, Path]) -> Any:
    from evidra.models.loading import load_vlm

    return load_vlm(tiny_dirs["qwen2_5_vl"], min_pixels=3136, max_pixels=12544)


def test_vragrl_scripted_episodes_score_the_paper_reward(small_vlm: Any, tmp_path: Path) -> None:
    task = build_task(dict(name="vragrl"))
    sample = task.samples(DataConfig(task="vragrl", size=1, path=str(tmp_path)))[0]
    q, a = sample.question, sample.answers[0]
    right = [
        f"<think>a</think><search>{q}</search>",
        "<think>b</think><bbox>[10, 10, 300, 200]</bbox>",
        f"<think>c</think><answer>{a}</answer>",
    ]
    wrong = [
        "<think>a</think><search>zzz unknown words</search>",
        "<think>b</think><bbox>[5, 5, 1, 1]</bbox>",
        "<think>c</think><answer>nobody</answer>",
    ]
    episodes = rollout(
        Scripted(small_vlm, [right, wrong]),
        task.make_env,
        [sample],
        2,
        SamplingParams(max_new_tokens=64),
        RolloutLimits(5, 64, 4000),
    )
    good, bad = episodes
    assert [i.action for i in good.infos] == ["search", "bbox", "answer"]
    assert good.infos[0].page_id == sample.gold_pages[0]  # BM25 finds the gold page for the question
    assert good.context.num_images == 2 and 0 in good.trajectory.policy_mask
    assert [i.action for i in bad.infos] == ["search", "invalid", "answer"]  # no hit, then a bad box
    assert bad.context.num_images == 0 and bad.infos[-1].invalid_count == 1
    results = task.score_episodes(small_vlm, episodes)
    # one relevant page retrieved first: NDCG 1; judge right; pattern 1 -> 0.2 + 0.7 + 0.1
    assert dict(results[0].components) == {"retrieval": 1.0, "answer": 1.0, "pattern": 1.0}
    assert results[0].total == pytest.approx(1.0)
    assert results[1].components["retrieval"] == 0.0 and results[1].components["answer"] == 0.0
    assert results[1].total == pytest.approx(0.1)


def test_unidoc_scripted_episodes_score_each_action_type(small_vlm: Any, tmp_path: Path) -> None:
    import json

    from evidra.core.geometry import Displayed, page_box_to_displayed
    from evidra.eval.sample_scoring import Prediction
    from evidra.methods.evaluation import reward_scorer

    task = build_task(dict(name="unidoc"))
    sample = task.samples(DataConfig(task="unidoc", size=1, path=str(tmp_path)))[0]
    q, a = sample.question, sample.answers[0]
    gold = next(p for p in sample.pages if p.id == sample.gold_pages[0])
    assert sample.evidence_box is not None and sample.evidence_box.page_id == gold.id
    region = page_box_to_displayed(
        sample.evidence_box.box, Displayed.page(gold.id, gold.image_path, gold.size)
    )
    right = [
        f"<think>a</think><search>{q}</search>",
        "<think>b</think><select>0</select>",
        f"<think>c</think><bbox>{json.dumps(region)}</bbox>",
        f"<think>d</think><information>{a}</information><answer>{a}</answer>",
    ]
    wrong = [
        "<think>a</think><search>zzz unknown words</search>",
        "<think>b</think><select>0</select>",
        "<think>c</think><answer>nobody</answer>",
    ]
    episodes = rollout(
        Scripted(small_vlm, [right, wrong]),
        task.make_env,
        [sample],
        2,
        SamplingParams(max_new_tokens=64),
        RolloutLimits(6, 64, 8000),
    )
    good, bad = episodes
    assert [i.action for i in good.infos] == ["search", "select", "bbox", "answer"]
    assert good.infos[0].candidates[0] == gold.id  # BM25 ranks the gold page first for the question
    assert good.context.num_images == len(good.infos[0].candidates) + 2  # candidates, the kept page, the crop
    assert [i.action for i in bad.infos] == ["search", "select", "answer"] and bad.infos[1].invalid
    results = task.score_episodes(small_vlm, episodes)
    # gold at rank 1 (NDCG 1), kept (1), its evidence region cropped (F1 1), format 1, judge right
    assert {k: round(v, 6) for k, v in results[0].components.items()} == {
        "answer": 1.0,
        "retrieval": 1.0,
        "select": 1.0,
        "crop": 1.0,
        "format": 1.0,
    }
    assert results[0].total == pytest.approx(1.0)
    assert results[1].total == 0.0 and results[1].components["format"] == 0.0  # no select: the gate
    # evaluation scores the same episode with the same reward, from the recorded steps
    pred = Prediction(sample.id, good.trajectory.texts, a, infos=good.infos)
    scores = reward_scorer(task)(sample, pred)
    assert scores["reward"] == pytest.approx(results[0].total) and scores["reward/select"] == 1.0


@pytest.mark.slow
def test_tiny_unidoc_recipe_trains_from_the_cli(tmp_path: Path) -> None:
    import json

    from evidra.cli.main import main

    config = str(ROOT / "configs" / "tiny" / "unidoc.yaml")
    over = [f"run.output_dir={tmp_path / 'run'}", f"data.path={tmp_path / 'data'}", "run.steps=1"]
    over = [*over, "model.cold_start.steps=0"]  # the recipe's cold start: tests/rl/test_tiny_learning.py
    assert main(["-q", "train", "rl", "--config", config, *over]) == 0
    (row,) = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert math.isfinite(row["loss"])
    assert {f"reward/{c}" for c in ("answer", "retrieval", "select", "crop", "format")} <= set(row)


def test_cave_scripted_episodes_get_turn_credits(small_vlm: Any, tmp_path: Path) -> None:
    import json

    task = build_task(dict(name="cave"))
    sample = task.samples(DataConfig(task="cave", size=1, path=str(tmp_path)))[0]
    call = json.dumps({"name": "image_zoom_in_tool", "arguments": {"bbox_2d": [0, 0, 200, 200]}})
    zoom_then_answer = [
        f"<think>z</think><tool_call>{call}</tool_call>",
        f"<think>a</think><answer>{sample.answers[0]}</answer>",
    ]
    guess = ["<think>g</think>no action", "<think>g</think><answer>wrong</answer>"]
    episodes = rollout(
        Scripted(small_vlm, [zoom_then_answer, guess]),
        task.make_env,
        [sample],
        2,
        SamplingParams(max_new_tokens=64),
        RolloutLimits(4, 64, 4000),
    )
    assert episodes[0].context.num_images == 2 and episodes[1].context.num_images == 1
    results = task.score_episodes(small_vlm, episodes)
    zoomed, guessed = results
    assert len(zoomed.turns) == 2 and len(guessed.turns) == 2
    # last turn: accuracy 1.0 + format 0.1 + rounds 0.1; the guess is wrong and malformed but
    # answered within the round limit, so it keeps the round-number anchor's 0.1
    assert zoomed.turns[1] == pytest.approx(1.2) and guessed.turns[1] == pytest.approx(0.1)
    assert sum(zoomed.turns) == pytest.approx(zoomed.total)
    assert all(math.isfinite(t) for r in results for t in r.turns)
    assert guessed.components["focus"] == 0.0  # no zoom, no focus credit
    ratio = 200 * 200 / (sample.pages[0].width * sample.pages[0].height)
    assert episodes[0].infos[0].area_ratio == pytest.approx(ratio)


@pytest.mark.slow
@pytest.mark.parametrize("task", ["vragrl", "cave"])
def test_oracle_conversations_cold_start_sft(task: str, tmp_path: Path) -> None:
    from evidra.methods import sft_trainer
    from evidra.rl.run_config import SFTConfig

    over = [
        "model.path=tiny:qwen2_5_vl",
        "model.max_pixels=12544",
        "model.min_pixels=3136",
        f"method.name={task}",
        "data.size=2",
        f"data.path={tmp_path / 'synth'}",
        "run.steps=2",
        "run.batch_size=2",
        "run.micro_batch_size=2",
        f"run.output_dir={tmp_path / 'sft'}",
    ]
    metrics = sft_trainer(load_config(SFTConfig, None, over)).train()
    assert len(metrics) == 2 and all(math.isfinite(m["loss"]) and m["tokens"] > 0 for m in metrics)


def test_synth_once_builds_a_folder_once_across_threads(tmp_path: Path) -> None:
    import threading

    from evidra.data.synth.documents import SynthCorpus
    from evidra.methods.vragrl.method import synth_once

    calls: list[int] = []

    def build(root: Path) -> SynthCorpus:
        calls.append(1)
        (root / "file").write_text("x")
        return SynthCorpus(str(root), float(len(calls)), (), ())

    results: list[SynthCorpus] = []
    threads = [
        threading.Thread(target=lambda: results.append(synth_once(tmp_path / "c", build))) for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert calls == [1] and [r.dpi for r in results] == [1.0] * 4


def test_vragrl_answer_without_search_paper_and_released(small_vlm: Any, tmp_path: Path) -> None:
    """A right answer with no search. Paper (Eq. 9-12): no page retrieved, r_Ret = DCG(empty) /
    IDCG = 0; no <search> action, r_Pat = 0; r = 0.2 * 0 + 0.7 * 1 + 0.1 * 0 = 0.7 (beta: the paper
    gates nothing on retrieval). Released (method.reward_mode=upstream): 0 without both an <answer> and
    a <search> in the decoded response. After an invalid action the released check also reads the
    environment's message, whose instructions name both tags: the gate passes without a search
    (0.7 + 0.1 + 0.2 * 0), where the paper still gives 0.7."""
    from evidra.methods import build_task

    paper = build_task(dict(name="vragrl"))
    released = build_task(dict(name="vragrl", reward_mode="upstream"))
    sample = paper.samples(DataConfig(task="vragrl", size=1, path=str(tmp_path)))[0]
    answer = f"<think>I know it.</think><answer>{sample.answers[0]}</answer>"
    after_invalid, direct = ["<think>zoom</think><bbox>[5, 5, 1, 1]</bbox>", answer], [answer]
    # the longer script first: Scripted plays the j-th running episode's script
    episodes = rollout(
        Scripted(small_vlm, [after_invalid, direct]),
        paper.make_env,
        [sample],
        2,
        SamplingParams(max_new_tokens=64),
        RolloutLimits(5, 64, 4000),
    )
    assert [i.action for i in episodes[0].infos] == ["invalid", "answer"]
    assert [i.action for i in episodes[1].infos] == ["answer"]
    got = paper.score_episodes(small_vlm, episodes)
    assert dict(got[1].components) == {"retrieval": 0.0, "answer": 1.0, "pattern": 0.0}
    assert [r.total for r in got] == [pytest.approx(0.7), pytest.approx(0.7)]
    up = released.score_episodes(small_vlm, episodes)
    assert up[1].total == 0.0 and up[1].components["pattern"] == 0.0
    assert up[0].components["pattern"] == 1.0 and up[0].total == pytest.approx(0.8)


def test_vragrl_released_reward_keeps_the_judge_and_full_marks(small_vlm: Any, tmp_path: Path) -> None:
    from evidra.methods import build_task
    from evidra.methods.vragrl.reward import VragRLReward
    from evidra.rewards.judge import RuleJudge
    from evidra.rewards.judge_config import JudgeConfig

    judge = JudgeConfig(kind="rule", rule="exact")
    released = build_task(dict(name="vragrl", judge=judge, reward_mode="upstream"))
    sample = released.samples(DataConfig(task="vragrl", size=1, path=str(tmp_path)))[0]
    q, a = sample.question, sample.answers[0]
    right = [f"<think>a</think><search>{q}</search>", f"<think>c</think><answer>{a}</answer>"]
    episodes = rollout(
        Scripted(small_vlm, [right]),
        released.make_env,
        [sample],
        1,
        SamplingParams(max_new_tokens=64),
        RolloutLimits(5, 64, 4000),
    )
    (result,) = released.score_episodes(small_vlm, episodes)
    assert result.total == pytest.approx(0.7 * 1 + 0.1 * 1 + 0.2 * 1.0)  # rm.py's order of terms
    reward = released.reward
    assert isinstance(reward, VragRLReward) and reward.rules.name == "upstream"  # the judge kept the rules
    assert reward.judge == RuleJudge("exact")  # and the mode kept the judge


# --- what CAVE trains on, and VRAG-RL's token budgets ---

SCENARIOS = (
    "tracer_match",
    "tracer_subimage",
    "tracer_trace",
    "tracer_vjump",
    "tunnel_chain",
    "tunnel_circuits",
    "tunnel_objreid",
)


def test_cave_trains_on_tracer_and_tunnel_style_samples(tmp_path: Path) -> None:
    from collections import Counter

    from evidra.core.errors import ConfigError
    from evidra.methods import check_config
    from evidra.methods.cave.paradigm import ZoomAgent
    from evidra.methods.cave.reward import CaveReward

    outcome = CaveReward(parse=ZoomAgent().parse).outcome
    from evidra.methods.cave.credits import Outcome
    from evidra.rl.tasks import plain_task, task_samples

    task = build_task(dict(name="cave"))
    samples = task_samples(task, DataConfig(task="cave", size=14, path=str(tmp_path)))
    assert Counter(s.dataset for s in samples) == dict.fromkeys(SCENARIOS, 2)  # CAVE App. C's seven, even
    for s in samples:  # one image each (pairs as panels); the perception field is the evidence unit
        (page,) = s.pages
        assert s.gold_evidence[page.id] == s.extras["perception"] and s.answers
    cfg = load_config(RLConfig, ROOT / "configs" / "cave.yaml", [])
    assert (cfg.data.synthetic, cfg.data.size, cfg.method["judge"]["rule"]) == (
        ("tracer", "tunnel"),
        5000,
        "braced",
    )
    vjump = next(s for s in samples if s.dataset == "tracer_vjump")
    letter, other = vjump.answers[0], "Z"
    assert outcome([f"<think>t</think><answer>{{{letter}}}</answer>"], vjump) == Outcome(1.0, 1.0)
    assert outcome([f"<think>t</think><answer>{other} {letter}</answer>"], vjump) == Outcome(0.0, 1.0)
    # data.synthetic picks other sources through the same path; a plain task's own data only refuses it
    chain = task_samples(
        task, DataConfig(task="cave", size=2, path=str(tmp_path), synthetic=("tunnel.chain",))
    )
    assert [s.dataset for s in chain] == ["tunnel_chain"] * 2
    with pytest.raises(ConfigError, match=r"remove data\.synthetic"):
        task_samples(plain_task("toy.digits"), DataConfig(size=2, path=str(tmp_path), synthetic=("tracer",)))
    with pytest.raises(ConfigError, match=r"no sample with a gold answer box; LAT cites boxes: use reading"):
        task_samples(
            build_task(dict(name="lat")), DataConfig(size=2, path=str(tmp_path), synthetic=("tracer",))
        )
    cases = [
        ("cave", ["data.synthetic=[tracr]"], r"did you mean 'tracer"),
        ("cave", ["data.synthetic=[tracer]", "data.source=slidevqa"], "keep one"),
        ("cave", ["method.name=lat"], r"method\.judge is no option of method 'lat'"),
    ]
    for recipe, bad, match in cases:
        with pytest.raises(ConfigError, match=match):
            check_config(load_config(RLConfig, ROOT / "configs" / f"{recipe}.yaml", ["model.path=x", *bad]))


def test_tiny_cave_recipe_trains_from_the_cli_on_its_samples(tmp_path: Path) -> None:
    """The tiny recipe on its `reading` pages, and on the paper's mixture (the full recipe's data)."""
    import json

    from evidra.cli.main import main

    config = str(ROOT / "configs" / "tiny" / "cave.yaml")
    over = [f"data.path={tmp_path / 'data'}", "run.steps=1", "run.batch_size=2", "model.cold_start.steps=0"]
    for run, data in (("reading", []), ("mix", ["data.synthetic=[tracer,tunnel]"])):
        argv = ["-q", "train", "rl", "--config", config, *over, *data, f"run.output_dir={tmp_path / run}"]
        assert main(argv) == 0
        (row,) = [json.loads(x) for x in (tmp_path / run / "metrics.jsonl").read_text().splitlines()]
        assert math.isfinite(row["loss"]) and {"reward/belief", "reward/evidence"} <= set(row)
    (drawn,) = (tmp_path / "data").glob("reading-train-seed0-n16/samples.json")
    assert {r["dataset"] for r in json.loads(drawn.read_text())} == {"synth_reading"}
    (drawn,) = (tmp_path / "data").glob("tracer+tunnel-train-seed0-n16/samples.json")
    assert {r["dataset"] for r in json.loads(drawn.read_text())} == set(SCENARIOS)


def test_vragrl_budgets_are_the_released_ones_and_the_others_unchanged() -> None:
    from evidra.core.errors import ConfigError
    from evidra.methods import check_config

    cfg = load_config(RLConfig, ROOT / "configs" / "vragrl.yaml", ["model.path=x"])
    limits = cfg.rollout.limits()
    assert (limits.max_response_tokens, limits.max_context_tokens) == (2048, 8192 + 2048) and limits.separate
    for recipe in (
        "lat",
        "evisrag",
        "lang2act_stage1",
        "lang2act_stage2",
        "cave",
    ):  # observations share the budget
        assert load_config(RLConfig, ROOT / "configs" / f"{recipe}.yaml", []).rollout.max_context_tokens == 0
    check_config(cfg)
    vllm = ["model.path=x", "rollout.backend=vllm", "rollout.vllm.max_model_len=4096"]
    with pytest.raises(ConfigError, match="max_model_len to at least 10240"):
        check_config(load_config(RLConfig, ROOT / "configs" / "vragrl.yaml", vllm))

"""CAVE's data and anchors as the paper describes them (CAVE §3.3, §4, App. B.3, App. C, D.1-D.2):
a cold start that zooms on the evidence, evidence units that never restate the answer, the
round-number anchor, and the RL corpus of 5,000 samples."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from evidra.core.config import load_config
from evidra.core.types import ImagePart, Sample
from evidra.data.synth.sources import expand, mixture
from evidra.methods import build_task
from evidra.methods.cave.credits import WEIGHTS
from evidra.methods.cave.method import MAX_ROUNDS, zoom_region
from evidra.methods.cave.reward import CaveReward
from evidra.rl.run_config import DataConfig, RLConfig, SFTConfig

ROOT = Path(__file__).parents[3]
SCENARIOS = expand(["tracer", "tunnel"])  # four TRACER-style families, three Tunnel-Vision-style types
VERDICTS = {"yes", "no", "not", "same", "different", "differ", "differs", "match", "matches", "copy"}


@pytest.fixture(scope="module")
def drawn(tmp_path_factory: pytest.TempPathFactory) -> list[Sample]:
    """Five samples of each scenario (the train split)."""
    return mixture(["tracer", "tunnel"], tmp_path_factory.mktemp("cave"), 5 * len(SCENARIOS))


def _restates(sample: Sample) -> bool:
    """Whether the perception field states the answer (CAVE App. B.3: "avoid redundant
    explanations or direct restatements of the final answer")."""
    text, answer = sample.extras["perception"], sample.answers[0]
    words = set(re.findall(r"[a-z]+", text.lower()))
    meta = sample.extras["meta"]
    if answer in ("yes", "no"):
        return bool(words & VERDICTS)
    if sample.dataset == "tracer_vjump":  # the nodes it names are the path before the last step
        named = re.findall(r"\b([A-Z]) \(", text)
        return named != [chr(ord("A") + k) for k in meta["path"][:-1]]
    if sample.dataset == "tunnel_chain":  # the last cell by its place, never its colour and shape
        color, shape = meta["chain"][-1]
        return f"{color} {shape}" in text or not re.search(r"the cell at row \d, column \d$", text)
    return re.search(rf"\b{re.escape(answer)}\b", text, flags=re.I) is not None


def test_evidence_units_never_restate_the_answer(drawn: list[Sample]) -> None:
    assert {s.dataset for s in drawn} == {name.replace(".", "_") for name in SCENARIOS}
    leaks = [(s.dataset, s.answers[0], s.extras["perception"]) for s in drawn if _restates(s)]
    assert not leaks


def test_the_restatement_check_can_fail(drawn: list[Sample]) -> None:
    for s in drawn:
        told = s.extras["perception"] + f" So the answer is {s.answers[0]}."
        if s.dataset == "tunnel_chain":
            color, shape = s.extras["meta"]["chain"][-1]
            told = s.extras["perception"].rsplit(" -> ", 1)[0] + f" -> {color} {shape}"
        elif s.dataset == "tracer_vjump":
            told = s.extras["perception"].replace(";", f" -> {s.answers[0]} (red);", 1)
        fake = Sample(
            s.id, s.question, s.answers, s.pages, dataset=s.dataset, extras={**s.extras, "perception": told}
        )
        assert _restates(fake), (s.dataset, told)


def test_the_cold_start_zooms_on_the_evidence_before_answering(drawn: list[Sample]) -> None:
    """D.1: the cold start teaches "basic interleaved reasoning and tool-use capabilities" on
    DeepEyes-style samples: every oracle conversation zooms into the region holding the evidence,
    is shown the crop, then states the evidence and answers."""
    task = build_task(dict(name="cave"))
    assert task.from_synthetic is not None and task.oracle is not None
    samples = task.from_synthetic(drawn, DataConfig(task="cave", synthetic=("tracer", "tunnel")))
    reward = task.reward
    assert isinstance(reward, CaveReward)
    for sample in samples:
        region = zoom_region(sample)
        assert region is not None and sample.evidence_box is not None, sample.dataset
        conversation = task.oracle(sample)
        turns = [m.plain_text for m in conversation if m.role == "assistant"]
        assert len(turns) == 2 and "<tool_call>" in turns[0] and "<answer>" in turns[1]
        call = json.loads(turns[0].split("<tool_call>", 1)[1].split("</tool_call>", 1)[0])
        x1, y1, x2, y2 = call["arguments"]["bbox_2d"]
        assert x1 <= region.x1 and y1 <= region.y1 and x2 >= region.x2 and y2 >= region.y2
        crop = conversation[conversation.index(next(m for m in conversation if m.plain_text == turns[0])) + 1]
        assert crop.role == "user" and any(isinstance(part, ImagePart) for part in crop.content)
        assert sample.gold_evidence[sample.pages[0].id] in turns[1]
        anchors = reward.outcome(turns, sample)
        assert anchors is not None and (anchors.accuracy, anchors.format, anchors.rounds) == (1.0, 1.0, 1.0)


def test_the_cold_start_trains_on_10k_samples_of_their_own() -> None:
    sft = load_config(SFTConfig, ROOT / "configs/cave.yaml", ["model.path=x"])
    rl = load_config(RLConfig, ROOT / "configs/cave.yaml", ["model.path=x"])
    assert (sft.data.size, sft.data.synthetic) == (10000, ("tracer", "tunnel"))
    assert sft.data.seed != rl.data.seed


def test_the_round_number_anchor() -> None:
    """§3.3 anchors training with "answer correctness, format validity, and round-number
    constraints": an answer within the round limit earns ``rounds``, running out of rounds not."""
    reward = build_task(dict(name="cave")).reward
    assert isinstance(reward, CaveReward) and reward.params.max_rounds == MAX_ROUNDS and WEIGHTS["rounds"] > 0
    sample = Sample("s", "Which letter?", ("C",))
    call = json.dumps({"name": "image_zoom_in_tool", "arguments": {"bbox_2d": [0, 0, 9, 9]}})
    zoom = f"<think>look</think><tool_call>{call}</tool_call>"
    answer = "<think>seen</think><answer>C</answer>"
    episodes = [
        [zoom, answer],
        [zoom] * (MAX_ROUNDS - 1) + [answer],  # the last allowed round answers
        [zoom] * MAX_ROUNDS,  # cut by the limit
        [zoom] * MAX_ROUNDS + [answer],  # past the limit (scored outside the environment)
    ]
    outcomes = [reward.outcome(texts, sample) for texts in episodes]
    assert [o.rounds if o is not None else None for o in outcomes] == [1.0, 1.0, 0.0, 0.0]


def test_the_rl_corpus_is_5000_samples_of_both_families(tmp_path: Path) -> None:
    """D.1: "process-reward training on 5,000 TRACER-style samples"; D.2: "on 5K samples"; §4
    and App. C: TRACER's four scenario families, with Tunnel-Vision-style data as an auxiliary
    corpus, isolated from the test split by seed."""
    cfg = load_config(RLConfig, ROOT / "configs/cave.yaml", ["model.path=x"])
    assert (cfg.data.size, cfg.data.synthetic) == (5000, ("tracer", "tunnel"))
    drawn = mixture(cfg.data.synthetic, tmp_path, 14, seed=cfg.data.seed)
    assert [s.dataset for s in drawn[:7]] == [name.replace(".", "_") for name in SCENARIOS]
    assert all("-train-" in s.id for s in drawn) and all(s.extras["perception"] for s in drawn)

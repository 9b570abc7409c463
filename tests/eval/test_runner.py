"""The harness with a scripted backend: scoring, resumable cache, summaries and tables."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from evidra.core.errors import InvalidInputError
from evidra.core.geometry import vision_spec
from evidra.core.types import Box, EvidenceBox, Page, Sample
from evidra.eval.runner import EnvFactory, RawEpisode, RunConfig, read_cache, run_eval
from evidra.eval.tables import summarize, to_csv, to_markdown, write_tables


@dataclass
class Scripted:
    """Answers from a table, one turn per sample; counts calls to prove the cache is used."""

    replies: dict[str, str]
    calls: list[str] = field(default_factory=list)
    spec = vision_spec("qwen2_5_vl")

    def run(self, samples: Sequence[Sample], make_env: EnvFactory, cfg: RunConfig) -> list[RawEpisode]:
        out = []
        for s in samples:
            self.calls.append(s.id)
            env = make_env(s)
            env.reset(s)
            info = env.step(self.replies[s.id]).info
            out.append(RawEpisode((self.replies[s.id],), (info,), 7, True, 0.5))
        return out


def _samples(tmp_path: Path) -> list[Sample]:
    page = Page("p1", str(tmp_path / "p1.png"), 100, 200)
    box = EvidenceBox("p1", Box(10, 10, 50, 30))
    return [
        Sample(
            "a", "Who?", ("Jane Doe",), pages=(page,), gold_pages=("p1",), gold_boxes=(box,), dataset="docvqa"
        ),
        Sample("b", "When?", ("1901",), pages=(page,), gold_pages=("p1",), dataset="docvqa"),
        Sample("c", "What?", ("blue",), pages=(page,), gold_pages=("p1",), dataset="docvqa"),
    ]


REPLIES = {
    "a": "<think>read it</think><answer>Jane Doe</answer>",
    "b": "<think>x</think><answer>1902</answer>",  # ANLS: NL = 1/4 -> 0.75
    "c": "no tags at all",
}


def test_scores_cache_and_resume(tmp_path: Path) -> None:
    samples = _samples(tmp_path)
    cfg = RunConfig("docvqa", "direct", "scripted", batch_size=2)
    backend = Scripted(REPLIES)
    ticks: list[int] = []
    preds = run_eval(samples[:2], backend, cfg, tmp_path / "predictions.jsonl", progress=ticks.append)
    assert [p.answer for p in preds] == ["Jane Doe", "1902"] and ticks == [2]
    assert preds[0].scores["anls"] == 1.0 and preds[1].scores["anls"] == pytest.approx(0.75)
    assert preds[0].scores["em"] == 1.0 and preds[0].scores["evisrag_acc"] == 1.0
    assert preds[0].scores["tokens"] == 7.0 and preds[0].scores["finished"] == 1.0
    # resume: only the new sample is generated; a torn last line is skipped
    with (tmp_path / "predictions.jsonl").open("a") as fh:
        fh.write('{"benchmark": "docvqa", "sample_id": "c", "te')
    preds = run_eval(samples, backend, cfg, tmp_path / "predictions.jsonl", progress=ticks.append)
    assert backend.calls == ["a", "b", "c"] and ticks == [2, 2, 1]
    assert preds[2].answer is None and preds[2].scores["anls"] == 0.0 and preds[2].scores["format_ok"] == 0.0
    other = RunConfig("docvqa", "direct", "another-model").key
    assert read_cache(tmp_path / "predictions.jsonl", other) == {}


@pytest.mark.parametrize(
    "row",
    [
        [1, 2],
        {"sample_id": "a"},  # no texts
        {"sample_id": "a", "texts": "abc"},
        {"sample_id": "a", "texts": ["t"], "answer_box": [1, 2]},
        {"sample_id": "a", "texts": ["t"], "scores": {"anls": [1]}},
        {"sample_id": "a", "texts": ["t"], "steps": [{"text": "s", "page": "0", "box": None}]},
        {"sample_id": "a", "texts": ["t"], "infos": [{"action": "zoom", "crop": [1, 2]}]},
        {"sample_id": "a", "texts": ["t"], "infos": [{"action": "search", "query": 3}]},
    ],
)
def test_a_damaged_cache_row_is_one_line_naming_the_file(tmp_path: Path, row: object) -> None:
    key = RunConfig("docvqa", "direct", "scripted").key
    cache = tmp_path / "predictions.jsonl"
    cache.write_text(json.dumps({**key, **row} if isinstance(row, dict) else row) + "\n")
    with pytest.raises(
        InvalidInputError, match=r"predictions\.jsonl:1 .*delete predictions\.jsonl to recompute"
    ):
        read_cache(cache, key)


def test_a_cache_row_reads_back_with_its_defaults(tmp_path: Path) -> None:
    key = RunConfig("docvqa", "direct", "scripted").key
    cache = tmp_path / "predictions.jsonl"
    row = {"sample_id": "a", "texts": ["t"], "answer_box": [1, 2, 3, 4.5], "n_tokens": "7"}
    cache.write_text(json.dumps({**key, **row}) + "\n")
    (pred,) = read_cache(cache, key).values()
    assert pred.answer is None and pred.answer_box == (1.0, 2.0, 3.0, 4.5) and pred.n_tokens == 7
    assert pred.errors == () and pred.infos == () and pred.finished is True


def test_summary_and_tables(tmp_path: Path) -> None:
    samples = _samples(tmp_path)
    cfg = RunConfig("docvqa", "direct", "scripted")
    preds = run_eval(samples, Scripted(REPLIES), cfg, tmp_path / "p.jsonl")
    row = summarize(cfg.key, preds, samples)
    assert row.n == 3 and row.metrics["anls"] == pytest.approx((1 + 0.75 + 0) / 3)
    assert row.metrics["em"] == pytest.approx(1 / 3)
    low, high = row.intervals["em"]  # Wilson 95% for 1/3: [0.0615, 0.7923]
    assert low == pytest.approx(0.0615, abs=1e-4) and high == pytest.approx(0.7923, abs=1e-4)
    assert "anls" not in row.intervals  # not a 0/1 metric
    md = to_markdown([row], "official")
    assert md.splitlines()[0] == "| Method | docvqa ANLS |"
    assert md.splitlines()[2] == "| scripted / direct | 58.3 |"
    # IoU@0.5 only counts the one sample with a gold box, whose answer cited none -> 0.0
    assert to_csv([row], "lat").splitlines() == [
        "Method,docvqa EM,docvqa IoU@0.5",
        "scripted / direct,33.3,0.0",
    ]
    paths = write_tables([row], tmp_path / "out")
    assert (tmp_path / "out" / "tables.md").read_text().startswith("## evisrag")
    assert {p.name for p in paths} >= {"tables.md", "table_official.csv", "table_process.csv"}
    assert json.loads(row.to_json())["metrics"]["anls"] == pytest.approx(0.5833, abs=1e-4)


def test_breakdown_by_field_with_macro_average() -> None:
    from evidra.eval.sample_scoring import Prediction
    from evidra.eval.tables import breakdown

    samples = [
        Sample(f"q{i}", "q?", ("a",), extras={"subset": "human" if i < 3 else "augmented"}) for i in range(5)
    ]
    right = {0, 3, 4}
    preds = [
        Prediction(s.id, ("t",), "a", scores={"relaxed_accuracy": float(i in right)})
        for i, s in enumerate(samples)
    ]
    rows = breakdown({"benchmark": "chartqa", "paradigm": "direct", "model": "m"}, preds, samples, "subset")
    by = {r.benchmark: r for r in rows}
    assert by["chartqa[subset=human]"].metrics["relaxed_accuracy"] == pytest.approx(1 / 3)
    assert by["chartqa[subset=augmented]"].metrics["relaxed_accuracy"] == 1.0
    macro = by["chartqa[subset=macro]"]
    assert macro.metrics["relaxed_accuracy"] == pytest.approx((1 / 3 + 1) / 2) and macro.n == 5

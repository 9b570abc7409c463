"""The offline end-to-end demo, as a thin composition of library calls.

1. render a small synthetic corpus (text blocks, a table, a bar chart) as PDFs with a text layer;
2. ingest it into a page store;
3. build a tiny random Qwen2.5-VL checkpoint and load it like a real one;
4. answer every generated question over its document's pages (VRAG-RL's direct prompt);
5. learn: a short SFT cold start on LAT's oracle chain-of-evidence answers, then a short GRPO
   run with LAT's rewards, measuring the held-out reward before and after (``rl.quickstart``);
6. write ``report.json`` and an HTML viewer with pages, gold boxes, answers and the curves.

A random tiny model answers wrongly: the point is that every stage runs for real, offline;
the learning numbers are whatever they measure on a model of a few hundred thousand weights.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from evidra.types import Box, Sample

Progress = Callable[[str], None]


@dataclass(frozen=True)
class DemoResult:
    out_dir: Path
    report_json: Path
    report_html: Path
    pages: int
    questions: int
    parsed: int  # outputs with a well-formed <answer>
    correct: int
    seconds: float
    training: dict[str, Any] | None = None  # curves and held-out rewards of the learning stage


def _score(prediction: str | None, sample: Sample) -> bool:
    from evidra.rewards.text import exact_match, is_no_answer

    if prediction is None:
        return False
    if not sample.answerable:
        return is_no_answer(prediction)
    return any(exact_match(prediction, gold) == 1.0 for gold in sample.answers)


def _viewer_record(sample: Sample, prediction: str | None, correct: bool, output: str) -> object:
    from evidra.eval.viewer import ViewerBox, ViewerPage, ViewerRecord

    pages = []
    for page in sample.pages:
        boxes = [ViewerBox(b.box, "gold answer") for b in sample.gold_boxes if b.page_id == page.id]
        evidence = sample.extras.get("evidence_box")
        if isinstance(evidence, Box) and page.id in sample.gold_pages:
            boxes.append(ViewerBox(evidence, "evidence", "#2563eb"))
        title = f"{page.source} p.{page.page_number}"
        pages.append(ViewerPage(page.image_path, page.width, page.height, title, tuple(boxes)))
    return ViewerRecord(sample.question, prediction, sample.answers, correct, tuple(pages), output)


def run_demo(
    out_dir: str | Path,
    *,
    arch: str = "qwen2_5_vl",
    seed: int = 0,
    n_docs: int = 3,
    dpi: float = 100,
    max_new_tokens: int = 48,
    batch_size: int = 4,
    train: bool = True,
    sft_steps: int = 120,
    rl_steps: int = 15,
    progress: Progress | None = None,
) -> DemoResult:
    """Run the whole demo into ``out_dir`` and return where its report is."""
    from evidra.corpus import PageStore, ingest
    from evidra.data.synth.documents import generate_documents
    from evidra.eval.viewer import write_viewer
    from evidra.models.generation import SamplingParams, generate
    from evidra.models.loading import load_vlm
    from evidra.models.tiny import build_tiny
    from evidra.paradigms import Direct

    say = progress or (lambda _msg: None)
    start = time.perf_counter()
    out = Path(out_dir)
    say("rendering a synthetic corpus")
    corpus = generate_documents(out / "documents", n_docs=n_docs, seed=seed, dpi=dpi)
    say("ingesting it into a page store")
    report = ingest(corpus.docs_dir, out / "store", dpi=dpi)
    store = PageStore.open(out / "store")
    samples = corpus.samples({p.id: p for p in store.pages()})
    say(f"building a tiny {arch} checkpoint")
    model_dir = build_tiny(arch, out / "model", seed=seed)
    vlm = load_vlm(model_dir)
    paradigm = Direct()
    params = SamplingParams(max_new_tokens=max_new_tokens, temperature=0)
    records, rows = [], []
    for i in range(0, len(samples), batch_size):
        batch = samples[i : i + batch_size]
        say(f"answering questions {i + 1}-{i + len(batch)} of {len(samples)}")
        gens = generate(vlm, [paradigm.build_messages(s, s.pages) for s in batch], params)
        for sample, gen in zip(batch, gens, strict=True):
            parsed = paradigm.parse(gen.text)
            correct = _score(parsed.answer, sample)
            records.append(_viewer_record(sample, parsed.answer, correct, gen.text))
            rows.append(
                _row(sample, parsed.answer, correct, gen.text, list(parsed.errors), gen.finish_reason)
            )
    training = _learn(out, model_dir, seed, sft_steps, rl_steps, say) if train else None
    preamble = _training_html(training) if training else ""
    html_path = write_viewer(records, out / "report.html", title="evidra demo", preamble=preamble)  # type: ignore[arg-type]
    result = DemoResult(
        out_dir=out,
        report_json=out / "report.json",
        report_html=html_path,
        pages=len(store),
        questions=len(samples),
        parsed=sum(r["parse_errors"] == [] for r in rows),
        correct=sum(bool(r["correct"]) for r in rows),
        seconds=round(time.perf_counter() - start, 2),
        training=training,
    )
    summary = {k: str(v) if isinstance(v, Path) else v for k, v in asdict(result).items()}
    summary["ingest"] = report.summary()
    result.report_json.write_text(json.dumps({"summary": summary, "questions": rows}, indent=2))
    return result


def _learn(
    out: Path, model_dir: Path, seed: int, sft_steps: int, rl_steps: int, say: Progress
) -> dict[str, Any]:
    from evidra.rl.config import DataConfig
    from evidra.rl.quickstart import cold_start_then_grpo

    data = DataConfig(task="lat", path=str(out / "lat-data"), size=16, seed=seed)
    result = cold_start_then_grpo(
        "lat", model_dir, out / "train", data=data, sft_steps=sft_steps, rl_steps=rl_steps, progress=say
    )
    return {
        "task": "lat",
        "held_out": {name: asdict(getattr(result, name)) for name in ("before", "after_sft", "after_rl")},
        "sft_loss": list(result.sft_loss),
        "rl_reward": list(result.rl_reward),
    }


def _training_html(training: dict[str, Any]) -> str:
    import html

    from evidra.eval.charts import line_chart_svg

    held = training["held_out"]
    keys = sorted({k for h in held.values() for k in h["components"]})
    head = "".join(f"<th>{html.escape(k)}</th>" for k in ["model", "reward", *keys])
    rows = "".join(
        f"<tr><td>{html.escape(name)}</td><td>{h['reward']:.3f}</td>"
        + "".join(f"<td>{h['components'].get(k, 0.0):.3f}</td>" for k in keys)
        + "</tr>"
        for name, h in held.items()
    )
    samples = next(iter(held.values()))["samples"]
    return (
        '<div class="rec"><h2>Learning: SFT cold start, then GRPO with LAT rewards</h2>'
        f"<p>Held-out reward (greedy, {samples} samples from another seed):</p>"
        f'<table border="1" cellpadding="4"><tr>{head}</tr>{rows}</table>'
        + line_chart_svg({"SFT loss": training["sft_loss"]}, title="SFT loss per step")
        + line_chart_svg({"mean reward": training["rl_reward"]}, title="GRPO training reward per step")
        + "</div>"
    )


def _row(
    sample: Sample, prediction: str | None, correct: bool, output: str, errors: Sequence[str], finish: str
) -> dict[str, object]:
    return {
        "id": sample.id,
        "question": sample.question,
        "answers": list(sample.answers),
        "answerable": sample.answerable,
        "pages": [p.id for p in sample.pages],
        "gold_pages": list(sample.gold_pages),
        "gold_boxes": [{"page_id": b.page_id, "box": list(b.box.as_tuple())} for b in sample.gold_boxes],
        "prediction": prediction,
        "correct": correct,
        "parse_errors": list(errors),
        "finish_reason": finish,
        "output": output,
    }

"""The offline end-to-end demo, as a thin composition of library calls.

1. render a small synthetic corpus (text blocks, a table, a bar chart) as PDFs with a text
   layer and ingest it into a page store (the LAT method's own data, ``methods.lat``);
2. build a tiny random Qwen-VL checkpoint and load it like a real one;
3. answer every question with LAT's chain of evidence (each step cites a page and a box);
4. learn: an SFT cold start on LAT's oracle chain-of-evidence answers to these questions, then a
   short GRPO run with LAT's rewards (``rl.quickstart``), answering held-out questions (other
   documents of the same generator) greedily before training, after SFT and after RL;
5. answer every question again with the trained model;
6. write ``report.json`` and ``report.html``: a few held-out questions with their answer at each
   phase, then each training question with both models' answers; cited boxes on the page beside
   the gold box, the training curves and held-out rewards.

With ``model=DIR`` steps 2, 4 and 5 are replaced by one pass of that checkpoint (no training):
the same report for a real model. The tiny model learns the training questions by heart in a
minute of CPU; the held-out section shows what it does on pages it has not seen.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from evidra.core.errors import InvalidInputError
from evidra.core.types import Sample
from evidra.demo.summary import (
    HeldOutPages,
    HeldOutReward,
    ModelAnswers,
    ModelSummary,
    Training,
    write_demo_report,
)

if TYPE_CHECKING:
    from evidra.models.loading import VLM
    from evidra.rl.quickstart import HeldOut, LearningResult

Progress = Callable[[str], None]
MARKER = ".evidra-demo"  # written first into every demo folder; --overwrite clears only such folders
TASK = "lat"
# The tiny model sees pages of 112 x 112 pixels (it cannot read them at any size; fewer image
# tokens make a training step faster) and uses a rotary base that suits its 16-dim heads.
TINY_PIXELS, TINY_ROPE_THETA = 112 * 112, 1e4
SFT_BATCH = 4  # conversations per SFT step: more updates per minute of CPU than 8
DISPLAY_DPI = 144.0  # page images in the report (the model sees the 72 dpi pages of the task)
HELD_OUT = 8  # held-out questions answered at each phase of training; their mean reward is reported
HELD_OUT_SHOWN = 3  # of them, the first answerable ones shown page by page
PHASES = {"before": "before training", "after_sft": "after SFT", "after_rl": "after RL"}


@dataclass(frozen=True)
class DemoResult:
    out_dir: Path
    report_json: Path
    report_html: Path
    pages: int
    questions: int
    model: str  # what answered: the tiny model (described) or the given checkpoint folder
    answers: tuple[ModelSummary, ...]  # per model that answered: before and after training, or one
    seconds: float
    training: Training | None = None  # curves and held-out rewards of the learning stage
    held_out: tuple[ModelSummary, ...] = ()  # per phase: its answers to the held-out questions shown


def prepare_out_dir(out_dir: str | Path, *, overwrite: bool) -> Path:
    """A fresh (empty or new) folder for one demo run; with ``overwrite`` an earlier demo folder
    is cleared first. A folder that holds other files is never cleared."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise InvalidInputError(f"--out {str(out)!r} is a file; choose a folder")
    if out.exists() and any(out.iterdir()):
        if not overwrite:
            raise InvalidInputError(
                f"output folder {str(out)!r} is not empty (an earlier run?); choose a new --out folder "
                "or pass --overwrite to clear it"
            )
        if not (out / MARKER).is_file():
            raise InvalidInputError(
                f"output folder {str(out)!r} holds files that are not a demo's (no {MARKER} in it); "
                "--overwrite clears only demo folders: choose a new --out folder"
            )
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / MARKER).write_text("written by `evidra demo`; --overwrite may clear this folder\n")
    return out


def _score(prediction: str | None, sample: Sample) -> bool:
    from evidra.metrics.text import exact_match, is_no_answer

    if prediction is None:
        return False
    if not sample.answerable:
        return is_no_answer(prediction)
    return any(exact_match(prediction, gold) == 1.0 for gold in sample.answers)


def answer_all(
    vlm: VLM, name: str, samples: Sequence[Sample], *, max_new_tokens: int, batch_size: int, say: Progress
) -> ModelAnswers:
    """Greedy chain-of-evidence answers of ``vlm`` to every sample, parsed and scored."""
    from evidra.methods.lat.paradigm import ChainOfEvidence
    from evidra.models.generation import SamplingParams, generate

    paradigm = ChainOfEvidence()
    params = SamplingParams(max_new_tokens=max_new_tokens, temperature=0)
    texts, finishes = [], []
    vlm.model.eval()
    for i in range(0, len(samples), batch_size):
        batch = samples[i : i + batch_size]
        say(f"{name}: answering questions {i + 1}-{i + len(batch)} of {len(samples)}")
        for gen in generate(vlm, [paradigm.build_messages(s, s.pages) for s in batch], params):
            texts.append(gen.text)
            finishes.append(gen.finish_reason)
    parsed = tuple(paradigm.parse(t) for t in texts)
    correct = tuple(_score(p.answer, s) for p, s in zip(parsed, samples, strict=True))
    return ModelAnswers(name, parsed, correct, tuple(finishes))


def _questions(n_docs: int, seed: int, out: Path) -> tuple[list[Sample], Path]:
    """The LAT task's synthetic questions over ``n_docs`` documents, each once, and the folder
    of their PDFs."""
    from evidra.data.synth.documents import DOCS_DIR
    from evidra.methods import build_task
    from evidra.methods._synth import QUESTIONS_PER_DOC, cache_dir
    from evidra.rl.run_config import DataConfig

    data = DataConfig(path=str(out / "data"), size=n_docs * QUESTIONS_PER_DOC, seed=seed)
    unique = {s.id: s for s in build_task({"name": TASK}).samples(data)}
    return list(unique.values()), cache_dir(data) / "corpus" / DOCS_DIR


def _display_images(samples: Sequence[Sample], docs_dir: Path, out: Path) -> dict[str, str]:
    """Each page re-rendered from its PDF at ``DISPLAY_DPI`` into ``out/images`` (readable when
    enlarged; boxes stay in the task's page pixels, the viewer scales them)."""
    from evidra.corpus import Limits, shared_pool

    folder = out / "images"
    folder.mkdir(exist_ok=True)
    wanted = {(p.source, p.page_number): p.id for s in samples for p in s.pages}
    paths: dict[str, str] = {}
    limits = Limits()
    workers = shared_pool(limits.max_worker_bytes)  # PDFium runs capped in a worker, as for ingest
    for source in sorted({src for src, _ in wanted}):
        data = (docs_dir / source).read_bytes()
        for rendered in workers.render("pdf", data, source, DISPLAY_DPI, limits):
            page_id = wanted.get((source, rendered.page_number))
            if page_id is not None:
                path = folder / f"{page_id}.png"
                rendered.image.save(path, optimize=True)
                paths[page_id] = str(path)
    return paths


def run_demo(
    out_dir: str | Path,
    *,
    arch: str = "qwen2_5_vl",
    model: str | Path | None = None,
    seed: int = 0,
    n_docs: int = 3,
    max_new_tokens: int = 256,
    batch_size: int = 8,
    train: bool = True,
    sft_steps: int = 200,
    rl_steps: int = 6,
    overwrite: bool = False,
    progress: Progress | None = None,
) -> DemoResult:
    """Run the whole demo into ``out_dir`` (new or empty; ``overwrite`` clears an earlier demo
    folder) and return where its report is. ``model``: answer with that checkpoint, no training."""
    from evidra.models.loading import load_vlm

    say = progress or (lambda _msg: None)
    start = time.perf_counter()
    given = _resolve_model(model) if model is not None else None  # fail before anything is written
    out = prepare_out_dir(out_dir, overwrite=overwrite)
    say("rendering and ingesting a synthetic corpus")
    samples, docs_dir = _questions(n_docs, seed, out)
    images = _display_images(samples, docs_dir, out)
    ask = _Answering(samples, max_new_tokens, batch_size, say)
    training: Training | None = None
    held: HeldOutPages | None = None
    if given is not None:
        say(f"loading {model}")
        model_name = str(model)
        answers = [ask(load_vlm(given), f"checkpoint {model}")]
    else:
        model_name, answers, learned = _tiny_run(
            out, arch, seed, (sft_steps, rl_steps) if train else None, ask
        )
        if learned is not None:
            training, held = learned.training, learned.held_out
            images.update(_display_images(held.samples, learned.held_out_docs, out))
    say("writing the report")
    html_path = write_demo_report(
        out / "report.html",
        samples,
        answers,
        images,
        model_name=model_name,
        training=training,
        given_model=given is not None,
        held_out=held,
    )
    result = DemoResult(
        out_dir=out,
        report_json=out / "report.json",
        report_html=html_path,
        pages=len({p.id for s in samples for p in s.pages}),
        questions=len(samples),
        model=model_name,
        answers=tuple(a.summary() for a in answers),
        seconds=round(time.perf_counter() - start, 2),
        training=training,
        held_out=tuple(a.summary() for a in held.answers) if held else (),
    )
    summary = {k: str(v) if isinstance(v, Path) else v for k, v in asdict(result).items()}
    rows = [_row(s, i, answers) for i, s in enumerate(samples)]
    held_rows = [_row(s, i, held.answers) for i, s in enumerate(held.samples)] if held else []
    report = {"summary": summary, "held_out_questions": held_rows, "questions": rows}
    result.report_json.write_text(json.dumps(report, indent=2))
    return result


@dataclass(frozen=True)
class _Answering:
    """How every model of one run answers the demo's questions."""

    samples: Sequence[Sample]
    max_new_tokens: int
    batch_size: int
    say: Progress

    def __call__(self, vlm: VLM, name: str) -> ModelAnswers:
        return answer_all(
            vlm,
            name,
            self.samples,
            max_new_tokens=self.max_new_tokens,
            batch_size=self.batch_size,
            say=self.say,
        )


@dataclass(frozen=True)
class _Learned:
    """What the learning stage gives the report."""

    training: Training  # curves and held-out rewards (report.json's summary.training)
    model_dir: str  # the trained model
    held_out: HeldOutPages
    held_out_docs: Path  # the folder of the held-out questions' PDFs


def _tiny_run(
    out: Path, arch: str, seed: int, steps: tuple[int, int] | None, ask: _Answering
) -> tuple[str, list[ModelAnswers], _Learned | None]:
    """A tiny random model answers, learns (``steps``: SFT and GRPO steps, or None) and answers again."""
    from evidra.models.loading import load_vlm
    from evidra.models.tiny import build_tiny

    ask.say(f"building a tiny {arch} checkpoint")
    model_dir = build_tiny(arch, out / "model", seed=seed, max_pixels=TINY_PIXELS, rope_theta=TINY_ROPE_THETA)
    base = load_vlm(model_dir)
    weights = sum(p.numel() for p in base.model.parameters())
    name = f"a tiny random {arch} of {weights / 1e6:.2f}M weights, built from a config"
    answers = [ask(base, "before training")]
    if steps is None:
        return name, answers, None
    learned = _learn(out, model_dir, len(ask.samples), seed, *steps, ask.max_new_tokens, ask.say)
    answers.append(ask(load_vlm(learned.model_dir), "after training"))
    return name, answers, learned


def _resolve_model(model: str | Path) -> str:
    from evidra.rl.runs.export import resolve_trained_model

    return resolve_trained_model(model)


def _learn(
    out: Path,
    model_dir: Path,
    size: int,
    seed: int,
    sft_steps: int,
    rl_steps: int,
    max_new_tokens: int,
    say: Progress,
) -> _Learned:
    """SFT on the oracle answers to the demo's questions, then GRPO; the trained model's folder
    and its held-out answers at each phase."""
    from evidra.data.synth.documents import DOCS_DIR
    from evidra.methods import build_task
    from evidra.methods._synth import cache_dir
    from evidra.rl.quickstart import cold_start_then_grpo, held_out_data
    from evidra.rl.run_config import DataConfig
    from evidra.rl.runs.export import resolve_trained_model

    data = DataConfig(path=str(out / "data"), size=size, seed=seed)
    task = build_task({"name": TASK})
    result = cold_start_then_grpo(
        task,
        model_dir,
        out / "train",
        data=data,
        overrides=[f"method.name={TASK}"],
        held_out=HELD_OUT,
        sft_steps=sft_steps,
        sft_batch_size=SFT_BATCH,
        rl_steps=rl_steps,
        max_new_tokens=max_new_tokens,
        progress=say,
    )
    training: Training = {
        "task": TASK,
        "sft_steps": sft_steps,
        "rl_steps": rl_steps,
        "train_questions": size,
        "held_out": {key: _mean_reward(getattr(result, key)) for key in PHASES},
        "sft_loss": list(result.sft_loss),
        "rl_reward": list(result.rl_reward),
    }
    trained = result.model_dir if rl_steps > 0 else out / "train" / "sft-model"
    docs = cache_dir(held_out_data(data, HELD_OUT)) / "corpus" / DOCS_DIR
    return _Learned(training, resolve_trained_model(trained), _held_out_pages(result), docs)


def _mean_reward(held: HeldOut) -> HeldOutReward:
    return {"reward": held.reward, "components": held.components, "samples": held.samples}


def _held_out_pages(result: LearningResult) -> HeldOutPages:
    """The first ``HELD_OUT_SHOWN`` answerable held-out questions (each once) and, per phase of
    training, the greedy answers to them that the held-out reward scored."""
    from evidra.methods.lat.paradigm import ChainOfEvidence

    shown = _first_answerable(result.held_out_samples, HELD_OUT_SHOWN)
    samples = tuple(result.held_out_samples[k] for k in shown)
    parse = ChainOfEvidence().parse
    answers = []
    for key, name in PHASES.items():
        held: HeldOut = getattr(result, key)
        parsed = tuple(parse(held.outputs[k]) for k in shown)
        correct = tuple(_score(p.answer, s) for p, s in zip(parsed, samples, strict=True))
        finish = tuple("length" if held.truncated[k] else "stop" for k in shown)
        answers.append(ModelAnswers(name, parsed, correct, finish))
    return HeldOutPages(samples, tuple(answers), len(result.held_out_samples))


def _first_answerable(samples: Sequence[Sample], n: int) -> list[int]:
    """The indices of the first ``n`` samples with a gold box, each question once (the held-out
    set repeats its questions when its documents have fewer than it asks for)."""
    seen: set[str] = set()
    picked: list[int] = []
    for k, s in enumerate(samples):
        if s.gold_boxes and s.id not in seen and len(picked) < n:
            picked.append(k)
        seen.add(s.id)
    return picked


def _row(sample: Sample, index: int, answers: Sequence[ModelAnswers]) -> dict[str, object]:
    return {
        "id": sample.id,
        "question": sample.question,
        "answers": list(sample.answers),
        "answerable": sample.answerable,
        "pages": [p.id for p in sample.pages],
        "gold_pages": list(sample.gold_pages),
        "gold_boxes": [{"page_id": b.page_id, "box": list(b.box.as_tuple())} for b in sample.gold_boxes],
        "models": {a.name: a.row(sample, index) for a in answers},
    }

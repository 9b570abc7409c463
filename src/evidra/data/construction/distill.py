"""Cold-start trajectory distillation from a teacher behind an OpenAI-compatible endpoint.

``distill`` prompts a teacher with a paradigm and keeps what a filter accepts; a method names
its paradigm and filter (``evidra.methods.Method.distill``). The three filters of the papers
differ only in how a teacher output is judged and what is kept:

* ``lat_filter`` — LAT Stage I (§3.2): the teacher writes CoE traces for the CoE prompt (the paper
  used Gemini 2.5 Pro with two CoE exemplars, pass them as ``exemplars``); keep traces whose
  answer recall |a ∩ a_gt| / |a_gt| (LAT Eq. 2) reaches ``gamma``. The paper gives no value
  for gamma; 0.5 is our default. (The paper then verifies boxes by hand, which is not automated.)
* ``evisrag_filter`` — EVisRAG App. A.1: keep trajectories that reach the right answer (EVisRAG's
  ``acc``: gold tokens contained in the prediction; "insufficient to answer" for insufficient
  context) and store their ``<evidence>`` block as the gold evidence.
* ``vragrl_filter`` — VRAG-RL App. D: a large model writes the trajectory; each region it selects
  (``<bbox>`` action) is re-located by a grounding model (``annotator``, the paper used
  Qwen2.5-VL-72B) guided by the teacher's thought, and the trajectory is kept if it answers
  correctly (ANLS >= 0.5 against the gold answers).

Output is JSONL, one row per sample id, accepted or not, so a rerun skips every id already in
the file (resumable); at most ``concurrency`` requests run at a time (a thread pool).
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evidra.errors import InvalidInputError
from evidra.jsonio import read_json_lines, read_lines
from evidra.metrics.anls import anls
from evidra.metrics.qa import evaluate_predictions
from evidra.metrics.text import INSUFFICIENT_ANSWER, is_no_answer, normalize_lat, token_recall
from evidra.models.endpoint import ChatEndpoint, EndpointError
from evidra.paradigms.base import Paradigm
from evidra.rewards.evisrag import split_block
from evidra.types import ImagePart, Message, Sample, TextPart, messages_to_json

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Verdict:
    accepted: bool
    response: str  # the (possibly re-annotated) trajectory text to train on
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class DistillContext:
    """What a recipe may use besides the teacher's text."""

    paradigm: Paradigm
    gamma: float = 0.5
    annotator: ChatEndpoint | None = None


Filter = Callable[[Sample, str, DistillContext], Verdict]  # keeps a teacher trajectory or not


def lat_filter(sample: Sample, text: str, ctx: DistillContext) -> Verdict:
    answer = ctx.paradigm.parse(text).answer or ""
    if not sample.answerable:
        return Verdict(is_no_answer(answer), text, {"recall": float(is_no_answer(answer))})
    recall = max((token_recall(normalize_lat(answer), normalize_lat(g)) for g in sample.answers), default=0.0)
    return Verdict(recall >= ctx.gamma, text, {"recall": recall})  # LAT Eq. 2, "recall above gamma"


def evisrag_filter(sample: Sample, text: str, ctx: DistillContext) -> Verdict:
    answer = ctx.paradigm.parse(text).answer or ""
    insufficient = sample.sufficient is False or not sample.answerable
    golds = [INSUFFICIENT_ANSWER] if insufficient else list(sample.answers)
    ok = bool(evaluate_predictions(answer, golds)["acc"])
    return Verdict(ok, text, {"evidence": split_block(text, "evidence")})


_BBOX = re.compile(r"<bbox>(.*?)</bbox>", re.DOTALL)
_NUMBERS = re.compile(r"-?\d+(?:\.\d+)?")
GROUNDING_PROMPT = (
    "The reasoning below needs a region of this image. Output only its bounding box as a JSON list "
    "[x1, y1, x2, y2] in pixels.\nReasoning: {thought}"
)


def _reground(sample: Sample, text: str, ctx: DistillContext) -> tuple[str, list[dict[str, Any]]]:
    """Replace each ``<bbox>`` of the trajectory with the grounding model's box for it."""
    if ctx.annotator is None or not sample.pages:
        return text, []
    changes: list[dict[str, Any]] = []
    annotator = ctx.annotator

    def swap(m: re.Match[str]) -> str:
        thought = text[: m.start()].rsplit("<think>", 1)[-1].split("</think>")[0].strip()
        page = sample.pages[0]  # VRAG-RL crops from the image just observed; one page in this loop
        msg = Message(
            "user",
            (ImagePart(page.image_path, page_id=page.id), TextPart(GROUNDING_PROMPT.format(thought=thought))),
        )
        reply = annotator.complete([msg], max_tokens=64).text
        numbers = _NUMBERS.findall(reply)
        if len(numbers) < 4:
            changes.append({"original": m.group(1), "regrounded": None})
            return m.group(0)
        box = "[" + ", ".join(numbers[:4]) + "]"
        changes.append({"original": m.group(1).strip(), "regrounded": box})
        return f"<bbox>{box}</bbox>"

    return _BBOX.sub(swap, text), changes


def vragrl_filter(sample: Sample, text: str, ctx: DistillContext) -> Verdict:
    text, changes = _reground(sample, text, ctx)
    answer = ctx.paradigm.parse(text).answer
    if answer is None:  # multi-action outputs: the answer block anywhere in the trajectory
        found = re.search(r"<answer>(.*?)</answer>", text, re.DOTALL)
        answer = found.group(1).strip() if found else ""
    ok = bool(sample.answers) and anls(answer, sample.answers) >= 0.5
    return Verdict(ok, text, {"regrounded": changes})


def done_ids(path: Path) -> set[str]:
    """Ids already in the output (accepted or rejected); torn lines are ignored."""
    ids: set[str] = set()
    if path.is_file():
        for _, line in read_lines(path, "distillation output"):
            try:
                ids.add(str(json.loads(line)["id"]))
            except (ValueError, KeyError, TypeError):  # torn, not UTF-8, or no id
                continue
    return ids


def run_pool(
    work: Callable[[Sample], None],
    todo: Sequence[Sample],
    concurrency: int,
    progress: Callable[[int], None] | None,
) -> None:
    """``work`` on every sample, ``concurrency`` at a time; ``progress(1)`` on this thread as each
    finishes, in completion order (a slow sample does not hold the count back)."""
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        for future in as_completed([pool.submit(work, s) for s in todo]):
            future.result()  # an unexpected error in a worker stops the run, as it would unthreaded
            if progress is not None:
                progress(1)


def _row(sample: Sample, method: str, verdict: Verdict, teacher_text: str, prompt: Sequence[Message]) -> str:
    """One output line: the SFT prompt (without demonstrations), the kept response, the verdict."""
    return json.dumps({
        "id": sample.id, "method": method, "accepted": verdict.accepted, "answers": list(sample.answers),
        "prompt": messages_to_json(prompt), "response": verdict.response, "teacher_response": teacher_text,
        "meta": verdict.meta,
    })  # fmt: skip


@dataclass(frozen=True)
class DistillReport:
    attempted: int
    accepted: int
    skipped: int
    failed: int


def distill(
    samples: Sequence[Sample],
    teacher: ChatEndpoint,
    out: str | Path,
    *,
    method: str,
    paradigm: Paradigm,
    keep: Filter,
    gamma: float = 0.5,
    annotator: ChatEndpoint | None = None,
    exemplars: Sequence[Message] = (),
    concurrency: int = 4,
    max_tokens: int = 1024,
    temperature: float = 0.7,
    progress: Callable[[int], None] | None = None,
) -> DistillReport:
    """Query the teacher (prompted by ``paradigm``) for every sample not yet in ``out``; append
    one JSONL row per sample, labelled ``method``, accepted when ``keep`` accepts it.

    ``progress(n)`` counts samples: first those already in ``out`` (when any), then one per
    sample as its query finishes, ``len(samples)`` in all.
    """
    if concurrency < 1:
        raise InvalidInputError(f"concurrency must be >= 1, got {concurrency}")
    ctx = DistillContext(paradigm, gamma, annotator)
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    seen = done_ids(path)
    todo = [s for s in samples if s.id not in seen]
    if progress is not None and len(todo) < len(samples):
        progress(len(samples) - len(todo))
    lock = threading.Lock()
    counts = {"accepted": 0, "failed": 0}

    def work(sample: Sample) -> None:
        messages = [*exemplars, *ctx.paradigm.build_messages(sample, sample.pages)]
        try:
            reply = teacher.complete(messages, max_tokens=max_tokens, temperature=temperature)
            verdict = keep(sample, reply.text, ctx)
        except EndpointError as exc:
            logger.warning("teacher failed on %s: %s", sample.id, exc)
            with lock:
                counts["failed"] += 1
            return  # not written: a rerun retries it
        row = _row(sample, method, verdict, reply.text, messages[len(exemplars) :])
        with lock:
            with path.open("a", encoding="utf-8") as fh:
                fh.write(row + "\n")
            counts["accepted"] += int(verdict.accepted)

    run_pool(work, todo, concurrency, progress)
    return DistillReport(len(todo), counts["accepted"], len(samples) - len(todo), counts["failed"])


def accepted_records(path: str | Path) -> list[dict[str, Any]]:
    """The accepted rows of a distillation file (the SFT cold-start set)."""
    rows = [row for _, row in read_json_lines(path, "distillation file")]
    return [r for r in rows if r.get("accepted")]

"""Cold-start trajectory distillation from a teacher behind an OpenAI-compatible endpoint.

``distill`` prompts a teacher with a paradigm and keeps what a filter accepts; a method names
its paradigm and filter (``evidra.methods.Method.distill``; each paper's filter lives in its folder,
``methods/<paper>/construction.py``). A filter differs from another only in how a teacher output is
judged and what is kept.

Output is JSONL, one row per sample id, accepted or not, so a rerun skips every id already in
the file (resumable); at most ``concurrency`` requests run at a time (a thread pool).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

from evidra.core.errors import InvalidInputError
from evidra.core.jsonvalue import JSONObject, as_object
from evidra.core.types import Message, Sample, messages_to_json
from evidra.models.endpoint import ChatEndpoint, EndpointError
from evidra.paradigms.paradigm import Paradigm
from evidra.safeio.jsonfiles import read_json_lines, read_lines

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Verdict:
    accepted: bool
    response: str  # the (possibly re-annotated) trajectory text to train on
    meta: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class DistillContext:
    """What a recipe may use besides the teacher's text."""

    paradigm: Paradigm
    gamma: float = 0.5
    annotator: ChatEndpoint | None = None


Filter = Callable[[Sample, str, DistillContext], Verdict]  # keeps a teacher trajectory or not


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
    return json.dumps(
        {
            "id": sample.id,
            "method": method,
            "accepted": verdict.accepted,
            "answers": list(sample.answers),
            "prompt": messages_to_json(prompt),
            "response": verdict.response,
            "teacher_response": teacher_text,
            "meta": verdict.meta,
        }
    )


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


def accepted_records(path: str | Path) -> list[JSONObject]:
    """The accepted rows of a distillation file (the SFT cold-start set)."""
    where = f"distillation file {str(path)!r} line"
    rows = [as_object(row, f"{where} {n}") for n, row in read_json_lines(path, "distillation file")]
    return [r for r in rows if r.get("accepted")]

"""The evaluation harness: benchmark x paradigm x model, batched and resumable.

A run prompts every sample through its paradigm's environment (single-turn by default, or any
environment factory for agents), with either a local checkpoint (``LocalModel``: the RL rollout
loop, greedy, batched) or an OpenAI-compatible endpoint (``EndpointModel``: the same episode
loop over chat messages, bounded concurrency). Each finished sample is appended to a JSONL cache
(``predictions.jsonl``) with its scores, so an interrupted run resumes where it stopped; rows
from a different benchmark/paradigm/model in the same file are ignored. The library reports
progress through a callback; the CLI draws the bar.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from evidra.core.box_formats import BoxFormat
from evidra.core.errors import InvalidInputError
from evidra.core.geometry import ImageFrame, VisionSpec, clip_box, convert_box, model_input_size
from evidra.core.jsonfields import get_list, get_opt_int, get_opt_str
from evidra.core.jsonvalue import JSON, json_kind, need_float, need_int, need_object
from evidra.core.types import Box, CoordSpace, Message, Page, Parsed, Sample, Span
from evidra.env.environment import Environment, ReadsBoxes, StepInfo
from evidra.env.single_turn import SingleTurnEnv
from evidra.eval.sample_scoring import ExtraScorer, Prediction, StepBox, score
from evidra.models.endpoint import ChatEndpoint
from evidra.models.generation import SamplingParams
from evidra.models.loading import VLM
from evidra.paradigms.paradigm import PARADIGMS, Paradigm
from evidra.safeio.jsonfiles import read_lines

logger = logging.getLogger(__name__)

EnvFactory = Callable[[Sample], Environment]


@dataclass(frozen=True)
class RunConfig:
    """One evaluation run; the key (benchmark, paradigm, model) identifies its cache rows."""

    benchmark: str
    paradigm: str
    model: str
    batch_size: int = 4
    max_turns: int = 1
    max_new_tokens: int = 256
    max_response_tokens: int = 2048
    temperature: float = 0.0  # greedy, as the papers evaluate
    seed: int = 0
    # how this run's prompts differ from the paradigm's defaults (e.g. "top3,toolbox=curated"):
    # part of the cache key and of the result row's paradigm, so variants never share rows
    variant: str = ""

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.max_turns < 1:
            raise InvalidInputError(f"batch_size and max_turns must be >= 1, got {self}")

    @property
    def key(self) -> dict[str, str]:
        paradigm = f"{self.paradigm}[{self.variant}]" if self.variant else self.paradigm
        return {"benchmark": self.benchmark, "paradigm": paradigm, "model": self.model}


@dataclass(frozen=True)
class RawEpisode:
    """What a model backend returns for one sample before parsing."""

    texts: tuple[str, ...]
    infos: tuple[StepInfo, ...]
    n_tokens: int
    finished: bool
    latency_s: float
    # the environment's parse of each turn (None: it parsed none) and its parser, reused by
    # ``to_prediction`` when it is the evaluation's own, so each turn is parsed once
    parsed: tuple[Parsed | None, ...] = ()
    parser: Callable[[str], Parsed] | None = None


class ModelBackend(Protocol):
    @property
    def spec(self) -> VisionSpec:
        """How the model's box coordinates map back to page pixels."""

    def run(self, samples: Sequence[Sample], make_env: EnvFactory, cfg: RunConfig) -> list[RawEpisode]: ...


@dataclass(frozen=True)
class LocalModel:
    """A local checkpoint (``evidra.models.load_vlm``) through ``evidra.rollout``."""

    vlm: VLM
    box_format: BoxFormat | None = None  # given (--box-format): its boxes read by that convention

    @property
    def spec(self) -> VisionSpec:
        if self.vlm.spec is None:
            raise InvalidInputError(
                f"{self.vlm.path} is a text-only {self.vlm.arch} policy; evaluation maps boxes on pages "
                "and needs a Qwen-VL checkpoint"
            )
        return self.vlm.spec

    def run(self, samples: Sequence[Sample], make_env: EnvFactory, cfg: RunConfig) -> list[RawEpisode]:
        from evidra.rollout import HFBackend, RolloutLimits, rollout

        params = SamplingParams(max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature, seed=cfg.seed)
        limits = RolloutLimits(cfg.max_turns, cfg.max_new_tokens, cfg.max_response_tokens)
        start = time.perf_counter()
        episodes = rollout(HFBackend(self.vlm), make_env, samples, 1, params, limits)
        per_sample = (time.perf_counter() - start) / max(len(samples), 1)  # batched: share the wall time
        return [
            RawEpisode(
                ep.trajectory.texts,
                ep.infos,
                sum(ep.trajectory.policy_mask),
                ep.trajectory.finished and not _hit_cap(ep.trajectory.turns, cfg.max_new_tokens),
                per_sample,
                ep.parsed,
                ep.parser,
            )
            for ep in episodes
        ]


def _hit_cap(turns: Sequence[Span], max_new_tokens: int) -> bool:
    """The last turn stopped at the token limit: the answer was cut, not finished."""
    return bool(turns) and turns[-1].end - turns[-1].start >= max_new_tokens


@dataclass(frozen=True)
class EndpointModel:
    """An OpenAI-compatible endpoint; episodes run as chat turns, ``workers`` at a time."""

    endpoint: ChatEndpoint
    spec: VisionSpec
    workers: int = 4
    box_format: BoxFormat | None = None  # the served model's convention (its family's, or --box-format)

    def _episode(self, sample: Sample, make_env: EnvFactory, cfg: RunConfig) -> RawEpisode:
        env = make_env(sample)
        messages = list(env.reset(sample))
        texts: list[str] = []
        infos: list[StepInfo] = []
        parsed: list[Parsed | None] = []
        tokens, latency, done = 0, 0.0, False
        for _ in range(cfg.max_turns):
            c = self.endpoint.complete(
                messages, max_tokens=cfg.max_new_tokens, temperature=cfg.temperature, stop=env.stop
            )
            texts.append(c.text)
            tokens, latency = tokens + c.completion_tokens, latency + c.latency_s
            result = env.step(c.text)
            infos.append(result.info)
            parsed.append(result.parsed)
            if result.done:
                done = c.finish_reason != "length"
                break
            messages += [Message.text("assistant", c.text), *result.observation]
        paradigm = getattr(env, "paradigm", None)  # environments that parse hold their paradigm
        parser = paradigm.parse if paradigm is not None else None
        return RawEpisode(tuple(texts), tuple(infos), tokens, done, latency, tuple(parsed), parser)

    def run(self, samples: Sequence[Sample], make_env: EnvFactory, cfg: RunConfig) -> list[RawEpisode]:
        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            return list(pool.map(lambda s: self._episode(s, make_env, cfg), samples))


@dataclass(frozen=True)
class BoxReading:
    """How a prediction's boxes reach page pixels: the model's resize, and the box convention of the
    model's family when it is known (an endpoint's, or one the user named)."""

    spec: VisionSpec
    box_format: BoxFormat | None = None
    in_process: bool = False  # the model saw pages through ``spec`` (its own processor)

    def page_box(self, box: Box | None, page: Page | None) -> tuple[float, float, float, float] | None:
        """A parsed box in page pixels of ``page`` (clipped), or None when it cannot be placed. A box
        the paradigm reads as page pixels (LAT's chain of evidence states each page's size) stays;
        any other goes through the model's box convention when one is known, else through ``spec``."""
        if box is None or page is None:
            return None
        if box.space is CoordSpace.PAGE:
            return clip_box(box, page.width, page.height).as_tuple()
        if self.box_format is None:
            box = convert_box(box, CoordSpace.PAGE, ImageFrame.for_page(page.width, page.height, self.spec))
            return clip_box(box, page.width, page.height).as_tuple()
        seen = model_input_size(page.width, page.height, self.spec) if self.in_process else None
        mapped = self.box_format.to_page(box.as_tuple(), (page.width, page.height), seen)
        return mapped.box.as_tuple() if mapped.box is not None else None


def _page_at(sample: Sample, index: int | None) -> Page | None:
    return sample.pages[index] if index is not None and 0 <= index < len(sample.pages) else None


def _turns_parsed(raw: RawEpisode, paradigm: Paradigm) -> list[Parsed]:
    from evidra.rollout.loop import same_parser

    reuse = (
        raw.parser is not None
        and len(raw.parsed) == len(raw.texts)
        and same_parser(raw.parser, paradigm.parse)
    )
    known = raw.parsed if reuse else (None,) * len(raw.texts)
    return [p if p is not None else paradigm.parse(t) for t, p in zip(raw.texts, known, strict=True)]


def to_prediction(
    sample: Sample,
    raw: RawEpisode,
    paradigm: Paradigm,
    spec: VisionSpec | BoxReading,
    extra: Sequence[ExtraScorer] = (),
) -> Prediction:
    """Parse every turn (reusing the environment's parse when it used this paradigm's parser);
    the answer (and its box) comes from the last turn that gave one. ``spec`` places the boxes on
    the pages (a ``BoxReading`` when the model's box convention is known)."""
    reading = spec if isinstance(spec, BoxReading) else BoxReading(spec)
    parsed = _turns_parsed(raw, paradigm)
    final = next((p for p in reversed(parsed) if p.answer is not None), parsed[-1] if parsed else None)
    steps = tuple(
        StepBox(s.text, s.page_index, reading.page_box(s.box, _page_at(sample, s.page_index)))
        for p in parsed
        for s in p.steps
    )
    page = final.answer_page if final is not None else None
    if page is None and len(sample.pages) == 1:
        page = 0  # single-image prompts cite no page number
    box = reading.page_box(final.answer_box, _page_at(sample, page)) if final is not None else None
    pred = Prediction(
        sample_id=sample.id,
        texts=raw.texts,
        answer=final.answer if final else None,
        answer_page=page,
        answer_box=box,
        steps=steps,
        infos=raw.infos,
        errors=final.errors if final else ("no output",),
        n_tokens=raw.n_tokens,
        latency_s=raw.latency_s,
        finished=raw.finished,
    )
    return dataclasses.replace(pred, scores=score(sample, pred, extra))


def prediction_to_json(p: Prediction, key: Mapping[str, str]) -> str:
    row = {f.name: getattr(p, f.name) for f in dataclasses.fields(p)}
    row["infos"] = [i.to_json() for i in p.infos]
    row["steps"] = [{"text": s.text, "page": s.page, "box": s.box} for s in p.steps]
    row["scores"] = dict(p.scores)
    return json.dumps({**key, **row}, default=str)


def _box(value: JSON) -> tuple[float, float, float, float] | None:
    """A stored box: four numbers, or None for any empty value."""
    if not value:
        return None
    if not isinstance(value, list) or len(value) < 4:
        raise TypeError(f"a box is {json_kind(value)}, not [x1, y1, x2, y2]")
    x1, y1, x2, y2 = (need_float(v, "a box coordinate") for v in value[:4])
    return x1, y1, x2, y2


def _texts(value: JSON, what: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise TypeError(f"{what} is {json_kind(value)}, not a list of text")
    return tuple(str(v) for v in value)


def _step(value: JSON) -> StepBox:
    step = need_object(value, "a step")
    text, page = step["text"], step["page"]
    if not isinstance(text, str) or (page is not None and not isinstance(page, int)):
        raise TypeError(f"a step's text is {json_kind(text)} and its page {json_kind(page)}")
    return StepBox(text, page, _box(step["box"]))


def prediction_from_json(row: Mapping[str, JSON]) -> Prediction:
    """A prediction cache row (``prediction_to_json``); a field of another kind is a ``TypeError``
    or ``KeyError`` naming it."""
    scores = need_object(row.get("scores", {}), "scores")
    return Prediction(
        sample_id=str(row["sample_id"]),
        texts=_texts(row["texts"], "texts"),
        answer=get_opt_str(row, "answer"),
        answer_page=get_opt_int(row, "answer_page"),
        answer_box=_box(row.get("answer_box")),
        steps=tuple(_step(s) for s in get_list(row, "steps")),
        infos=tuple(StepInfo.from_json(need_object(i, "a step info")) for i in get_list(row, "infos")),
        errors=_texts(row.get("errors", []), "errors"),
        n_tokens=need_int(row.get("n_tokens", 0), "n_tokens"),
        latency_s=need_float(row.get("latency_s", 0.0), "latency_s"),
        finished=bool(row.get("finished", True)),
        scores={k: need_float(v, f"score {k!r}") for k, v in scores.items()},
    )


def read_cache(path: Path, key: Mapping[str, str]) -> dict[str, Prediction]:
    """Cached predictions of this run (same benchmark, paradigm, model); torn lines are skipped."""
    done: dict[str, Prediction] = {}
    if not path.is_file():
        return done
    for n, line in read_lines(path, "prediction cache"):
        try:
            row = json.loads(line)
        except ValueError:  # torn by a killed run, or not UTF-8
            logger.warning("%s:%d: skipping a torn cache line", path, n)
            continue
        if not isinstance(row, dict):
            raise InvalidInputError(
                f"{path}:{n} is {json_kind(row)}, not a prediction row; delete {path.name} to recompute"
            )
        if all(row.get(k) == v for k, v in key.items()):
            try:
                done[str(row["sample_id"])] = prediction_from_json(row)
            except (KeyError, TypeError, ValueError) as exc:
                raise InvalidInputError(
                    f"{path}:{n} is not a prediction row ({type(exc).__name__}: {exc}); "
                    f"delete {path.name} to recompute"
                ) from None
    return done


def _batches(items: Sequence[Sample], size: int) -> Iterator[Sequence[Sample]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def run_eval(
    samples: Sequence[Sample],
    model: ModelBackend,
    cfg: RunConfig,
    cache: str | Path,
    *,
    make_env: EnvFactory | None = None,
    progress: Callable[[int], None] | None = None,
    extra_scores: Sequence[ExtraScorer] = (),
    paradigm: Paradigm | None = None,
) -> list[Prediction]:
    """Predictions for ``samples`` in order, reusing and extending the JSONL ``cache``.

    ``extra_scores`` add per-sample metrics that need models (LAT's SA: ``stepwise_attribution_scorer``).
    ``paradigm`` replaces the registered ``cfg.paradigm``'s default instance (e.g. Lang2Act's
    paradigm with a curated toolbox: ``toolchain.with_toolbox``); name it in ``cfg.variant``.
    """
    paradigm = paradigm if paradigm is not None else PARADIGMS.get(cfg.paradigm)()
    fmt = getattr(model, "box_format", None)
    factory = boxes_read_as(make_env or (lambda s: SingleTurnEnv(paradigm)), fmt)
    path = Path(cache)
    path.parent.mkdir(parents=True, exist_ok=True)
    done = read_cache(path, cfg.key)
    if progress and done:
        progress(sum(1 for s in samples if s.id in done))
    todo = [s for s in samples if s.id not in done]
    logger.info("%s: %d cached, %d to run", " / ".join(cfg.key.values()), len(samples) - len(todo), len(todo))
    with path.open("a", encoding="utf-8") as fh:
        for batch in _batches(todo, cfg.batch_size):
            for sample, raw in zip(batch, model.run(batch, factory, cfg), strict=True):
                done[sample.id] = to_prediction(sample, raw, paradigm, _reading(model), extra_scores)
                fh.write(prediction_to_json(done[sample.id], cfg.key) + "\n")
            fh.flush()
            if progress:
                progress(len(batch))
    return [done[s.id] for s in samples]


def boxes_read_as(make_env: EnvFactory, fmt: BoxFormat | None) -> EnvFactory:
    """``make_env`` whose environments read their crop and zoom boxes by ``fmt``, the model's box
    convention, chosen once for the run (``ReadsBoxes``); None leaves them in their own frame."""
    if not isinstance(fmt, BoxFormat):
        return make_env

    def make(sample: Sample) -> Environment:
        env = make_env(sample)
        if isinstance(env, ReadsBoxes):
            env.box_format = fmt
        return env

    return make


def _reading(model: ModelBackend) -> BoxReading:
    """How ``model``'s boxes reach the page: its resize, and its box convention where it has one."""
    fmt = getattr(model, "box_format", None)
    return BoxReading(model.spec, fmt if isinstance(fmt, BoxFormat) else None, isinstance(model, LocalModel))

"""VRAG-RL multi-expert trajectory sampling (§2.2 "Multi-Expert Sampling", Eqs. 3-6; App. D).

Two teachers behind OpenAI-compatible endpoints play one episode of the search environment
together, turn by turn:

* the large model pi_LM reads the history H_{t-1} (Eq. 3) and writes the thought T_t and the
  action A_t (Eq. 4): a ``<search>``, a ``<bbox>`` or an ``<answer>``;
* a search is executed as written and the environment inserts the page it finds;
* a ``<bbox>`` is re-located by the grounding expert pi_EM, which sees H_{t-1} and is guided by
  T_t (Eq. 5); its box replaces the large model's in the trajectory and the environment crops,
  zooms and inserts that region (Eq. 6).

The composed conversation is the SFT target. ``samples_per_question`` episodes are sampled per
question (temperature > 0 gives the "diverse interactions" the paper scales up with). The paper
does not spell the acceptance rule out; the one here follows its App. D and the method's reward:
an episode is kept when it ends with an answer that matches a gold answer (ANLS >= ``min_anls``,
as ``evidra data distill --method vragrl``), it searched at least once (the method's pattern
gate), no turn was an invalid action, and it took ``min_steps``..``max_steps`` turns (App. D
balances 2-6-step trajectories). The report counts the kept episodes per (steps, actions) bucket
so a training mix can be balanced the way App. D describes.

Output is the ``evidra`` SFT JSONL (``evidra train sft --data``): one row per episode with the
whole ``conversation`` (observation images saved as PNG files beside the output), kept or not;
a rerun skips the question ids already in the file.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from evidra.core.errors import InvalidInputError
from evidra.core.types import ImagePart, Message, Sample, TextPart, messages_to_json
from evidra.data.construction.distill import done_ids, run_pool
from evidra.env.environment import Environment, StepInfo
from evidra.env.search import SearchEnv
from evidra.metrics.anls import anls
from evidra.models.endpoint import ChatEndpoint, EndpointError

logger = logging.getLogger(__name__)

GROUNDING_PROMPT = (
    "The assistant wants to look closer at a region of the last image shown. Its reasoning: "
    "{thought}\nGive the bounding box of that region in pixels of the last image ({width}x{height}). "
    "Output only a JSON list [x1, y1, x2, y2]."
)
_ACTION = re.compile(r"<(search|bbox|answer)>.*?</\1>", re.DOTALL)
_BBOX = re.compile(r"<bbox>.*?</bbox>", re.DOTALL)
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


@dataclass(frozen=True)
class MultiExpertConfig:
    samples_per_question: int = 1  # episodes sampled per question
    min_steps: int = 2  # App. D: trajectories of 2-6 steps
    max_steps: int = 6
    min_anls: float = 0.5  # a correct answer
    max_tokens: int = 1024  # per large-model turn
    temperature: float = 0.7
    expert_max_tokens: int = 64
    concurrency: int = 4  # questions played at once

    def __post_init__(self) -> None:
        if self.samples_per_question < 1 or self.concurrency < 1:
            raise InvalidInputError(
                f"samples_per_question and concurrency must be >= 1, got {self.samples_per_question} "
                f"and {self.concurrency}"
            )
        if not 1 <= self.min_steps <= self.max_steps:
            raise InvalidInputError(
                f"need 1 <= min_steps <= max_steps, got {self.min_steps} and {self.max_steps}"
            )


@dataclass(frozen=True)
class Turn:
    """One turn of a composed trajectory: what the large model wrote and what was kept."""

    lm_text: str  # pi_LM's turn, cut after its first action
    text: str  # the turn as trained on (the expert's box in place of pi_LM's)
    info: StepInfo
    lm_box: str | None = None  # pi_LM's <bbox> content
    expert_box: str | None = None  # pi_EM's box; None when it gave no four numbers


@dataclass(frozen=True)
class Episode:
    """One played episode: the conversation (prompt, turns, observations) and its turns."""

    conversation: tuple[Message, ...]
    turns: tuple[Turn, ...]

    @property
    def answer(self) -> str | None:
        last = self.turns[-1].info if self.turns else None
        return last.answer if last is not None and last.action == "answer" else None

    @property
    def actions(self) -> tuple[str, ...]:
        return tuple(t.info.action for t in self.turns)


def first_action(text: str) -> str:
    """The turn up to the end of its first complete action (the environment runs only that one).

    >>> first_action("<think>a</think><search>q</search><information>made up</information>")
    '<think>a</think><search>q</search>'
    """
    m = _ACTION.search(text)
    return text[: m.end()] if m else text


def close_action(text: str) -> str:
    """Re-append the closing tag that a server's stop sequence removed.

    >>> close_action("<think>t</think><search>revenue 2023")
    '<think>t</think><search>revenue 2023</search>'
    """
    for name in ("search", "bbox", "answer"):
        if text.rfind(f"<{name}>") > text.rfind(f"</{name}>"):
            return text + f"</{name}>"
    return text


def thought_of(text: str) -> str:
    """The ``<think>`` text before the turn's action (T_t of Eq. 5).

    >>> thought_of("<think> the table's header </think><bbox>[1, 2, 3, 4]</bbox>")
    "the table's header"
    """
    head = text.split("<bbox>", 1)[0]
    return head.rsplit("<think>", 1)[-1].split("</think>", 1)[0].strip()


def _expert_box(
    expert: ChatEndpoint, history: Sequence[Message], text: str, size: tuple[int, int], max_tokens: int
) -> str | None:
    """pi_EM(. | H_{t-1}; T_t), Eq. 5: the region's box in the last image's pixels, or None."""
    prompt = GROUNDING_PROMPT.format(thought=thought_of(text), width=size[0], height=size[1])
    reply = expert.complete([*history, Message.text("user", prompt)], max_tokens=max_tokens).text
    numbers = _NUMBER.findall(reply)
    return "[" + ", ".join(numbers[:4]) + "]" if len(numbers) >= 4 else None


def _last_image_size(history: Sequence[Message]) -> tuple[int, int]:
    for message in reversed(history):
        for part in reversed(message.content):
            if isinstance(part, ImagePart) and not isinstance(part.image, (str, Path)):
                return (int(part.image.size[0]), int(part.image.size[1]))
    return (0, 0)


def play(
    sample: Sample, env: SearchEnv, lm: ChatEndpoint, expert: ChatEndpoint | None, cfg: MultiExpertConfig
) -> Episode:
    """One episode of Eqs. 3-6 through ``env``; an endpoint failure raises ``EndpointError``."""
    history = env.reset(sample)
    turns: list[Turn] = []
    while True:
        reply = lm.complete(history, max_tokens=cfg.max_tokens, temperature=cfg.temperature, stop=env.stop)
        lm_text = first_action(close_action(reply.text))
        text, lm_box, new_box = lm_text, None, None
        action = env.paradigm.parse(lm_text).action
        if action is not None and action.name == "bbox" and expert is not None:
            lm_box = action.argument
            new_box = _expert_box(expert, history, lm_text, _last_image_size(history), cfg.expert_max_tokens)
            found = _BBOX.search(lm_text)
            if new_box is not None and found is not None:
                text = f"{lm_text[: found.start()]}<bbox>{new_box}</bbox>{lm_text[found.end() :]}"
        result = env.step(text)
        history = [*history, Message.text("assistant", text), *result.observation]
        turns.append(Turn(lm_text, text, result.info, lm_box, new_box))
        if result.done:
            return Episode(tuple(history), tuple(turns))


def verdict(sample: Sample, episode: Episode, cfg: MultiExpertConfig) -> tuple[bool, str]:
    """The acceptance rule (module docstring): ``(kept, reason)``; the reason is "" when kept."""
    steps = len(episode.turns)
    if episode.answer is None:
        return False, "no answer"
    if "search" not in episode.actions:
        return False, "never searched"
    if any(t.info.invalid for t in episode.turns):
        return False, "invalid action"
    if not cfg.min_steps <= steps <= cfg.max_steps:
        return False, f"{steps} steps (outside {cfg.min_steps}-{cfg.max_steps})"
    score = anls(episode.answer, sample.answers) if sample.answers else 0.0
    if score < cfg.min_anls:
        return False, f"wrong answer (ANLS {score:.2f})"
    return True, ""


def bucket(episode: Episode) -> str:
    """The App. D balancing key: step count and the kinds of action used.

    >>> ep = Episode((), tuple(Turn("", "", StepInfo(action=a)) for a in ("search", "bbox", "answer")))
    >>> bucket(ep)
    '3 steps: search+bbox'
    """
    kinds = [a for a in ("search", "bbox") if a in episode.actions]
    return f"{len(episode.turns)} steps: {'+'.join(kinds) or 'answer only'}"


@dataclass(frozen=True)
class MultiExpertReport:
    questions: int  # questions played this run
    episodes: int  # episodes written this run
    accepted: int
    skipped: int  # questions already in the output
    failed: int  # questions with an endpoint failure (not written; a rerun retries them)
    buckets: dict[str, int] = field(default_factory=dict)  # accepted episodes per bucket


def _save_images(conversation: Sequence[Message], folder: Path) -> list[Message]:
    """In-memory observation images saved as PNG files in ``folder``, referenced by path."""
    out, n = [], 0
    for message in conversation:
        parts: list[TextPart | ImagePart] = []
        for part in message.content:
            if isinstance(part, ImagePart) and not isinstance(part.image, (str, Path)):
                folder.mkdir(parents=True, exist_ok=True)
                path = folder / f"{n}.png"
                part.image.save(path)
                part, n = ImagePart(str(path.resolve()), page_id=part.page_id), n + 1
            parts.append(part)
        out.append(Message(message.role, tuple(parts)))
    return out


def _row(
    sample: Sample, k: int, episode: Episode, kept: bool, reason: str, images: Path
) -> dict[str, object]:
    conversation = _save_images(episode.conversation, images / f"{k}")
    first = next(i for i, m in enumerate(conversation) if m.role == "assistant")
    return {
        "id": sample.id,
        "method": "vragrl.multiexpert",
        "attempt": k,
        "accepted": kept,
        "reason": reason,
        "answers": list(sample.answers),
        "prompt": messages_to_json(conversation[:first]),
        "response": episode.turns[-1].text,
        "conversation": messages_to_json(conversation),
        "meta": {
            "bucket": bucket(episode),
            "actions": list(episode.actions),
            "retrieved": list(episode.turns[-1].info.retrieved),
            "turns": [
                {"lm": t.lm_text, "lm_box": t.lm_box, "expert_box": t.expert_box, "info": t.info.to_json()}
                for t in episode.turns
            ],
        },
    }


def _image_folder(out: Path, sample_id: str) -> Path:
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", sample_id)
    return out.parent / f"{out.stem}_images" / safe


def multiexpert(
    samples: Sequence[Sample],
    make_env: Callable[[Sample], Environment],
    lm: ChatEndpoint,
    expert: ChatEndpoint | None,
    out: str | Path,
    cfg: MultiExpertConfig | None = None,
    progress: Callable[[int], None] | None = None,
) -> MultiExpertReport:
    """Play ``cfg.samples_per_question`` episodes per question not yet in ``out``; append their rows.

    ``progress(n)`` counts questions: first those already in ``out`` (when any), then one per
    question as its episodes finish, ``len(samples)`` in all.
    """
    cfg = cfg or MultiExpertConfig()
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    seen = done_ids(path)
    todo = [s for s in samples if s.id not in seen]
    lock = threading.Lock()
    counts: Counter[str] = Counter()
    buckets: Counter[str] = Counter()

    def search_env(sample: Sample) -> SearchEnv:
        env = make_env(sample)
        if not isinstance(env, SearchEnv):
            raise InvalidInputError(
                f"multi-expert sampling plays the search environment: use a task whose "
                f"environment is 'search' (vragrl), not {type(env).__name__}"
            )
        return env

    def work(sample: Sample) -> None:
        try:
            played = [
                play(sample, search_env(sample), lm, expert, cfg) for _ in range(cfg.samples_per_question)
            ]
        except EndpointError as exc:
            logger.warning("a teacher failed on %s: %s", sample.id, exc)
            with lock:
                counts["failed"] += 1
            return
        verdicts = [verdict(sample, ep, cfg) for ep in played]
        images = _image_folder(path, sample.id)
        rows = [
            _row(sample, k, ep, ok, why, images)
            for k, (ep, (ok, why)) in enumerate(zip(played, verdicts, strict=True))
        ]
        with lock:
            with path.open("a", encoding="utf-8") as fh:
                fh.writelines(json.dumps(r) + "\n" for r in rows)
            counts["episodes"] += len(rows)
            for ep, (ok, _) in zip(played, verdicts, strict=True):
                counts["accepted"] += int(ok)
                buckets[bucket(ep)] += int(ok)

    if todo:
        search_env(todo[0])  # the task's environment is the search one, before any teacher is asked
    if progress is not None and len(todo) < len(samples):
        progress(len(samples) - len(todo))
    run_pool(work, todo, cfg.concurrency, progress)
    return MultiExpertReport(
        len(todo),
        counts["episodes"],
        counts["accepted"],
        len(samples) - len(todo),
        counts["failed"],
        {k: v for k, v in sorted(buckets.items()) if v},
    )

"""Randomized multimodal episodes through the real rollout loop, each checked by ``rl.conformance``.

Half the batches search a BM25 index of synthetic pages (``env.search``: a search inserts a page,
a ``<bbox>`` a crop of the last image), half zoom into one page (``env.zoom``: each tool call
inserts a crop). A random script drives the policy's turns so that tools are called: a random
tiny model would almost never write a valid action. It searches until an image is in the context,
then searches, crops (random boxes, so crops of random sizes and aspect ratios, some invalid),
answers, writes a turn without an action, or lets the model sample freely, and answers once the
context holds ``max_images`` images. Every turn's ids and log-probs come from the model
(``rollout.scripted``); every episode goes through the trainer's path and its three checks.

    from evidra.models.loading import load_vlm
    for checks in conformance_batches(load_vlm(conformance_model("qwen2_5_vl", folder)), folder, 100):
        ...

``text_batches`` runs the text path the same way: a text-only policy in multi-turn key-value
episodes whose observations are text, its free turns sampled by any backend (a vLLM engine).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from evidra.core.types import Box, Page, Sample, Word
from evidra.env.environment import Environment
from evidra.env.search import SearchEnv, bm25_searcher
from evidra.env.toy import KeyValueEnv
from evidra.env.zoom import ZoomEnv
from evidra.models.context import Context
from evidra.models.generation import SamplingParams
from evidra.models.loading import VLM
from evidra.paradigms import PARADIGMS
from evidra.rl.conformance import EpisodeCheck, check_episodes
from evidra.rollout import Episode, GenerationBackend, RolloutLimits, rollout
from evidra.rollout.recording import RecordingBackend
from evidra.rollout.scripted import Script, ScriptedBackend, Turn

Kind = Literal["search", "zoom"]
_VOCABULARY = """
revenue north south east west table chart total margin growth budget forecast region quarter annual
report income cost sales price units share market index value rate ratio summary note figure appendix
section policy review audit plan target actual
"""
WORDS = tuple(_VOCABULARY.split())  # what the pages say, the queries ask and the answers name


@dataclass(frozen=True)
class ConformanceSettings:
    """Sizes of the randomized run; the defaults keep contexts at 1 to 6 images."""

    pages: int = 24
    samples_per_batch: int = 16
    group_size: int = 2  # episodes per sample (a GRPO group shares its prompt)
    max_images: int = 6
    max_turns: int = 8
    max_new_tokens: int = 192  # a forced tool call in random pieces runs to ~120 tokens
    tolerance: float = 1e-4
    display_min_pixels: int = 28 * 28 * 2  # what the environments show: small crops stay small
    display_max_pixels: int = 320 * 320
    trainer_batch: int = 8  # episodes per trainer-path forward, taken by length (little padding)


# The checks count tokens, grids and feature rows and compare log-probs: none depends on the
# model's width. Half the default tiny width, at 16-dim heads (CPU attention kernels run 8-dim
# heads slower), keeps every path the checks cover (two decoder layers, so the per-layer KV
# cache; grouped-query attention, two query heads per key-value head; the vision tower and its
# merger) and takes about a third less CPU time per episode than the default tiny model (the
# attention over the re-prefilled contexts, the run's largest cost, runs over half the heads).
CHECK_HIDDEN, CHECK_HEADS = 32, 2


def conformance_model(arch: str, folder: Path) -> Path:
    """The tiny ``arch`` checkpoint the randomized run checks, built under ``folder`` (reused)."""
    from evidra.models.tiny import build_tiny

    out = folder / f"{arch}-h{CHECK_HIDDEN}"
    if (out / "config.json").is_file():
        return out
    return build_tiny(arch, out, hidden=CHECK_HIDDEN, heads=CHECK_HEADS)


def synthetic_pages(folder: Path, count: int, rng: random.Random) -> list[Page]:
    """``count`` pages of random sizes, each a few words drawn at known boxes (its text layer)."""
    from PIL import Image, ImageDraw

    folder.mkdir(parents=True, exist_ok=True)
    pages = []
    for n in range(count):
        width, height = rng.randrange(96, 480, 8), rng.randrange(96, 560, 8)
        image = Image.new("RGB", (width, height), (255, 255, 255))
        draw = ImageDraw.Draw(image)
        words = []
        for j in range(rng.randint(4, 12)):
            text = rng.choice(WORDS)
            x, y = rng.randrange(0, max(1, width - 60)), rng.randrange(0, max(1, height - 12))
            draw.text((x, y), text, fill=(0, 0, 0))
            draw.rectangle((x, y + 12, x + 4 * j + 4, y + 14), fill=(40, 90, 200))
            words.append(Word(text, Box(float(x), float(y), float(x + 6 * len(text)), float(y + 11))))
        path = folder / f"page{n:03d}.png"
        image.save(path)
        pages.append(Page(f"page{n:03d}", str(path), width, height, words=tuple(words)))
    return pages


def _box(rng: random.Random, size: tuple[int, int]) -> list[int]:
    """A random box inside ``size`` (width, height), now and then reaching past it."""
    w, h = size
    x1, y1 = rng.randrange(0, max(1, w - 1)), rng.randrange(0, max(1, h - 1))
    reach = 1.3 if rng.random() < 0.1 else 1.0
    return [
        x1,
        y1,
        rng.randint(x1 + 1, max(x1 + 1, int(w * reach))),
        rng.randint(y1 + 1, max(y1 + 1, int(h * reach))),
    ]


def _think(rng: random.Random) -> str:
    return f"<think>{' '.join(rng.choices(WORDS, k=rng.randint(1, 4)))}</think>"


def _other(rng: random.Random, context: Context, max_images: int) -> Turn | None:
    """An answer (only once an image is in), a turn without an action, or None (free sampling)."""
    r = rng.random()
    if context.num_images >= max_images or (context.num_images and r < 0.5):
        return Turn(f"{_think(rng)}<answer>{rng.choice(WORDS)}</answer>")
    return Turn(_think(rng), end_of_turn=True) if r < 0.8 else None


def search_script(rng: random.Random, max_images: int) -> Script:
    """VRAG-RL turns: search until an image is shown, then search, crop or finish."""

    def script(context: Context, _params: SamplingParams) -> Turn | None:
        r = rng.random()
        if context.num_images == 0 or (context.num_images < max_images and r < 0.4):
            query = " ".join(rng.choices(WORDS, k=rng.randint(1, 3)))
            return Turn(f"{_think(rng)}<search>{query}</search>")
        if context.num_images < max_images and r < 0.8:
            return Turn(f"{_think(rng)}<bbox>{_box(rng, context.images[-1].size)}</bbox>")
        return _other(rng, context, max_images)

    return script


def zoom_script(rng: random.Random, max_images: int) -> Script:
    """CAVE turns: zoom into the page (boxes in its pixels) or finish."""

    def script(context: Context, _params: SamplingParams) -> Turn | None:
        if context.num_images < max_images and rng.random() < 0.75:
            box = _box(rng, context.images[0].size)
            call = f'{{"name": "image_zoom_in_tool", "arguments": {{"bbox_2d": {box}}}}}'
            return Turn(f"{_think(rng)}<tool_call>{call}</tool_call>")
        return _other(rng, context, max_images)

    return script


def _environments(
    kind: Kind, pages: list[Page], settings: ConformanceSettings
) -> Callable[[Sample], Environment]:
    lo, hi = settings.display_min_pixels, settings.display_max_pixels
    if kind == "search":
        index, by_id = bm25_searcher(pages), {p.id: p for p in pages}
        return lambda _s: SearchEnv(index, by_id, max_turns=settings.max_turns, min_pixels=lo, max_pixels=hi)
    rounds = min(settings.max_turns, settings.max_images)  # the page, then up to rounds - 1 crops
    zoom = PARADIGMS.get("zoom_agent")  # CAVE's zoom actions, found by name (a paper's own paradigm)
    return lambda _s: ZoomEnv(zoom(), max_rounds=rounds, min_pixels=lo, max_pixels=hi)


def conformance_batches(
    vlm: VLM, folder: Path, episodes: int, *, seed: int = 0, settings: ConformanceSettings | None = None
) -> Iterator[list[EpisodeCheck]]:
    """Roll out ``episodes`` randomized episodes batch by batch; yields each batch's checks."""
    settings = settings or ConformanceSettings()
    rng = random.Random(seed)
    pages = synthetic_pages(folder, settings.pages, rng)
    done, batch = 0, 0
    while done < episodes:
        kind: Kind = ("search", "zoom")[batch % 2]
        count = min(settings.samples_per_batch, -(-(episodes - done) // settings.group_size))
        eps, record = random_batch(vlm, kind, pages, rng, count, settings, seed=seed * 1_000_003 + batch)
        eps = eps[: episodes - done]
        yield check_episodes(
            vlm, eps, record, tolerance=settings.tolerance, micro_batch_size=settings.trainer_batch
        )
        done, batch = done + len(eps), batch + 1


def random_batch(
    vlm: VLM,
    kind: Kind,
    pages: list[Page],
    rng: random.Random,
    samples: int,
    settings: ConformanceSettings,
    *,
    seed: int = 0,
) -> tuple[list[Episode], RecordingBackend]:
    """``samples`` x ``group_size`` scripted episodes of ``kind``, and the sampler's record of them."""
    script = (search_script if kind == "search" else zoom_script)(rng, settings.max_images)
    record = RecordingBackend(ScriptedBackend(vlm, script, rng))
    limits = RolloutLimits(
        max_turns=settings.max_turns, max_new_tokens=settings.max_new_tokens, max_response_tokens=8192
    )
    params = SamplingParams(max_new_tokens=settings.max_new_tokens, seed=seed)
    batch = [_sample(rng, pages, f"{kind}{seed}-{j}") for j in range(samples)]
    eps = rollout(record, _environments(kind, pages, settings), batch, settings.group_size, params, limits)
    return eps, record


def key_value_script(rng: random.Random, keys: list[str]) -> Script:
    """Turns of the text-only key-value task: look keys up, answer, or let the model sample."""

    def script(_context: Context, _params: SamplingParams) -> Turn | None:
        r = rng.random()
        if r < 0.5:
            return Turn(f"{_think(rng)}<search> {rng.choice(keys)} </search>")
        if r < 0.65:
            return Turn(f"{_think(rng)}<answer> {rng.randint(0, 999)} </answer>", end_of_turn=True)
        return Turn(_think(rng), end_of_turn=True) if r < 0.8 else None

    return script


def text_batches(
    vlm: VLM,
    episodes: int,
    *,
    seed: int = 0,
    settings: ConformanceSettings | None = None,
    sampler: GenerationBackend | None = None,
) -> Iterator[list[EpisodeCheck]]:
    """The text path: multi-turn key-value episodes (``env.toy``, text observations only) of a
    text-only policy, free turns sampled by ``sampler`` (a vLLM engine) or the model itself."""
    settings = settings or ConformanceSettings()
    rng = random.Random(seed)
    corpus = {word: str(rng.randint(0, 999)) for word in WORDS[::2]}
    keys = [*corpus, *WORDS[1::2]]  # half the lookups miss
    # inside the tiny text model's 4096 positions (and a vLLM engine's max_model_len)
    limits = RolloutLimits(
        max_turns=settings.max_turns, max_new_tokens=settings.max_new_tokens, max_response_tokens=2048
    )
    done, batch = 0, 0
    while done < episodes:
        record = RecordingBackend(ScriptedBackend(vlm, key_value_script(rng, keys), rng, sampler=sampler))
        count = min(settings.samples_per_batch, -(-(episodes - done) // settings.group_size))
        samples = [
            Sample(id=f"kv{batch}-{j}", question=f"What is {rng.choice(keys)}?", answers=("0",))
            for j in range(count)
        ]
        params = SamplingParams(max_new_tokens=settings.max_new_tokens, seed=seed * 1_000_003 + batch)
        eps = rollout(record, lambda _s: KeyValueEnv(corpus), samples, settings.group_size, params, limits)
        eps = eps[: episodes - done]
        yield check_episodes(
            vlm, eps, record, tolerance=settings.tolerance, micro_batch_size=settings.trainer_batch
        )
        done, batch = done + len(eps), batch + 1


def _sample(rng: random.Random, pages: list[Page], sample_id: str) -> Sample:
    page = rng.choice(pages)
    question = f"What is the {' '.join(rng.choices(WORDS, k=rng.randint(1, 4)))}?"
    return Sample(id=sample_id, question=question, answers=(rng.choice(WORDS),), pages=(page,))

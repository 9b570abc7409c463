"""Where a tiny Qwen-VL trained from scratch starts to read: one digit, how large and where.

``benchmarks/learning.py`` trains the whole chain (SFT on LAT's chains of evidence, then GRPO)
and measures held-out accuracy; when that stays at chance, this script asks the question under
it with the shortest possible answer. A tiny random Qwen2.5-VL (``evidra.models.tiny``, the
learning benchmark's size) is trained in a plain loop, cross-entropy on the answer tokens only,
on freshly drawn 168-pixel pages (no page is seen twice), one probe per case:

* ``shade``: the page is all white or all black, the answer "11" or "22" (the whole page is the
  signal);
* ``page_digit``: one digit drawn 140 pixels high across the page, the answer the digit twice;
* ``big_digit``: one digit 56 pixels high (about 2 x 2 of the 6 x 6 image tokens) at a random
  place, the answer the digit twice;
* ``cell_digits``: a two-digit number, each digit 18-24 pixels high centred in one image
  token's 28-pixel cell, on a random row and column (the learnable task's scale).

Held-out accuracy (both answer digits right, teacher-forced argmax, 96 fixed pages) is printed
every ``--every`` steps; chance is about 0.5 for ``shade``, 0.1 for the digits (0.011 for
``cell_digits``). One line per case, ``RESULT case=<c> steps=<n> acc=<a> loss=<l> seconds=<s>``.

    OMP_NUM_THREADS=1 python benchmarks/reading_probe.py                   # all cases, 300 steps
    OMP_NUM_THREADS=1 python benchmarks/reading_probe.py --cases page_digit big_digit --steps 600

``--vision-warmup N`` first trains the tower N steps on 512 other pages of the case with a dense
target (``evidra.models.vision_warmup``: the characters in each image token, from where the
digits were drawn) and then freezes it, as a pretrained tower would be:

    OMP_NUM_THREADS=1 python benchmarks/reading_probe.py --cases cell_digits --vision-warmup 150

``--ask-label`` asks for the number next to the page's label (cases that draw one) instead of
"What number?"; ``--question-first`` puts the question before the image:

    OMP_NUM_THREADS=1 python benchmarks/reading_probe.py --cases grid_fonts --steps 800 --every 100 \
        --vision-warmup 150 --ask-label --question-first
"""

from __future__ import annotations

import argparse
import math
import random
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from evidra.core.types import Box, Word
from evidra.core.types import Page as TextPage
from evidra.data.synth.reading import LABELS
from evidra.models.loading import VLM, load_vlm
from evidra.models.tiny import build_tiny
from evidra.models.vision_warmup import warm_up_vision

if TYPE_CHECKING:
    from PIL.Image import Image

SIDE = 168  # pixels: 6 x 6 image tokens of 28 pixels
CELL = 28
Page = tuple["Image", str]


def _blank(color: str = "white") -> Image:
    from PIL import Image

    return Image.new("RGB", (SIDE, SIDE), color)


def _font(size: int) -> object:
    from PIL import ImageFont

    return ImageFont.load_default(size=size)


def _digit(image: Image, xy: tuple[float, float], ch: str, size: int, words: list[Word] | None) -> None:
    """Draw ``ch`` centred at ``xy``; keep it as a word of the page's text layer when asked."""
    from PIL import ImageDraw

    draw, font = ImageDraw.Draw(image), _font(size)
    draw.text(xy, ch, font=font, fill="black", anchor="mm")
    if words is not None:
        words.append(Word(ch, Box(*(float(v) for v in draw.textbbox(xy, ch, font=font, anchor="mm")))))


def shade(rng: random.Random, words: list[Word] | None = None) -> Page:
    answer = rng.choice(("11", "22"))
    return _blank("white" if answer == "11" else "black"), answer


def page_digit(rng: random.Random, words: list[Word] | None = None) -> Page:
    digit = str(rng.randint(0, 9))
    image = _blank()
    _digit(image, (SIDE / 2, SIDE / 2), digit, 140, words)
    return image, digit * 2


def big_digit(rng: random.Random, words: list[Word] | None = None) -> Page:
    digit = str(rng.randint(0, 9))
    image = _blank()
    centre = (rng.randint(24, SIDE - 24), rng.randint(30, SIDE - 30))
    _digit(image, centre, digit, 56, words)
    return image, digit * 2


def cell_digits(rng: random.Random, words: list[Word] | None = None) -> Page:
    number = str(rng.randint(10, 99))
    image = _blank()
    row, col = rng.randint(0, SIDE // CELL - 1), rng.randint(0, SIDE // CELL - 2)
    size = rng.randint(18, 24)
    for k, ch in enumerate(number):
        _digit(image, (CELL * (col + k) + CELL / 2, CELL * row + CELL / 2), ch, size, words)
    return image, number


def free_number(rng: random.Random, words: list[Word] | None = None) -> Page:
    """A two-digit number 18-24 px high anywhere on the page (not aligned with the token cells)."""
    number = str(rng.randint(10, 99))
    image = _blank()
    size = rng.randint(18, 24)
    x, y = rng.uniform(12, SIDE - 36), rng.uniform(14, SIDE - 14)
    for k, ch in enumerate(number):
        _digit(image, (x + k * size * 0.6, y), ch, size, words)
    return image, number


def label_number(rng: random.Random, words: list[Word] | None = None) -> Page:
    """``free_number`` after a colour word on its line ("BLUE 47"), as the reading pages draw it."""
    from PIL import ImageDraw

    number = str(rng.randint(10, 99))
    image = _blank()
    size = rng.randint(18, 24)
    label = rng.choice(LABELS)
    font = _font(size)
    draw = ImageDraw.Draw(image)
    width = draw.textlength(label, font=font)
    x, y = rng.uniform(4, SIDE - width - 40), rng.uniform(14, SIDE - 14)
    draw.text((x, y), label, font=font, fill="black", anchor="lm")
    if words is not None:
        words.append(
            Word(label, Box(*(float(v) for v in draw.textbbox((x, y), label, font=font, anchor="lm"))))
        )
    for k, ch in enumerate(number):
        _digit(image, (x + width + size * 0.5 + k * size * 0.6, y), ch, size, words)
    image.info["label"] = label
    return image, number


def grid_number(rng: random.Random, words: list[Word] | None = None) -> Page:
    """``label_number`` drawn on the half-token grid: one character per 14-pixel column, each line
    on a token row, so every glyph sits inside one image token."""
    number = str(rng.randint(10, 99))
    image = _blank()
    size = rng.randint(14, 18)
    label = rng.choice(LABELS)
    text = f"{label} {number}"
    half = CELL // 2
    col, row = rng.randint(0, SIDE // half - len(text)), rng.randint(0, SIDE // CELL - 1)
    for k, ch in enumerate(text):
        if ch != " ":
            _digit(image, (half * (col + k) + half / 2, CELL * row + CELL / 2), ch, size, words)
    image.info["label"] = label
    return image, number


def grid_fonts(rng: random.Random, words: list[Word] | None = None) -> Page:
    """``grid_number`` in the ``reading`` pages' three fonts, drawn by their grid layout."""
    from PIL import ImageDraw

    from evidra.data.synth.reading import FONTS, HALF, _Canvas

    number = str(rng.randint(10, 99))
    image = _blank()
    canvas = _Canvas(image, ImageDraw.Draw(image), rng.choice(FONTS), grid=True)
    label = rng.choice(LABELS)
    col, row = rng.randint(0, SIDE // HALF - len(label) - 3), rng.randint(0, SIDE // CELL - 1)
    size = rng.randint(14, 18)
    top = CELL * row + (CELL - canvas.height(size)) / 2
    canvas.text(HALF * col, top, label, size)
    canvas.text(HALF * (col + len(label) + 1), top, number, size)
    if words is not None:
        words.extend(canvas.words)
    image.info["label"] = label
    return image, number


CASES: dict[str, Callable[..., Page]] = {  # (rng, words=None): the page and its answer
    "shade": shade,
    "page_digit": page_digit,
    "big_digit": big_digit,
    "cell_digits": cell_digits,
    "free_number": free_number,
    "label_number": label_number,
    "grid_number": grid_number,
    "grid_fonts": grid_fonts,
}
QUESTION = "What number?"


@dataclass(frozen=True)
class Prompt:
    """How a page is asked: ``ask_label`` names the page's label in the question ("What number is
    next to BLUE?", where the case drew one), ``question_first`` puts the question before the image."""

    ask_label: bool = False
    question_first: bool = False

    def chat(self, image: Image) -> list[dict[str, object]]:
        label = image.info.get("label")
        question = f"What number is next to {label}?" if self.ask_label and label else QUESTION
        parts: list[dict[str, str]] = [{"type": "image"}, {"type": "text", "text": question}]
        return [{"role": "user", "content": parts[::-1] if self.question_first else parts}]


def encode(vlm: VLM, pages: Sequence[Page], prompt: Prompt = Prompt()) -> dict[str, torch.Tensor]:
    """The chat of each page with its answer appended; labels on the answer and its end token."""
    processor = vlm.processor
    texts = [
        processor.apply_chat_template(prompt.chat(image), add_generation_prompt=True, tokenize=False)
        + f"{answer}<|im_end|>"
        for image, answer in pages
    ]
    batch = dict(
        processor(text=texts, images=[image for image, _ in pages], return_tensors="pt", padding=True)
    )
    answer_len = len(processor.tokenizer(f"{pages[0][1]}<|im_end|>")["input_ids"])
    labels = torch.full_like(batch["input_ids"], -100)
    labels[:, -answer_len:] = batch["input_ids"][:, -answer_len:]  # padding is on the left
    batch["labels"] = labels
    return batch


def accuracy(vlm: VLM, pages: Sequence[Page], prompt: Prompt = Prompt()) -> float:
    """Pages whose answer digits (not the end token) are all the argmax, teacher-forced."""
    vlm.model.eval()
    with torch.no_grad():
        batch = encode(vlm, pages, prompt)
        labels = batch.pop("labels")
        predicted = vlm.model(**batch).logits.argmax(-1)
    vlm.model.train()
    digits = len(pages[0][1])
    end = labels.shape[1] - 1  # the end token's position; the digits precede it
    right = predicted[:, end - digits - 1 : end - 1] == labels[:, end - digits : end]
    return float(right.all(-1).float().mean())


def warm_and_freeze(vlm: VLM, case: str, steps: int, folder: Path) -> None:
    """Warm the tower ``steps`` steps on 512 pages of ``case`` (the glyphs drawn, as the pages' text
    layer; other pages than the probe's), then freeze it."""
    draw, rng, pages = CASES[case], random.Random(f"warm-up/{case}"), []
    (folder / "warm-up").mkdir(parents=True, exist_ok=True)
    for i in range(512):
        words: list[Word] = []
        image, _ = draw(rng, words)
        path = folder / "warm-up" / f"{case}-{i}.png"
        image.save(path)
        pages.append(TextPage(f"{case}-{i}", str(path), SIDE, SIDE, path.name, 1, tuple(words)))
    losses = warm_up_vision(vlm, pages, steps=steps)
    print(f"vision warm-up: loss {losses[0]:.3f} -> {losses[-1]:.3f} over {steps} steps", flush=True)
    for param in vlm.model.model.visual.parameters():
        param.requires_grad_(False)


def probe(
    case: str,
    steps: int,
    every: int,
    batch: int,
    lr: float,
    folder: Path,
    warmup: int = 0,
    prompt: Prompt = Prompt(),
) -> tuple[float, float, float]:
    """Train a fresh tiny model on ``case`` (its tower warmed and frozen first when ``warmup``);
    print held-out accuracy as it goes; last acc, loss, seconds."""
    model_dir = build_tiny(
        "qwen2_5_vl",
        folder / f"model-{case}",
        seed=0,
        hidden=128,
        layers=4,
        min_pixels=SIDE * SIDE,
        max_pixels=SIDE * SIDE,
        rope_theta=1e4,
    )
    vlm = load_vlm(model_dir)
    start, loss, acc = time.perf_counter(), math.nan, 0.0
    if warmup:
        warm_and_freeze(vlm, case, warmup, folder)
    vlm.model.train()
    draw = CASES[case]
    held_out = [draw(random.Random(f"held-out/{i}")) for i in range(96)]
    stream = random.Random(f"train/{case}")
    trained = [p for p in vlm.model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trained, lr=lr, weight_decay=0.0)
    for step in range(1, steps + 1):
        out = vlm.model(**encode(vlm, [draw(stream) for _ in range(batch)], prompt))
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(trained, 1.0)
        optimizer.step()
        optimizer.zero_grad()
        loss = float(out.loss.detach())
        if step % every == 0 or step == steps:
            acc = accuracy(vlm, held_out, prompt)
            print(f"{case} step {step}: loss {loss:.3f} held-out acc {acc:.3f}", flush=True)
    return acc, loss, time.perf_counter() - start


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", nargs="+", choices=sorted(CASES), default=list(CASES))
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--every", type=int, default=50, help="steps between held-out scores")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument(
        "--vision-warmup",
        dest="warmup",
        type=int,
        default=0,
        help="warm the tower this many steps on the case's glyphs (other pages), then freeze it (0: none)",
    )
    p.add_argument("--ask-label", action="store_true", help="name the page's label in the question")
    p.add_argument("--question-first", action="store_true", help="put the question before the image")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    prompt = Prompt(args.ask_label, args.question_first)
    with tempfile.TemporaryDirectory(prefix="evidra-reading-probe-") as tmp:
        for case in args.cases:
            acc, loss, seconds = probe(
                case, args.steps, args.every, args.batch, args.lr, Path(tmp), args.warmup, prompt
            )
            print(
                f"RESULT case={case} warmup={args.warmup} steps={args.steps} acc={acc:.3f} loss={loss:.3f} "
                f"seconds={seconds:.0f}"
            )


if __name__ == "__main__":
    main()

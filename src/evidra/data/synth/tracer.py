"""TRACER-style scenarios (CAVE §4, App. B), our own construction after the paper's description.

TRACER-Bench itself is not public: these generators follow the
four scenario families CAVE describes and are labelled as evidra's construction in every
sample's extras. Each sample has a prompt, a gold answer and a perception field (key
intermediate evidence, CAVE Table 8), rendered with PIL:

* ``vjump`` — rule-switching navigation: coloured nodes with one outgoing arrow each; the rules
  alternate between "follow the arrow" and "jump to the other node of the same colour"; the
  answer is the final node's letter.
* ``trace`` — non-semantic tracing: random cubic Bezier curves from letters (left) to numbers
  (right) over background noise; the answer is the number the queried letter's curve reaches.
* ``match`` — embedded template matching: does a 2x2 template of rotated shapes appear exactly
  in a larger grid? (balanced yes/no; "no" rotates one cell of a true occurrence).
* ``subimage`` — sub-image matching on synthetic aerial-like textures: is the candidate patch
  a rotated, scaled crop of the source image? ("no" crops an unrelated texture).

Instances draw from ``random.Random(f"tracer:{task}:{split}:{seed}:{i}")``: deterministic per
seed, with train and test streams isolated (CAVE App. C, Table 10).
"""

from __future__ import annotations

import math
import random
import string
from collections.abc import Callable, Mapping
from pathlib import Path

from PIL import Image, ImageDraw

from evidra.core.errors import InvalidInputError
from evidra.core.types import Sample
from evidra.data.synth._draw import COLORS, region_around, regular_polygon, save_sample

NODE_COLORS = ("red", "blue", "green", "orange", "purple")
CURVE_COLORS = ("red", "blue", "green", "orange", "purple", "teal", "magenta", "brown")


# ---- rule-switching navigation ----------------------------------------------------------------


def follow(rules: list[str], start: int, arrows: list[int], colors: list[str]) -> list[int]:
    """The visited node indices under ``rules`` ("arrow" or "color")."""
    path = [start]
    for rule in rules:
        here = path[-1]
        if rule == "arrow":
            path.append(arrows[here])
        else:
            path.append(next(j for j, c in enumerate(colors) if c == colors[here] and j != here))
    return path


def _clearance(a: tuple[int, int], b: tuple[int, int], p: tuple[int, int]) -> float:
    """Distance from ``p`` to the segment ``a``-``b``."""
    (ax, ay), (bx, by), (px, py) = a, b, p
    t = max(
        0.0, min(1.0, ((px - ax) * (bx - ax) + (py - ay) * (by - ay)) / ((bx - ax) ** 2 + (by - ay) ** 2))
    )
    return math.hypot(px - ax - t * (bx - ax), py - ay - t * (by - ay))


def vjump(rng: random.Random, out: Path, sid: str) -> Sample:
    n = 2 * rng.randint(3, 4)  # colours come in pairs, so "the same colour" names one node
    colors = [c for c in rng.sample(NODE_COLORS, n // 2) for _ in range(2)]
    rng.shuffle(colors)
    slots = rng.sample([(80 + 110 * (k % 4), 80 + 120 * (k // 4)) for k in range(12)], n)
    arrows = []
    for i in range(n):  # an arrow must not pass over a third node, or it would read as two arrows
        clear = [
            j
            for j in range(n)
            if j != i
            and all(_clearance(slots[i], slots[j], slots[m]) > 30 for m in range(n) if m not in (i, j))
        ]
        arrows.append(rng.choice(clear or [j for j in range(n) if j != i]))
    rules = [rng.choice(("arrow", "color")) for _ in range(rng.randint(2, 4))]
    start = rng.randrange(n)
    path = follow(rules, start, arrows, colors)
    image = Image.new("RGB", (480, 400), "white")
    draw = ImageDraw.Draw(image)
    for i, j in enumerate(arrows):
        (x1, y1), (x2, y2) = slots[i], slots[j]
        d = math.hypot(x2 - x1, y2 - y1)
        ux, uy = (x2 - x1) / d, (y2 - y1) / d
        ox, oy = -6 * uy, 6 * ux  # offset sideways so that A->B and B->A stay two separate arrows
        tip = (x2 - 24 * ux + ox, y2 - 24 * uy + oy)
        draw.line([(x1 + 24 * ux + ox, y1 + 24 * uy + oy), tip], fill="black", width=2)
        draw.polygon(
            [
                tip,
                (tip[0] - 10 * ux + 5 * uy, tip[1] - 10 * uy - 5 * ux),
                (tip[0] - 10 * ux - 5 * uy, tip[1] - 10 * uy + 5 * ux),
            ],
            fill="black",
        )
    for i, (x, y) in enumerate(slots):
        draw.ellipse((x - 20, y - 20, x + 20, y + 20), fill=COLORS[colors[i]])
        draw.text((x - 3, y - 6), string.ascii_uppercase[i], fill="white")
    letters = [string.ascii_uppercase[k] for k in path]
    wording = {"arrow": "follow the arrow", "color": "jump to the other node of the same color"}
    steps = "; ".join(f"step {k + 1}: {wording[r]}" for k, r in enumerate(rules))
    prompt = (
        f"Start at node {letters[0]}. Apply these rules in order: {steps}. "
        "Which node do you end at? Answer with its letter."
    )
    visited = " -> ".join(f"{l} ({colors[k]})" for l, k in zip(letters[:-1], path[:-1], strict=True))
    last = wording[rules[-1]]
    evidence = f"Path before the last step: {visited}; the last step from {letters[-2]}: {last}."
    meta = {"colors": colors, "arrows": arrows, "slots": slots, "rules": rules, "path": path}
    region = (0, region_around([slots[k] for k in path], 28))
    return save_sample([image], out, sid, prompt, letters[-1], evidence, "tracer_vjump", meta, region)


# ---- non-semantic tracing -----------------------------------------------------------------------


def bezier(p: list[tuple[float, float]], t: float) -> tuple[float, float]:
    """Cubic Bezier point at ``t``."""
    u = 1 - t
    x = u**3 * p[0][0] + 3 * u * u * t * p[1][0] + 3 * u * t * t * p[2][0] + t**3 * p[3][0]
    y = u**3 * p[0][1] + 3 * u * u * t * p[1][1] + 3 * u * t * t * p[2][1] + t**3 * p[3][1]
    return x, y


def trace(rng: random.Random, out: Path, sid: str) -> Sample:
    k = rng.randint(3, 5)
    ys = [60 + 280 * i / (k - 1) for i in range(k)]
    targets = rng.sample(range(k), k)  # letter i's curve ends at number targets[i] + 1
    image = Image.new("RGB", (520, 400), "white")
    draw = ImageDraw.Draw(image)
    for _ in range(300):  # background noise
        x, y = rng.uniform(0, 520), rng.uniform(0, 400)
        draw.point((x, y), fill=(rng.randint(150, 230),) * 3)
    curves, controls = [], []
    for i in range(k):
        a, b = (40.0, ys[i]), (480.0, ys[targets[i]])
        ctrl = [
            a,
            (rng.uniform(120, 400), rng.uniform(20, 380)),
            (rng.uniform(120, 400), rng.uniform(20, 380)),
            b,
        ]
        color = CURVE_COLORS[i % len(CURVE_COLORS)]
        draw.line([bezier(ctrl, t / 100) for t in range(101)], fill=COLORS[color], width=3)
        curves.append({"control": ctrl, "color": color})
        controls.append(ctrl)
    for i in range(k):
        draw.text((18, ys[i] - 6), string.ascii_uppercase[i], fill="black")
        draw.text((492, ys[i] - 6), str(i + 1), fill="black")
    q = rng.randrange(k)
    letter, answer = string.ascii_uppercase[q], str(targets[q] + 1)
    prompt = (
        f"Follow the curve that starts at letter {letter} on the left. "
        "Which number does it end at on the right?"
    )
    mid = bezier(controls[q], 0.5)
    evidence = (
        f"The curve from letter {letter} is {curves[q]['color']}; halfway it passes "
        f"({round(mid[0])}, {round(mid[1])})."
    )
    meta = {"curves": curves, "targets": targets, "query": q, "ends": ys}
    region = (0, region_around([bezier(controls[q], s / 20) for s in range(21)], 12))
    return save_sample([image], out, sid, prompt, answer, evidence, "tracer_trace", meta, region)


# ---- embedded template matching -------------------------------------------------------------------


def _wedge(draw: ImageDraw.ImageDraw, x: float, y: float, size: float, rot: int) -> None:
    """An arrow-like triangle pointing in direction ``rot`` (0..3, quarter turns)."""
    angle = -math.pi / 2 + rot * math.pi / 2
    draw.polygon(regular_polygon(x, y, size, 3, angle), fill="black")


def match(rng: random.Random, out: Path, sid: str) -> Sample:
    g = rng.randint(4, 6)
    grid = [[rng.randrange(4) for _ in range(g)] for _ in range(g)]
    r, c = rng.randrange(g - 1), rng.randrange(g - 1)
    template = [row[c : c + 2] for row in grid[r : r + 2]]
    present = rng.random() < 0.5
    if not present:  # rotate one template cell; keep it only if the result occurs nowhere
        for _ in range(20):
            cand = [row[:] for row in template]
            i, j = rng.randrange(2), rng.randrange(2)
            cand[i][j] = (cand[i][j] + rng.randint(1, 3)) % 4
            if not find(grid, cand):
                template = cand
                break
        else:
            present = True
    image = Image.new("RGB", (160 + 60 * g, max(60 * g, 140) + 20), "white")
    draw = ImageDraw.Draw(image)
    draw.rectangle((10, 10, 130, 130), outline="gray")
    for i in range(2):
        for j in range(2):
            _wedge(draw, 40 + 60 * j, 40 + 60 * i, 20, template[i][j])
    for i in range(g):
        for j in range(g):
            _wedge(draw, 180 + 60 * j, 40 + 60 * i, 20, grid[i][j])
    hits = find(grid, template)
    answer = "yes" if hits else "no"
    block = [row[c : c + 2] for row in grid[r : r + 2]]
    evidence = f"Template: {_cells(template)}. Grid block at row {r + 1}, column {c + 1}: {_cells(block)}."
    prompt = (
        "The left box shows a 2x2 template of rotated triangles. Does exactly this template, with the "
        "same orientations and arrangement, appear somewhere in the grid on the right? Answer yes or no."
    )
    meta = {"grid": grid, "template": template, "matches": hits}
    region = (0, (150.0 + 60 * c, 10.0 + 60 * r, 270.0 + 60 * c, 130.0 + 60 * r))
    return save_sample([image], out, sid, prompt, answer, evidence, "tracer_match", meta, region)


POINTING = ("up", "right", "down", "left")  # a wedge's quarter turns, in drawing order


def _cells(block: list[list[int]]) -> str:
    """A 2x2 block of wedges in words, row by row.

    >>> _cells([[0, 1], [2, 3]])
    'top row up, right; bottom row down, left'
    """
    top, bottom = (", ".join(POINTING[v] for v in row) for row in block)
    return f"top row {top}; bottom row {bottom}"


def find(grid: list[list[int]], template: list[list[int]]) -> list[tuple[int, int]]:
    """Top-left cells where ``template`` occurs in ``grid``."""
    g = len(grid)
    return [
        (r, c)
        for r in range(g - 1)
        for c in range(g - 1)
        if [row[c : c + 2] for row in grid[r : r + 2]] == template
    ]


# ---- sub-image matching on aerial-like textures ---------------------------------------------------


def aerial(rng: random.Random, size: int = 320) -> Image.Image:
    """Fields, roads and building blocks: a texture with local detail and no semantics."""
    image = Image.new(
        "RGB", (size, size), (rng.randint(90, 120), rng.randint(110, 140), rng.randint(70, 100))
    )
    draw = ImageDraw.Draw(image)
    for _ in range(12):  # fields
        x, y = rng.uniform(0, size), rng.uniform(0, size)
        w, h = rng.uniform(30, 120), rng.uniform(30, 120)
        draw.rectangle(
            (x, y, x + w, y + h), fill=(rng.randint(80, 160), rng.randint(100, 170), rng.randint(60, 110))
        )
    for _ in range(4):  # roads
        draw.line(
            [(rng.uniform(0, size), 0), (rng.uniform(0, size), size)],
            fill=(200, 200, 190),
            width=rng.randint(3, 7),
        )
    for _ in range(40):  # buildings
        x, y, s = rng.uniform(0, size), rng.uniform(0, size), rng.uniform(4, 14)
        draw.rectangle((x, y, x + s, y + s * rng.uniform(0.6, 1.6)), fill=(rng.randint(150, 230),) * 3)
    return image


def crop_view(source: Image.Image, box: tuple[int, int, int, int], angle: float, scale: float) -> Image.Image:
    """The candidate patch: crop, rotate by ``angle`` degrees, resize by ``scale`` (deterministic)."""
    patch = source.crop(box).rotate(angle, resample=Image.Resampling.BILINEAR)
    return patch.resize((round(patch.width * scale), round(patch.height * scale)), Image.Resampling.BILINEAR)


def subimage(rng: random.Random, out: Path, sid: str) -> Sample:
    source = aerial(rng)
    present = rng.random() < 0.5
    origin = source if present else aerial(random.Random(rng.random()))
    side = rng.randint(70, 110)
    x, y = rng.randint(0, 320 - side), rng.randint(0, 320 - side)
    angle, scale = rng.choice((0, 90, 180, 270)), rng.uniform(0.7, 1.5)
    candidate = crop_view(origin, (x, y, x + side, y + side), angle, scale)
    answer = "yes" if present else "no"
    evidence = f"The candidate patch is turned by {angle} degrees and scaled by {scale:.2f}."
    if present:  # a patch-level correspondence (CAVE App. B.3), not the verdict
        evidence += f" It shows the aerial view's region ({x}, {y})-({x + side}, {y + side})."
    prompt = (
        "The first image is an aerial view; the second is a candidate patch, possibly rotated and "
        "scaled. Is the candidate a region of the first image? Answer yes or no."
    )
    meta = {"box": [x, y, x + side, y + side], "angle": angle, "scale": scale, "present": present}
    where = (x, y, x + side, y + side) if present else (0, 0, candidate.width, candidate.height)
    region = (0 if present else 1, where)  # the matching region, or the candidate itself
    images = [source, candidate]
    return save_sample(images, out, sid, prompt, answer, evidence, "tracer_subimage", meta, region)


TASKS: dict[str, Callable[[random.Random, Path, str], Sample]] = {
    "vjump": vjump,
    "trace": trace,
    "match": match,
    "subimage": subimage,
}


def generate_tracer(
    out_dir: str | Path, task: str, n: int, *, seed: int = 0, split: str = "train"
) -> list[Sample]:
    """``n`` samples of one scenario with images under ``out_dir``."""
    if task not in TASKS:
        raise InvalidInputError(f"unknown TRACER scenario {task!r}; use one of {sorted(TASKS)}")
    out = Path(out_dir) / f"tracer_{task}_{split}_{seed}"
    out.mkdir(parents=True, exist_ok=True)
    make = TASKS[task]
    return [
        make(random.Random(f"tracer:{task}:{split}:{seed}:{i}"), out, f"tracer-{task}-{split}-{seed}-{i}")
        for i in range(n)
    ]


def describe(sample: Sample) -> dict[str, object]:
    """The generator state behind a sample (for analysis and tests)."""
    meta = sample.extras.get("meta")
    if not isinstance(meta, Mapping):
        raise InvalidInputError(f"sample {sample.id!r} is no TRACER sample: it has no extras['meta']")
    return dict(meta)

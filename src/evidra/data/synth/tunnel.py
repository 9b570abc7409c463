"""Tunnel-Vision-style tasks (Berman & Deng, NeurIPS 2025) as CAVE's auxiliary training data.

Our own re-implementation from the Tunnel-Vision task description (the suite's
code is not public in a form we can reuse): object re-identification (``objreid``), the visual
scavenger hunt (``chain``) and circuit connections (``circuits``), rendered with PIL. CAVE
(App. C) uses such data for training only, with a "perception" field of key evidence that never
restates the answer (App. B.3); each sample carries it in ``gold_evidence`` /
``extras["perception"]``, and the region to zoom into in ``Sample.evidence_box``.

Every instance is drawn from ``random.Random(f"tunnel:{task}:{split}:{seed}:{i}")``: the same
seed reproduces the same bytes, and splits never share a random stream (CAVE App. C, Table 10).
Answers use the suite's braces convention: the model answers ``{red}``, ``{C3}`` or ``{yes}``.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable
from pathlib import Path
from typing import TypedDict

from PIL import Image, ImageDraw

from evidra.core.errors import InvalidInputError
from evidra.core.types import Sample
from evidra.data.synth._draw import (
    COLORS,
    Point,
    region_around,
    regular_polygon,
    save_sample,
    transform_points,
)

CHAIN_COLORS = (
    "red",
    "orange",
    "yellow",
    "green",
    "blue",
    "purple",
    "magenta",
    "pink",
    "cyan",
    "gray",
    "lime",
)
CHAIN_SHAPES = ("circle", "square", "triangle")
CELL = 100  # px per grid cell
OBJ_COLORS = ("red", "green", "blue", "orange", "purple", "teal", "magenta", "gold")
WIRE_COLORS = ("red", "orange", "yellow", "green", "blue", "purple")
_SIDES = {"circle": 32, "square": 4, "triangle": 3}


def _shape(draw: ImageDraw.ImageDraw, kind: str, cx: float, cy: float, r: float, color: str) -> None:
    angle = -math.pi / 2 if kind == "triangle" else math.pi / 4 if kind == "square" else 0.0
    draw.polygon(regular_polygon(cx, cy, r, _SIDES[kind], angle), fill=COLORS[color])


# ---- visual scavenger hunt (chain trial) ------------------------------------------------------


def chain(rng: random.Random, out: Path, sid: str, steps: int = 2) -> Sample:
    """3x3 grid; each chain cell's label names the next cell; the answer is the last cell's colour."""
    pairs = [(s, c) for s in CHAIN_SHAPES for c in CHAIN_COLORS]
    cells = rng.sample(pairs, 9)  # unique (shape, colour) per cell
    order = rng.sample(range(9), steps + 1)
    labels = {i: f"{cells[j][1]} {cells[j][0]}" for i, j in itertools.pairwise(order)}
    for i in range(9):
        if i not in labels:
            decoy = rng.choice(pairs)
            labels[i] = f"{decoy[1]} {decoy[0]}"
    image = Image.new("RGB", (3 * CELL, 3 * CELL), "white")
    draw = ImageDraw.Draw(image)
    for i, (shape, color) in enumerate(cells):
        x, y = (i % 3) * CELL, (i // 3) * CELL
        _shape(draw, shape, x + CELL / 2, y + CELL * 0.42, 0.35 * CELL * 0.8, color)
        draw.text((x + 4, y + CELL - 14), labels[i], fill="black")
    start = cells[order[0]]
    final = cells[order[-1]][1]
    path = [f"{cells[j][1]} {cells[j][0]} (row {j // 3 + 1}, column {j % 3 + 1})" for j in order[:-1]]
    last = order[-1]  # its place, not its colour: that is the answer
    path.append(f"the cell at row {last // 3 + 1}, column {last % 3 + 1}")
    prompt = (
        f"Starting at the {start[1]} {start[0]}, follow the labels for {steps} steps. Each cell's label "
        f"names the next cell. After {steps} steps, what color are you on? Answer with the color in "
        "braces, e.g. {red}."
    )
    meta = {
        "start_pair": list(start),
        "final_color": final,
        "chain": [list(cells[j]) for j in order],
        "cells": [list(c) for c in cells],
        "labels": [labels[i] for i in range(9)],
    }
    corners = [((j % 3 + dx) * CELL, (j // 3 + dy) * CELL) for j in order for dx in (0, 1) for dy in (0, 1)]
    region = (0, region_around(corners, 0))
    return save_sample([image], out, sid, prompt, final, " -> ".join(path), "tunnel_chain", meta, region)


# ---- circuit connections ------------------------------------------------------------------------


def _board_ports() -> list[tuple[float, float]]:
    bx, by = 300, 140  # 200 x 320 breadboard centred on the 800 x 600 canvas
    return [(bx + 60 + 80 * (k % 2), by + 40 + 60 * (k // 2)) for k in range(10)]


class _Component(TypedDict):
    """A box on the circuit board (``meta.components``)."""

    name: str
    rect: list[int]  # x1, y1, x2, y2
    ports: list[Point]
    fill: tuple[int, int, int]


class _Wire(TypedDict):
    port: int  # 1-based breadboard port
    comp: str
    path: list[Point]
    color: str


class _Shape(TypedDict):
    """One polygon of an object-re-identification composite."""

    cx: float
    cy: float
    r: float
    points: list[Point]
    color: str


def _components(rng: random.Random, n: int) -> list[_Component]:
    slots = [(x, 20) for x in (20, 140, 260, 420, 540, 680)] + [
        (x, 520) for x in (20, 140, 260, 420, 540, 680)
    ]
    slots += [(20, 180), (20, 300), (680, 180), (680, 300)]
    comps: list[_Component] = []
    for k, (x, y) in enumerate(rng.sample(slots, n)):
        ports: list[Point] = [(x + 20 + 30 * j, y + 30.0) for j in range(rng.randint(1, 3))]
        fill = (rng.randint(190, 240), rng.randint(190, 240), rng.randint(190, 240))  # pastel
        comps.append({"name": f"C{k + 1}", "rect": [x, y, x + 100, y + 60], "ports": ports, "fill": fill})
    return comps


def _near_segment(p: tuple[float, float], a: tuple[float, float], b: tuple[float, float], r: float) -> bool:
    """``p`` lies within ``r`` of the segment ``a``-``b``."""
    (ax, ay), (bx, by), (px, py) = a, b, p
    length = (bx - ax) ** 2 + (by - ay) ** 2
    t = 0.0 if length == 0 else max(0.0, min(1.0, ((px - ax) * (bx - ax) + (py - ay) * (by - ay)) / length))
    return math.hypot(px - ax - t * (bx - ax), py - ay - t * (by - ay)) < r


def _wire_path(
    rng: random.Random, a: tuple[float, float], b: tuple[float, float], avoid: list[tuple[float, float]]
) -> list[tuple[float, float]]:
    """A kinked diagonal polyline from ``a`` to ``b`` (two random bends) passing no port in
    ``avoid`` (a wire over a port would read as connected to it); 50 tries, then straight."""
    for _ in range(50):
        pts = [a]
        for t in (rng.uniform(0.25, 0.45), rng.uniform(0.55, 0.75)):
            dx, dy = rng.uniform(-60, 60), rng.uniform(-60, 60)
            pts.append((a[0] + t * (b[0] - a[0]) + dx, a[1] + t * (b[1] - a[1]) + dy))
        pts.append(b)
        if not any(_near_segment(p, u, v, 16) for p in avoid for u, v in itertools.pairwise(pts)):
            return pts
    return [a, b]


def circuits(rng: random.Random, out: Path, sid: str, n_components: int = 4, max_wires: int = 5) -> Sample:
    comps = _components(rng, n_components)
    free = [(c["name"], p) for c in comps for p in c["ports"]]
    rng.shuffle(free)
    board = _board_ports()
    wired = rng.sample(range(10), min(rng.randint(2, max_wires), len(free), 10))
    all_ports = board + [p for c in comps for p in c["ports"]]
    wires: list[_Wire] = []
    for port in wired:
        comp, end = free.pop()
        path = _wire_path(rng, board[port], end, [p for p in all_ports if p not in (board[port], end)])
        wires.append({"port": port + 1, "comp": comp, "path": path, "color": rng.choice(WIRE_COLORS)})
    image = Image.new("RGB", (800, 600), "white")
    draw = ImageDraw.Draw(image)
    draw.rectangle((300, 140, 500, 460), fill="#e0e0e0")
    for c in comps:
        draw.rectangle(tuple(c["rect"]), fill=tuple(c["fill"]), outline="black")
        draw.text((c["rect"][0] + 4, c["rect"][1] + 4), c["name"], fill="black")
    for w in wires:
        draw.line(w["path"], fill=COLORS[w["color"]], width=4, joint="curve")
    for c in comps:
        for x, y in c["ports"]:
            draw.ellipse((x - 5, y - 5, x + 5, y + 5), outline="black", width=2)
    for k, (x, y) in enumerate(board):
        draw.ellipse((x - 10, y - 10, x + 10, y + 10), fill="white", outline="black")
        draw.text((x - 4, y - 6), str(k + 1), fill="black")
    query = rng.choice(wires)
    prompt = (
        f"Which component does the wire from port {query['port']} on the breadboard connect to? "
        "Answer with the component name in braces, e.g. {C3}."
    )
    end = query["path"][-1]
    evidence = (
        f"The {query['color']} wire leaves port {query['port']} and ends at the port at "
        f"({round(end[0])}, {round(end[1])})."
    )
    meta = {"query_port": query["port"], "correct_comp": query["comp"], "wires": wires, "components": comps}
    region = (0, region_around(query["path"], 24))
    return save_sample([image], out, sid, prompt, query["comp"], evidence, "tunnel_circuits", meta, region)


# ---- object re-identification ---------------------------------------------------------------------


def _composite(rng: random.Random) -> list[_Shape]:
    """2-5 polygons, each placed against an earlier one (distance r_i + r_ref - U(0, 0.1 min r));
    polygons inscribed in that radius may still not touch, so callers check connectivity."""
    shapes: list[_Shape] = []
    for _ in range(rng.randint(2, 5)):
        r = rng.uniform(0.07, 0.20) * 512 / 2
        if not shapes:
            cx, cy = 256.0, 256.0
        else:
            ref = rng.choice(shapes)
            d = r + ref["r"] - rng.uniform(0, 0.1 * min(r, ref["r"]))
            a = rng.uniform(0, 2 * math.pi)
            cx, cy = ref["cx"] + d * math.cos(a), ref["cy"] + d * math.sin(a)
        sides = rng.choice((3, 4, 5, 6, 7, 8, 32))
        pts = regular_polygon(cx, cy, r, sides, rng.uniform(0, 2 * math.pi))
        shapes.append({"cx": cx, "cy": cy, "r": r, "points": pts, "color": rng.choice(OBJ_COLORS)})
    return shapes


def is_connected(image: Image.Image) -> bool:
    """All pixels with luminance < 250 form one 4-connected component (the suite's check)."""
    ink = image.convert("L").point(lambda v: 0 if v < 250 else 255)
    box = ink.point(lambda v: 255 - v).getbbox()  # the ink's bounding box: its top row has ink
    if box is None:
        return False
    start = next((x, box[1]) for x in range(box[0], box[2]) if ink.getpixel((x, box[1])) == 0)
    ImageDraw.floodfill(ink, start, 128)
    return ink.histogram()[0] == 0


def _connected_composite(rng: random.Random, tries: int = 50) -> list[_Shape]:
    """A composite that is one connected blob and fits the canvas (rejection sampling)."""
    for _ in range(tries):
        shapes = _composite(rng)
        inside = all(0 <= x < 512 and 0 <= y < 512 for sh in shapes for x, y in sh["points"])
        if inside and is_connected(_render(shapes)):
            return shapes
    return shapes[:1]  # one shape is always connected


def _render(shapes: list[_Shape]) -> Image.Image:
    image = Image.new("RGB", (512, 512), "white")
    draw = ImageDraw.Draw(image)
    for s in shapes:
        draw.polygon(s["points"], fill=COLORS[s["color"]])
    return image


def objreid(rng: random.Random, out: Path, sid: str) -> Sample:
    """Image 2 is the composite rotated by U(-pi, pi) and scaled by U(0.5, 1.5) about the centre
    ("yes"), or that copy with 1-2 shapes jittered by translation, rotation or scale ("no")."""
    shapes = _connected_composite(rng)
    angle, scale = rng.uniform(-math.pi, math.pi), rng.uniform(0.5, 1.5)  # suite: U(0.3, 2); kept on canvas
    moved: list[_Shape] = [
        {**s, "points": transform_points(s["points"], angle, scale, (256, 256))} for s in shapes
    ]
    same = rng.random() < 0.5
    jittered: list[int] = []
    if not same:
        jittered = rng.sample(range(len(moved)), min(len(moved), rng.randint(1, 2)))
        for j in jittered:
            pts = moved[j]["points"]
            cx, cy = sum(p[0] for p in pts) / len(pts), sum(p[1] for p in pts) / len(pts)
            kind = rng.choice(("translate", "rotate", "scale"))
            if kind == "translate":
                dx, dy = (rng.choice((-1, 1)) * rng.uniform(15, 30) for _ in range(2))
                moved[j] = {**moved[j], "points": [(x + dx, y + dy) for x, y in pts]}
            elif kind == "rotate":
                turn = math.radians(rng.uniform(6, 36))
                moved[j] = {**moved[j], "points": transform_points(pts, turn, 1.0, (cx, cy))}
            else:
                factor = 1 + rng.choice((-1, 1)) * rng.uniform(0.1, 0.33)
                moved[j] = {**moved[j], "points": transform_points(pts, 0.0, factor, (cx, cy))}
    answer = "yes" if same else "no"
    prompt = (
        "The first image shows an object made of several shapes. Does this SAME object appear in the "
        "second image, possibly rotated or scaled? Respond with {yes} or {no}."
    )
    shown = moved[max(jittered) if jittered else -1]  # a jittered shape, else the last (never centred)
    cx, cy = (sum(v) / len(shown["points"]) for v in zip(*shown["points"], strict=True))
    kind = "round" if len(shown["points"]) == 32 else f"{len(shown['points'])}-sided"
    evidence = (
        f"Image 2 shows image 1 turned by {round(math.degrees(angle))} degrees and scaled by "
        f"{scale:.2f} about its centre; its {shown['color']} {kind} shape is at "
        f"({round(cx)}, {round(cy)})."
    )
    meta = {"angle": angle, "scale": scale, "jittered": sorted(jittered), "n_shapes": len(shapes)}
    region = (1, region_around([p for s in moved for p in s["points"]], 12))
    images = [_render(shapes), _render(moved)]
    return save_sample(images, out, sid, prompt, answer, evidence, "tunnel_objreid", meta, region)


TASKS: dict[str, Callable[[random.Random, Path, str], Sample]] = {
    "chain": chain,
    "circuits": circuits,
    "objreid": objreid,
}


def generate_tunnel(
    out_dir: str | Path, task: str, n: int, *, seed: int = 0, split: str = "train"
) -> list[Sample]:
    """``n`` samples of ``task`` (``chain``, ``circuits``, ``objreid``) with images under ``out_dir``."""
    if task not in TASKS:
        raise InvalidInputError(f"unknown Tunnel Vision task {task!r}; use one of {sorted(TASKS)}")
    out = Path(out_dir) / f"tunnel_{task}_{split}_{seed}"
    out.mkdir(parents=True, exist_ok=True)
    return [
        TASKS[task](
            random.Random(f"tunnel:{task}:{split}:{seed}:{i}"), out, f"tunnel-{task}-{split}-{seed}-{i}"
        )
        for i in range(n)
    ]

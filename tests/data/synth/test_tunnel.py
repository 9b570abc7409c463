"""Tunnel-Vision-style tasks: deterministic per seed, split-isolated, answers match the pixels."""

from __future__ import annotations

import hashlib
import itertools
import math
from pathlib import Path

import pytest
from PIL import Image

from evidra.core.errors import InvalidInputError
from evidra.data.synth._draw import COLORS
from evidra.data.synth.tunnel import CELL, _near_segment, generate_tunnel, is_connected
from evidra.data.synth.tunnel import _board_ports as _board


def _digest(paths: list[str]) -> str:
    return hashlib.sha256(b"".join(Path(p).read_bytes() for p in paths)).hexdigest()


@pytest.mark.parametrize("task", ["chain", "circuits", "objreid"])
def test_deterministic_per_seed_and_split(tmp_path: Path, task: str) -> None:
    a = generate_tunnel(tmp_path / "a", task, 3, seed=5)
    b = generate_tunnel(tmp_path / "b", task, 3, seed=5)
    test = generate_tunnel(tmp_path / "a", task, 3, seed=5, split="test")
    pa = [p.image_path for s in a for p in s.pages]
    assert _digest(pa) == _digest([p.image_path for s in b for p in s.pages])
    assert [s.answers for s in a] == [s.answers for s in b]
    assert _digest(pa) != _digest([p.image_path for s in test for p in s.pages])
    assert all(s.extras["perception"] and s.gold_evidence for s in a)


def test_chain_final_colour_is_the_cell_colour(tmp_path: Path) -> None:
    for s in generate_tunnel(tmp_path, "chain", 6, seed=1):
        meta = s.extras["meta"]
        cells = [tuple(c) for c in meta["cells"]]
        # following the labels from the start cell reproduces the chain
        here = cells.index(tuple(meta["start_pair"]))
        for _ in range(2):
            shape_colour = meta["labels"][here].split(" ")
            here = cells.index((shape_colour[1], shape_colour[0]))
        assert cells[here][1] == s.answers[0] == meta["final_color"]
        with Image.open(s.pages[0].image_path) as im:
            x, y = (here % 3) * CELL + CELL // 2, (here // 3) * CELL + int(CELL * 0.42)
            assert im.convert("RGB").getpixel((x, y)) == COLORS[s.answers[0]]  # the shape's centre


def test_circuit_answer_wire_ends_in_the_component(tmp_path: Path) -> None:
    for s in generate_tunnel(tmp_path, "circuits", 5, seed=2):
        meta = s.extras["meta"]
        wire = next(w for w in meta["wires"] if w["port"] == meta["query_port"])
        comp = next(c for c in meta["components"] if c["name"] == s.answers[0])
        x, y = wire["path"][-1]
        x1, y1, x2, y2 = comp["rect"]
        assert x1 <= x <= x2 and y1 <= y <= y2
        assert f"port {meta['query_port']}" in s.question
        ports = [tuple(p) for p in _board()] + [tuple(p) for c in meta["components"] for p in c["ports"]]
        for w in meta["wires"]:  # no wire runs over a port it does not connect
            ends = {tuple(w["path"][0]), tuple(w["path"][-1])}
            for a, b in itertools.pairwise(w["path"]):
                assert not any(_near_segment(p, a, b, 16) for p in ports if p not in ends)
        # the wire's colour is drawn near its start on the breadboard port's rim
        (sx, sy), (nx, ny) = wire["path"][0], wire["path"][1]
        d = math.hypot(nx - sx, ny - sy)
        probe = (round(sx + 14 * (nx - sx) / d), round(sy + 14 * (ny - sy) / d))
        with Image.open(s.pages[0].image_path) as im:
            assert im.convert("RGB").getpixel(probe) in {
                COLORS[c] for c in ("red", "orange", "yellow", "green", "blue", "purple")
            }


def test_objreid_yes_keeps_area_no_jitters(tmp_path: Path) -> None:
    samples = generate_tunnel(tmp_path, "objreid", 12, seed=3)
    assert {s.answers[0] for s in samples} == {"yes", "no"}
    checked = 0
    for s in samples:
        assert len(s.pages) == 2
        with Image.open(s.pages[0].image_path) as first:
            assert is_connected(first)  # the composite is one blob
        meta = s.extras["meta"]
        assert (meta["jittered"] == []) == (s.answers[0] == "yes")
        if s.answers[0] == "yes":
            inked = []
            for page in s.pages:
                with Image.open(page.image_path) as im:
                    gray = im.convert("L")
                    inked.append(gray.point(lambda v: 255 if v < 250 else 0).histogram()[255])
                    touches = (
                        gray.crop((0, 0, 512, 1)).getextrema()[0] < 250
                        or gray.crop((0, 511, 512, 512)).getextrema()[0] < 250
                    )
            if not touches:  # a rotated, scaled copy: ink area scales with scale^2
                assert inked[1] / inked[0] == pytest.approx(meta["scale"] ** 2, rel=0.1)
                checked += 1
    assert checked >= 1


def test_is_connected_hand_cases() -> None:
    two = Image.new("RGB", (20, 20), "white")
    two.paste((0, 0, 0), (2, 2, 6, 6))
    two.paste((0, 0, 0), (10, 10, 14, 14))
    assert not is_connected(two)
    two.paste((0, 0, 0), (5, 5, 11, 11))  # a bridge joins them
    assert is_connected(two)


def test_unknown_task() -> None:
    with pytest.raises(InvalidInputError, match="chain"):
        generate_tunnel("/tmp", "maze", 1)

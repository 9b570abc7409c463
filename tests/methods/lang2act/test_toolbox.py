"""Lang2Act tool curation with a scripted curation model: grammar, reuse, counts, top-K, coverage."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest

from evidra.core.errors import InvalidInputError
from evidra.methods.lang2act.paradigm import load_toolbox
from evidra.methods.lang2act.toolbox import (
    EMPTY_POOL,
    LocalVLMModel,
    OpenAIChatModel,
    PoolTool,
    ToolPool,
    curate,
    description_of,
    parse_curation,
    pool_text,
)


class Scripted:
    """Replies in order and records the prompts it was shown."""

    def __init__(self, replies: Sequence[str]) -> None:
        self.replies, self.systems, self.users = list(replies), [], []

    def complete(self, system: str, user: str) -> str:
        self.systems.append(system)
        self.users.append(user)
        return self.replies.pop(0)


def test_parse_strict_grammar() -> None:
    out = parse_curation(
        "DEFINE_TOOL: read_cell || row, col || Read one cell.\n"
        "DEFINE_TOOL: bad || only two\n"
        "DEFINE_TOOL: 9lives || a || b\n"
        "DEFINE_TOOL read_x || a || b\n"
        "DEFINE_TOOL: empty ||  || desc\n"
        '<tool name="read_cell" args="row 2, col 3">$5</tool>\n'
        "END_OF_TOOLS\n"
        '<tool name="after_end" args="x">ignored</tool>'
    )
    assert out.definitions == (PoolTool("read_cell", "row, col", "Read one cell."),)
    assert [a.name for a in out.applications] == ["read_cell"] and out.applications[0].result == "$5"
    assert out.ended and len(out.errors) == 4
    truncated = parse_curation('DEFINE_TOOL: a || b || c\n<tool name="a" args="x">unfinished')
    assert not truncated.ended and truncated.applications == () and "missing END_OF_TOOLS" in truncated.errors
    assert parse_curation("").errors == ("missing END_OF_TOOLS",)


def test_reuse_before_create_counts_and_top_k(tmp_path: Path) -> None:
    replies = [
        # t1 defines and uses two tools (one twice: counted once per trajectory, Eq. 7)
        "DEFINE_TOOL: locate_row || row || Find a table row.\n"
        "DEFINE_TOOL: read_cell || cell || Read a cell.\n"
        '<tool name="locate_row" args="Q3">Row 4</tool><tool name="read_cell" args="r4">1</tool>'
        '<tool name="read_cell" args="r5">2</tool>\nEND_OF_TOOLS',
        # t2 reuses read_cell, redefines locate_row (kept as first defined), defines an unused tool
        "DEFINE_TOOL: locate_row || other || Different text.\nDEFINE_TOOL: unused || x || Never applied.\n"
        '<tool name="read_cell" args="r1">3</tool><tool name="locate_row" args="Q1">Row 1</tool>'
        "\nEND_OF_TOOLS",
        # t3 applies an undefined tool (an error) and a new one
        'DEFINE_TOOL: subtract || a, b || Difference.\n<tool name="ghost" args="">?</tool>'
        '<tool name="subtract" args="3, 1">2</tool>\nEND_OF_TOOLS',
        # t4: garbage
        "I cannot help with that.",
    ]
    model = Scripted(replies)
    trajectories = [
        "<think>x</think><description>Found row Q3, read 150.</description><answer>1</answer>",
        "read cells",
        "subtract",
        "nothing",
    ]
    steps: list[int] = []
    box = curate(trajectories, model, k=2, progress=steps.append)
    assert steps == [1, 1, 1, 1]  # one per trajectory, the garbage reply included
    assert EMPTY_POOL in model.systems[0]
    assert "- locate_row || row || Find a table row." in model.systems[1]  # the pool is shown for reuse
    assert model.users[0].endswith("DESCRIPTION: Found row Q3, read 150.\nOUTPUT:")
    assert [(t.name, c) for t, c in box.tools] == [("locate_row", 2), ("read_cell", 2)]
    assert box.tools[0][0].args == "row"  # not overwritten by the redefinition
    assert box.pool_size == 3 and box.trajectories == 4  # 'unused' and 'ghost' never enter the pool
    assert box.coverage == pytest.approx(4 / 5)
    assert box.errors == 2  # the ghost application + missing END_OF_TOOLS
    path = box.write(tmp_path / "toolbox.json")
    rows = json.loads(path.read_text())
    # stage 2 asks for args="Image k: ...": a tool that reads an image gets the prefix in its hint
    assert rows[0] == {
        "name": "locate_row",
        "args": "Image k: row",
        "description": "Find a table row.",
        "numeric": False,
        "count": 2,
    }
    assert [t.name for t in load_toolbox(path)] == [
        "locate_row",
        "read_cell",
    ]  # the toolchain paradigm reads it


def test_pool_helpers() -> None:
    assert pool_text([]) == EMPTY_POOL
    assert description_of("no tags here ") == "no tags here"
    with pytest.raises(InvalidInputError):
        ToolPool().top_k(0)
    assert curate([], Scripted([])).tools == ()


@pytest.fixture()
def chat_server() -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            assert body["messages"][0]["role"] == "system"
            reply = {"choices": [{"message": {"content": '<tool name="t" args="a">r</tool>END_OF_TOOLS'}}]}
            data = json.dumps(reply).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()


def test_openai_compatible_model(chat_server: str) -> None:
    model = OpenAIChatModel(chat_server, "curator")
    assert model.complete("sys", "user").startswith('<tool name="t"')


def test_local_vlm_model_is_greedy(tiny_vlms: dict[str, Any]) -> None:
    model = LocalVLMModel(tiny_vlms["qwen2_5_vl"], max_new_tokens=4)
    text = model.complete("sys", "user")
    assert text == model.complete("sys", "user")  # greedy: the same reply twice
    assert not parse_curation(text).ended  # random text: no END_OF_TOOLS, parsed without raising


def test_numeric_tools_are_those_applied_with_values_only(tmp_path: Path) -> None:
    """A curated arithmetic tool (all its applications pass values) is written numeric; stage 2's
    validity then exempts it from the Image k check, and the tools reading regions are not."""
    from evidra.methods.lang2act.format import tool_validity

    replies = [
        "DEFINE_TOOL: locate_table_row || row || Find a row.\n"
        "DEFINE_TOOL: subtract_values || val1, val2 || Calculate difference.\n"
        '<tool name="locate_table_row" args="row \'Q3\'">Row 4</tool>'
        '<tool name="subtract_values" args="150, 100">50</tool>\nEND_OF_TOOLS',
        # a mixed use: one application of read_cell passes a region, so it is not numeric
        "DEFINE_TOOL: read_cell || cell || Read a cell.\n"
        '<tool name="subtract_values" args="$150M, 12.5%">x</tool><tool name="read_cell" args="3">1</tool>'
        '<tool name="read_cell" args="row 4">1</tool>\nEND_OF_TOOLS',
    ]
    box = curate(["a", "b"], Scripted(replies), k=3)
    assert box.numeric == frozenset({"subtract_values"})
    tools = load_toolbox(box.write(tmp_path / "box.json"))
    by_name = {t.name: t for t in tools}
    assert by_name["subtract_values"].numeric and by_name["subtract_values"].args == "val1, val2"
    assert not by_name["locate_table_row"].numeric and by_name["locate_table_row"].args == "Image k: row"
    names, numeric = {t.name for t in tools}, {t.name for t in tools if t.numeric}
    response = (
        "<think>Image 1 has the table.</think><description>"
        '<tool name="locate_table_row" args="Image 1: row Q3">Row 4</tool>'
        '<tool name="subtract_values" args="150, 100">50</tool>'
        "</description><answer>50</answer>"
    )
    assert tool_validity(response, 1, names, numeric) == 1.0
    assert tool_validity(response, 1, names) == 0.0  # the released two-name exemption list rejects it

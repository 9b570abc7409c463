"""Names read from a store are shown, never obeyed: a file named with terminal escape sequences
(``\\x1b]0;...\\x07`` retitles the window, ``\\x1b[2J`` clears the screen) is printed with them
written out by ``pages`` and ``index search``, and read back whole from their ``--json`` lines; a
planted 2 GiB ``retriever.json`` is one line, read not at all."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from evidra.cli.main import main

HOSTILE = "r\x1b]0;pwned\x07ep\x1b[2Jort\x9b2J.pdf"  # OSC retitle, CSI clear, C1 CSI
SHOWN = "r\\x1b]0;pwned\\x07ep\\x1b[2Jort\\x9b2J.pdf"
RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f]")  # any control character but the newline


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A one-page store of a PDF named ``HOSTILE``, with a BM25 index at ``<root>/idx``."""
    from evidra.corpus.pdfwriter import PdfCanvas, write_pdf

    root = tmp_path_factory.mktemp("terminal")
    (root / "docs").mkdir()
    canvas = PdfCanvas(300, 200)
    canvas.text(30, 50, "orion budget report", 14)
    (root / "docs" / HOSTILE).write_bytes(write_pdf([canvas]))
    assert main(["-q", "ingest", str(root / "docs"), "--store", str(root / "store"), "--dpi", "72"]) == 0
    argv = [
        "-q",
        "index",
        "build",
        "--store",
        str(root / "store"),
        "--encoder",
        "bm25",
        "--out",
        str(root / "idx"),
    ]
    assert main(argv) == 0
    return root


def _out(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    capsys.readouterr()
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert not RAW.search(out), repr(out)
    return out


def test_pages_shows_a_hostile_file_name_written_out(
    hostile: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert SHOWN in _out(capsys, ["pages", str(hostile / "store")])
    (line,) = _out(capsys, ["pages", str(hostile / "store"), "--json"]).splitlines()
    assert json.loads(line)["source"] == HOSTILE  # the JSON reads back as the name itself


def test_index_search_shows_a_hostile_file_name_written_out(
    hostile: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _out(capsys, ["index", "search", "--index", str(hostile / "idx"), "orion"])
    assert SHOWN in out and SHOWN.removesuffix(".pdf") in out  # the file, and the title (its stem)
    (line,) = _out(
        capsys, ["index", "search", "--index", str(hostile / "idx"), "--json", "orion"]
    ).splitlines()
    (hit,) = json.loads(line)["hits"]
    assert hit["source"] == hit["file"] == HOSTILE and hit["title"] == HOSTILE.removesuffix(".pdf")


def test_an_error_naming_a_hostile_path_stays_one_clean_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "no\x1b[2Jstore\nforged line"
    assert main(["pages", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and not RAW.search(err) and "\\x1b[2J" in err, repr(err)


def test_a_planted_2gib_retriever_json_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    index = tmp_path / "idx"
    index.mkdir()
    with (index / "retriever.json").open("wb") as fh:
        fh.truncate(2 << 30)  # sparse: costs no disk; read whole it would cost 2 GiB of memory
    assert main(["index", "search", "--index", str(index), "budget"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith("evidra index search: error: index manifest ") and "retriever.json" in err
    assert "is 2.0 GiB, over its 64.0 MiB cap; rebuild the index" in err

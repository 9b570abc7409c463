"""`index build` is all or nothing: a failed or killed build leaves nothing that blocks the next."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from evidra.core.errors import CorpusError, InvalidInputError
from evidra.core.types import Box, Page, Word
from evidra.retrieval.encoders.bm25 import BM25Retriever
from evidra.retrieval.lifecycle.index_folder import MANIFEST, build_index, open_index

PAGES = [
    Page(f"doc-p000{i}", f"/pages/{i}.png", 100, 100, words=(Word(text, Box(0, 0, 10, 10)),))
    for i, text in enumerate(["orion founded", "revenue table", "signed memo"], start=1)
]


def _leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if ".building." in p.name)


def test_a_failed_build_leaves_nothing_and_a_rebuild_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(self: BM25Retriever, *args: object, **kwargs: object) -> None:
        raise RuntimeError("disk full")

    monkeypatch.setattr(BM25Retriever, "add", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        build_index(PAGES, tmp_path / "idx", "bm25")
    assert not (tmp_path / "idx").exists() and _leftovers(tmp_path) == []
    monkeypatch.undo()
    with build_index(PAGES, tmp_path / "idx", "bm25") as engine:
        assert engine.root == (tmp_path / "idx").absolute()
        assert engine.retriever.search(["orion"], k=1)[0][0].page_id == "doc-p0001"
    with open_index(tmp_path / "idx") as engine:
        assert len(engine.index) == 3


def test_a_killed_build_is_cleaned_by_the_next(tmp_path: Path) -> None:
    script = textwrap.dedent(f"""
        import os
        from evidra.retrieval.encoders.bm25 import BM25Retriever
        from evidra.retrieval.lifecycle.index_folder import build_index
        from evidra.core.types import Page

        def killed(self, *args, **kwargs):
            os._exit(9)  # no cleanup runs, as with kill -9

        BM25Retriever.add = killed
        build_index([Page("p1", "/x.png", 10, 10)], {str(tmp_path / "idx")!r}, "bm25")
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    assert subprocess.run([sys.executable, "-c", script], env=env, timeout=120).returncode == 9
    assert not (tmp_path / "idx").exists() and len(_leftovers(tmp_path)) == 1
    with pytest.raises(CorpusError, match=r"has no retriever\.json; build it"):
        open_index(tmp_path / "idx")
    live = tmp_path / f".idx.building.{os.getpid()}.abc"  # a build still running beside this one
    live.mkdir()
    build_index(PAGES, tmp_path / "idx", "bm25").close()
    assert _leftovers(tmp_path) == [live.name]
    assert (tmp_path / "idx" / MANIFEST).is_file()


def test_a_build_interrupted_while_publishing_into_a_folder_is_redone(tmp_path: Path) -> None:
    out = tmp_path / "idx"
    (out / "images").mkdir(parents=True)  # e.g. inline images written before the build
    (out / "images" / "a.png").write_bytes(b"png")
    (out / "bm25.index.json").write_text("{truncated")  # an entry moved before the manifest, then killed
    with build_index(PAGES, out, "bm25") as engine:
        assert engine.retriever.search(["memo"], k=1)[0][0].page_id == "doc-p0003"
    assert (out / "images" / "a.png").read_bytes() == b"png"
    with pytest.raises(InvalidInputError, match="an index already exists"):
        build_index(PAGES, out, "bm25")
    (tmp_path / "file").write_text("x")
    with pytest.raises(InvalidInputError, match="exists and is not a folder"):
        build_index(PAGES, tmp_path / "file", "bm25")

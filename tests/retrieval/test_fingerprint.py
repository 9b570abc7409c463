"""An index remembers the encoder that built it: another checkpoint is refused naming both, a moved
one is found again with --encoder."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from evidra.cli.main import main
from evidra.core.errors import InvalidInputError
from evidra.core.types import Page
from evidra.models.tiny import build_tiny
from evidra.retrieval.lifecycle.fingerprint import fingerprint, short
from evidra.retrieval.lifecycle.index_folder import MANIFEST, build_index, open_index, read_spec


@pytest.fixture
def built(tmp_path: Path, tiny_dirs: dict[str, Path], ragged_pages: list[Page]) -> tuple[Path, Path]:
    encoder = tmp_path / "ckpt" / "colqwen2"
    shutil.copytree(tiny_dirs["colqwen2"], encoder)
    build_index(ragged_pages[:2], tmp_path / "idx", "colqwen2", encoder).close()
    return tmp_path / "idx", encoder


def test_the_index_records_the_fingerprint_of_its_encoder(built: tuple[Path, Path]) -> None:
    idx, encoder = built
    spec = read_spec(idx)
    assert spec.encoder_path == str(encoder) and spec.encoder_fingerprint == fingerprint(encoder)
    (encoder / "notes.lock").write_text("tools' lock files do not count")
    assert fingerprint(encoder) == spec.encoder_fingerprint


def test_another_checkpoint_is_refused_naming_both(built: tuple[Path, Path], tmp_path: Path) -> None:
    idx, encoder = built
    other = build_tiny("colqwen2", tmp_path / "other", seed=1)
    with pytest.raises(InvalidInputError) as info:
        open_index(idx, encoder_path=other)
    message = str(info.value)
    assert str(encoder) in message and str(other) in message and "\n" not in message
    assert short(fingerprint(encoder)) in message and short(fingerprint(other)) in message


def test_a_moved_encoder_is_named_and_found_with_encoder(
    built: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    idx, encoder = built
    moved = shutil.move(encoder, tmp_path / "moved")
    with pytest.raises(InvalidInputError, match="no longer exists; pass --encoder DIR"):
        open_index(idx)
    with open_index(idx, encoder_path=moved) as engine:
        assert len(engine.retriever.search(["a chart"], k=1)[0]) == 1
    assert main(["index", "search", "--index", str(idx), "-q", "chart"]) == 2
    assert "was built with encoder checkpoint" in capsys.readouterr().err
    assert (
        main(["-q", "index", "search", "--index", str(idx), "--encoder", str(moved), "--json", "chart"]) == 0
    )
    assert len(json.loads(capsys.readouterr().out)["hits"]) == 2


def test_an_index_without_a_fingerprint_opens_as_before(built: tuple[Path, Path], tmp_path: Path) -> None:
    idx, _ = built
    raw = json.loads((idx / MANIFEST).read_text())
    del raw["encoder_fingerprint"], raw["store"]  # what an older evidra wrote
    (idx / MANIFEST).write_text(json.dumps(raw))
    other = build_tiny("colqwen2", tmp_path / "other", seed=1)
    open_index(idx, encoder_path=other).close()  # nothing recorded to compare against

"""``confined.inside``: the one check that a name read from a file stays inside its folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evidra.core.errors import CheckpointError, CorpusError, InvalidInputError
from evidra.safeio.confined import inside


@pytest.mark.parametrize("name", ["a.png", "pages/a.png", "pages/../a.png", "./a", "bm25.x1"])
def test_names_inside_the_folder_are_joined(tmp_path: Path, name: str) -> None:
    assert inside(tmp_path, name, "probe") == tmp_path / name


@pytest.mark.parametrize("name", ["/etc/passwd", "..", "../x", "a/../../x", ".", "a/..", "", "a\x00b"])
def test_names_leaving_the_folder_or_naming_it_are_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(InvalidInputError, match=r"probe names .* which is not inside") as err:
        inside(tmp_path, name, "probe")
    assert "\n" not in str(err.value)
    with pytest.raises(CorpusError):
        inside(tmp_path, name, "probe", CorpusError)


def test_a_checksum_list_naming_a_file_outside_the_checkpoint_is_never_read(tmp_path: Path) -> None:
    from evidra.rl.runs.checkpoint import verify_checkpoint

    ckpt = tmp_path / "step-000001"
    ckpt.mkdir()
    # /dev/zero would be hashed forever; a name outside is refused before any file is read
    for planted in ("/dev/zero", "../../../../../../../../dev/zero"):
        (ckpt / "checksums.json").write_text(json.dumps({planted: "0" * 64}))
        with pytest.raises(CheckpointError, match=r"checksums\.json names .* which is not inside"):
            verify_checkpoint(ckpt)
    (ckpt / "checksums.json").write_text("[1, 2]")
    with pytest.raises(CheckpointError, match="not a JSON object"):
        verify_checkpoint(ckpt)

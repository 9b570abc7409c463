"""The accepted rows of a distillation file: a line that is no JSON object names itself."""

from __future__ import annotations

from pathlib import Path

import pytest

from evidra.core.errors import InvalidInputError
from evidra.data.construction.distill import accepted_records


def test_only_accepted_objects_are_kept(tmp_path: Path) -> None:
    path = tmp_path / "distill.jsonl"
    path.write_text('{"id": "a", "accepted": true}\n{"id": "b", "accepted": false}\n{"id": "c"}\n')
    assert [r["id"] for r in accepted_records(path)] == ["a"]


@pytest.mark.parametrize("line", ['["a"]', '"a"', "3", "null"])
def test_a_line_that_is_no_object_is_one_line(tmp_path: Path, line: str) -> None:
    path = tmp_path / "distill.jsonl"
    path.write_text('{"id": "a", "accepted": true}\n' + line + "\n")
    with pytest.raises(InvalidInputError, match=r"distill\.jsonl' line 2 is .*, not a JSON object$"):
        accepted_records(path)

"""``evidra data toolbox --trajectories``: the last text of each row, or one line naming the row."""

from __future__ import annotations

from pathlib import Path

import pytest

from evidra.cli.data import _read_trajectories
from evidra.core.errors import ConfigError


def test_a_response_or_the_last_of_the_texts(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"response": "r1"}\n{"texts": ["a", "b"]}\n{"response": 3, "texts": ["x"]}\n')
    assert _read_trajectories(str(path)) == ["r1", "b", "3"]


@pytest.mark.parametrize(
    "row", ['{"texts": []}', '{"texts": "ab"}', '{"text": "a"}', '["response"]', '"response"']
)
def test_a_row_without_either_names_its_line(tmp_path: Path, row: str) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"response": "r1"}\n' + row + "\n")
    with pytest.raises(ConfigError, match=r"t\.jsonl' line 2: no 'response' or 'texts'; pass JSON objects"):
        _read_trajectories(str(path))

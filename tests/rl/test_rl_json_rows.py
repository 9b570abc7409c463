"""The rl files a user or an earlier run wrote, read field by field: a wrong type is one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evidra.core.errors import ConfigError
from evidra.core.types import Sample
from evidra.rl.runs.folder import RUN_RECORD, RunRecord, read_record
from evidra.rl.subset import read_subset
from evidra.rl.tasks import TASKS

GOOD = {
    "format": 1,
    "kind": "sft",
    "method": "lat",
    "base": "/m/base",
    "base_fingerprint": "",
    "trainable": [["w", [2, 3]], ["b", [3]]],
}


def _record(tmp_path: Path, **fields: object) -> RunRecord | None:
    (tmp_path / RUN_RECORD).write_text(json.dumps({**GOOD, **fields}))
    return read_record(tmp_path)


def test_a_record_evidra_wrote_reads_back_whole(tmp_path: Path) -> None:
    shapes = (("w", (2, 3)), ("b", (3,)))
    assert _record(tmp_path) == RunRecord("sft", "lat", "/m/base", "", shapes)


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"kind": ["rl"]}, "kind ['rl']"),
        ({"method": 3}, "method is not a string of at most 4096 characters"),
        ({"base": None}, "base is not a string of at most 4096 characters"),
        ({"base_fingerprint": "sha256:x"}, "base_fingerprint 'sha256:x'"),
        ({"trainable": {"w": [2]}}, "trainable is not a list of at most"),
        ({"trainable": [["w", [2.5]]]}, "trainable holds an entry other than [name, [sizes]]"),
        ({"trainable": [["w", [True]]]}, "trainable holds an entry other than [name, [sizes]]"),
        ({"trainable": [[1, [2]]]}, "trainable holds an entry other than [name, [sizes]]"),
    ],
)
def test_a_field_of_another_type_is_one_config_error(
    tmp_path: Path, fields: dict[str, object], problem: str
) -> None:
    with pytest.raises(ConfigError) as info:
        _record(tmp_path, **fields)
    message = str(info.value)
    assert f"({problem}" in message and "\n" not in message


@pytest.mark.parametrize("row", ["[1, 2]", '"b"', '{"kept": true}', "null"])
def test_a_subset_line_without_an_id_names_its_line(tmp_path: Path, row: str) -> None:
    path = tmp_path / "keep.jsonl"
    path.write_text('{"id": "a"}\n' + row + "\n")
    with pytest.raises(ConfigError, match=r"line 2 is not a JSON object with an id$"):
        read_subset(path)


def test_subset_ids_keep_their_order_and_the_kept_flag(tmp_path: Path) -> None:
    path = tmp_path / "keep.jsonl"
    path.write_text('{"id": "b"}\n{"id": 7, "kept": false}\n{"id": 3}\n')
    assert read_subset(path) == ["b", "3"]


def test_a_key_value_sample_with_broken_extras_is_one_config_error() -> None:
    task = TASKS.get("toy.key_value")
    good = Sample(
        "kv", "What is alpha?", ("12",), extras={"corpus": {"alpha": 12}, "key": "alpha", "round": 0}
    )
    assert task.make_env(good).corpus == {"alpha": "12"}
    broken = Sample("kv", "What is alpha?", ("12",), extras={"corpus": ["alpha"], "key": "alpha", "round": 0})
    with pytest.raises(ConfigError, match=r"sample 'kv': extras\['corpus'\] must map keys to values"):
        task.make_env(broken)
    assert task.oracle is not None
    with pytest.raises(ConfigError, match=r"extras\['round'\] must be an integer"):
        task.oracle(
            Sample("kv", "What is alpha?", ("12",), extras={"corpus": {}, "key": "alpha", "round": "1"})
        )

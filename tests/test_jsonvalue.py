"""Decoded JSON narrowed to what a reader needs, or one error line."""

from __future__ import annotations

import pytest

from evidra.core.errors import ConfigError, InvalidInputError
from evidra.core.jsonvalue import as_object, at, json_kind


def test_each_kind_is_named_as_a_message_says_it() -> None:
    kinds = [json_kind(v) for v in ({"a": 1}, [1], "s", 0, 0.5, False, None)]
    assert kinds == ["an object", "a list", "a string", "a number", "a number", "true or false", "null"]


def test_an_object_passes_and_anything_else_names_where_it_was() -> None:
    row = {"id": "q1"}
    assert as_object(row, "rows.jsonl line 1") is row
    with pytest.raises(InvalidInputError, match=r"^rows.jsonl line 2 is a string, not a JSON object$"):
        as_object("q2", "rows.jsonl line 2")
    with pytest.raises(ConfigError, match=r"^data.subset line 3 is null, not a JSON object$"):
        as_object(None, "data.subset line 3", ConfigError)


def test_a_path_into_a_reply_raises_as_plain_indexing_would() -> None:
    reply = {"data": [{"id": "m"}], "n": 3}
    assert at(reply, "data", 0, "id") == "m" and at(reply) is reply
    with pytest.raises(KeyError):
        at(reply, "choices")
    with pytest.raises(IndexError):
        at(reply, "data", 1)
    with pytest.raises(TypeError, match="a number has no item 0"):
        at(reply, "n", 0)
    with pytest.raises(TypeError, match="a list has no item 'id'"):
        at(reply, "data", "id")

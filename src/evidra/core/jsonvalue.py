"""The type of a decoded JSON value, and the one-line narrowing of one to an object.

``json.loads`` gives back a ``JSON``: a reader narrows each field it uses with ``isinstance``
before it indexes or converts it, so a field of the wrong type in a user's file ends in one line
that names the file and the field, never in a ``TypeError`` or ``KeyError`` deep in the caller.

    row = as_object(value, "--data 'a.jsonl' line 3")   # a JSON object, or one InvalidInputError
    if not isinstance(text := row.get("text"), str):
        raise InvalidInputError("--data 'a.jsonl' line 3: 'text' must be a string")
"""

from __future__ import annotations

from typing import TypeAlias

from evidra.core.errors import EvidraError, InvalidInputError

JSON: TypeAlias = dict[str, "JSON"] | list["JSON"] | str | int | float | bool | None
JSONObject: TypeAlias = dict[str, JSON]
JSONArray: TypeAlias = list[JSON]


def json_kind(value: object) -> str:
    """What a decoded JSON value is, as an error message names it.

    >>> [json_kind(v) for v in ({}, [], "a", 1, 1.5, True, None)]
    ['an object', 'a list', 'a string', 'a number', 'a number', 'true or false', 'null']
    """
    if isinstance(value, bool):
        return "true or false"
    kinds = ((dict, "an object"), (list, "a list"), (str, "a string"), ((int, float), "a number"))
    for kind, name in kinds:
        if isinstance(value, kind):
            return name
    return "null" if value is None else type(value).__name__


def as_object(value: JSON, where: str, error: type[EvidraError] = InvalidInputError) -> JSONObject:
    """``value`` if it is a JSON object, else one ``error`` line naming ``where``.

    >>> as_object({"a": 1}, "x.json")
    {'a': 1}
    >>> as_object([1], "x.jsonl line 2")
    Traceback (most recent call last):
    evidra.core.errors.InvalidInputError: x.jsonl line 2 is a list, not a JSON object
    """
    if not isinstance(value, dict):
        raise error(f"{where} is {json_kind(value)}, not a JSON object")
    return value


def at(value: JSON, *path: str | int) -> JSON:
    """``value[path[0]][path[1]]...`` on decoded JSON: an object takes a string key, a list an
    index; anything else along the way is a ``TypeError`` (a missing key a ``KeyError``, an index
    past the end an ``IndexError``), as indexing the plain value would raise.

    >>> at({"choices": [{"text": "hi"}]}, "choices", 0, "text")
    'hi'
    >>> at({"choices": "none"}, "choices", 0)
    Traceback (most recent call last):
    TypeError: a string has no item 0
    """
    for key in path:
        if isinstance(value, list) and isinstance(key, int):
            value = value[key]
        elif isinstance(value, dict) and isinstance(key, str):
            value = value[key]  # the lookup above, apart so that mypy narrows key and value together
        else:
            raise TypeError(f"{json_kind(value)} has no item {key!r}")
    return value


def need_object(value: JSON, what: str) -> JSONObject:
    """``value`` if it is a JSON object, else a ``TypeError`` naming ``what``: for a parser that
    turns the errors of plain indexing (``at``) into its own one-line error.

    >>> need_object([], "usage")
    Traceback (most recent call last):
    TypeError: usage is a list, not an object
    """
    if not isinstance(value, dict):
        raise TypeError(f"{what} is {json_kind(value)}, not an object")
    return value


def need_int(value: JSON, what: str) -> int:
    """``int(value)`` of a number or of its digits as text (``ValueError`` for other text), else a
    ``TypeError`` naming ``what``, as ``need_object``.

    >>> need_int("12", "completion_tokens"), need_int(3.0, "index")
    (12, 3)
    """
    if not isinstance(value, (int, float, str)):
        raise TypeError(f"{what} is {json_kind(value)}, not a number")
    return int(value)


def need_float(value: JSON, what: str) -> float:
    """``float(value)`` of a number or of its text (``ValueError`` for other text), else a
    ``TypeError`` naming ``what``, as ``need_int``.

    >>> need_float("0.5", "latency_s"), need_float(2, "latency_s")
    (0.5, 2.0)
    """
    if not isinstance(value, (int, float, str)):
        raise TypeError(f"{what} is {json_kind(value)}, not a number")
    return float(value)

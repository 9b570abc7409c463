"""The fields of a decoded JSON object, each as its type, for the readers of evidra's own records
(prediction caches, step infos).

A getter returns the field, or its default when the key is absent, and raises a ``TypeError``
naming the field when the value is of another kind; the reader catches it and names the file
and line in one ``InvalidInputError``.

    >>> row = {"turn": 2, "query": None, "retrieved": ["p1"]}
    >>> get_int(row, "turn", 0), get_opt_str(row, "query"), get_list(row, "retrieved")
    (2, None, ['p1'])
    >>> get_str(row, "turn", "")
    Traceback (most recent call last):
    TypeError: 'turn' is a number, not text
"""

from __future__ import annotations

from collections.abc import Mapping

from evidra.core.jsonvalue import JSON, json_kind


def _wrong(key: str, value: JSON, wanted: str) -> TypeError:
    return TypeError(f"{key!r} is {json_kind(value)}, not {wanted}")


def get_str(row: Mapping[str, JSON], key: str, default: str) -> str:
    value = row.get(key, default)
    if not isinstance(value, str):
        raise _wrong(key, value, "text")
    return value


def get_opt_str(row: Mapping[str, JSON], key: str) -> str | None:
    value = row.get(key)
    if value is not None and not isinstance(value, str):
        raise _wrong(key, value, "text or null")
    return value


def get_bool(row: Mapping[str, JSON], key: str, default: bool) -> bool:
    value = row.get(key, default)
    if not isinstance(value, bool):
        raise _wrong(key, value, "true or false")
    return value


def get_opt_bool(row: Mapping[str, JSON], key: str) -> bool | None:
    value = row.get(key)
    if value is not None and not isinstance(value, bool):
        raise _wrong(key, value, "true, false or null")
    return value


def get_int(row: Mapping[str, JSON], key: str, default: int) -> int:
    value = row.get(key, default)
    if not isinstance(value, int):
        raise _wrong(key, value, "an integer")
    return value


def get_opt_int(row: Mapping[str, JSON], key: str) -> int | None:
    value = row.get(key)
    if value is not None and not isinstance(value, int):
        raise _wrong(key, value, "an integer or null")
    return value


def get_opt_float(row: Mapping[str, JSON], key: str) -> float | None:
    value = row.get(key)
    if value is not None and not isinstance(value, (int, float)):
        raise _wrong(key, value, "a number or null")
    return value


def get_list(row: Mapping[str, JSON], key: str) -> list[JSON]:
    """The list under ``key``; an absent key or null is an empty list."""
    value = row.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise _wrong(key, value, "a list")
    return value

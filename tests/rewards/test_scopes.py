"""Token scopes of the EVisRAG rewards: replay of the released inline mask logic and the
paper's Eq. 7-8 mapping."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from evidra.core.errors import InvalidInputError
from evidra.core.types import Span
from evidra.rewards.scopes import (
    PAPER_SCOPE_RULES,
    find_first,
    scope_masks,
    scope_spans,
    span_mask,
    token_rewards,
)

MARKERS = {"<think>": [901, 902], "<evidence>": [801], "<answer>": [701, 702], "<observe>": [601]}


@pytest.mark.conformance("evisrag_scope_masks")
def test_scope_masks_upstream(case: dict[str, Any], same: Callable[[Any, Any], bool]) -> None:
    values = dict(zip(("response_ids", "response_mask", "marker_ids"), case.get("args", []), strict=False))
    values |= case.get("kwargs", {})
    got = scope_masks(values["response_ids"], values["response_mask"], values["marker_ids"])
    assert same(got, case["output"]), (got, case["output"])


def test_find_first() -> None:
    assert find_first([1, 2, 1, 2, 3], [1, 2, 3]) == 2
    assert find_first([], [1]) == -1
    assert find_first([4, 5], []) == 0  # an empty marker matches at 0, as a sliding compare does


def test_upstream_spans_hand_computed() -> None:
    # 0:<observe> 1:o 2:<evidence> 3:e 4-5:<think> 6:t 7-8:<answer> 9:a
    ids = [601, 10, 801, 11, 901, 902, 12, 701, 702, 13]
    spans = scope_spans(ids, MARKERS)
    got = {k: (v.start, v.end) for k, v in spans.items()}
    assert got == {
        "accuracy": (4, 10),
        "evidence": (0, 4),
        "format": (0, 10),
        "overlong": (0, 10),
        "isObserve": (0, 2),
        "isThink": (4, 7),
    }


def test_paper_scopes_and_token_rewards() -> None:
    ids = [601, 10, 801, 11, 901, 902, 12, 701, 702, 13]
    spans = scope_spans(ids, MARKERS, PAPER_SCOPE_RULES)
    assert {k: (v.start, v.end) for k, v in spans.items()} == {
        "observe": (0, 2),
        "evidence": (2, 4),
        "think": (4, 7),
        "answer": (7, 10),
    }
    # Eq. 8: observe/evidence tokens mean(perception 0.5, format 1) = 0.75; think/answer mean(0, 1)
    rewards = token_rewards(len(ids), spans, {"perception": 0.5, "derivation": 0.0, "format": 1.0})
    assert rewards == [0.75] * 4 + [0.5] * 6
    # a reward that is not given is left out of the mean
    assert token_rewards(3, {"observe": Span(0, 3)}, {"format": 1.0}) == [1.0, 1.0, 1.0]


def test_span_mask_checks_length() -> None:
    assert span_mask(Span(1, 3), 4, [1, 1, 0, 1]) == [0, 1, 0, 0]
    with pytest.raises(InvalidInputError, match="response_mask has 2 entries"):
        span_mask(Span(0, 1), 3, [1, 1])


def test_unknown_marker_is_an_error() -> None:
    with pytest.raises(InvalidInputError, match="marker_ids"):
        scope_spans([1, 2], {"<think>": [1]})

"""EVisRAG sufficiency labelling: all gold pages inside the top-k retrieved (App. A.1)."""

from __future__ import annotations

import pytest

from evidra.core.errors import InvalidInputError
from evidra.core.types import Box, EvidenceBox, Page, Sample
from evidra.methods.evisrag.sufficiency import is_sufficient, label_samples, stats


def _page(pid: str) -> Page:
    return Page(pid, f"/tmp/{pid}.png", 10, 10)


def test_rule_hand_cases() -> None:
    assert is_sufficient(["a"], ["a", "b", "c"])
    assert not is_sufficient(["a"], ["b", "c", "d", "a"])  # rank 4 is outside the top 3
    assert is_sufficient(["a"], ["b", "c", "d", "a"], k=4)
    assert not is_sufficient([], ["a"])  # nothing to find: never sufficient
    assert not is_sufficient(["a", "b"], ["a", "c", "d"])  # one of two gold pages missing
    with pytest.raises(InvalidInputError):
        is_sufficient(["a"], ["a"], k=0)


def test_label_samples_sets_context_and_ratio() -> None:
    pages = {p: _page(p) for p in "abcde"}
    s1 = Sample("q1", "?", ("x",), gold_pages=("a",), gold_boxes=(EvidenceBox("a", Box(0, 0, 1, 1)),))
    s2 = Sample("q2", "?", ("y",), gold_pages=("e",))
    out = label_samples([s1, s2], {"q1": ["b", "a", "c", "e"], "q2": ["a", "b", "c", "e"]}, pages)
    assert [s.sufficient for s in out] == [True, False]
    assert [p.id for p in out[0].pages] == ["b", "a", "c"] and out[0].gold_boxes == s1.gold_boxes
    assert out[1].gold_pages == () and out[1].extras["retrieved"] == ["a", "b", "c"]
    assert stats(out).ratio == 0.5
    with pytest.raises(InvalidInputError, match="'q2'"):
        label_samples([s2], {})

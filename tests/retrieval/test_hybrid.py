"""Fusion rules of hybrid search, computed by hand, and the checks of their settings."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from evidra.core.errors import EvidraError, InvalidInputError
from evidra.retrieval.hybrid import DEFAULT_FUSION, FUSIONS, Fusion, HybridRetriever, fuse
from evidra.retrieval.interfaces import Exclude, Hit

A = [Hit("x", 9.0), Hit("y", 8.0), Hit("z", 7.0)]
B = [Hit("z", 0.9), Hit("x", 0.5)]


def _ids_scores(hits: Sequence[Hit]) -> list[tuple[str, float]]:
    return [(h.page_id, round(h.score, 6)) for h in hits]


def test_zscore_hand_computed() -> None:
    # A: mean 8, std sqrt(2/3) = 0.816497: x +1.224745, y 0, z -1.224745
    # B: mean 0.7, std 0.2: z +1, x -1; y is missing from B and counts B's lowest, -1
    fused = fuse([A, B], Fusion("zscore"))
    assert _ids_scores(fused) == [("x", 0.224745), ("z", -0.224745), ("y", -1.0)]
    # weights 1 and 3: x 1.224745 - 3 = -1.775255, y 0 - 3, z -1.224745 + 3 = 1.775255
    weighted = fuse([A, B], Fusion("zscore", weights=(1.0, 3.0)))
    assert _ids_scores(weighted) == [("z", 1.775255), ("x", -1.775255), ("y", -3.0)]


def test_minmax_hand_computed() -> None:
    # A: x 1, y 0.5, z 0; B: z 1, x 0, y missing 0. x and z tie at 1: x was seen first
    assert _ids_scores(fuse([A, B], Fusion("minmax"))) == [("x", 1.0), ("z", 1.0), ("y", 0.5)]
    weighted = fuse([A, B], Fusion("minmax", weights=(1.0, 3.0)))  # z 3, x 1, y 0.5
    assert _ids_scores(weighted) == [("z", 3.0), ("x", 1.0), ("y", 0.5)]


def test_rrf_rule_and_depth() -> None:
    # k 1: x 1/2 + 1/3, z 1/4 + 1/2, y 1/3
    assert _ids_scores(fuse([A, B], Fusion("rrf", rrf_k=1))) == [
        ("x", 0.833333),
        ("z", 0.75),
        ("y", 0.333333),
    ]
    # depth 1: only x (from A) and z (from B) take part, 1/2 each; x was seen first
    assert _ids_scores(fuse([A, B], Fusion("rrf", depth=1, rrf_k=1))) == [("x", 0.5), ("z", 0.5)]


def test_a_list_that_cannot_tell_its_hits_apart() -> None:
    """One hit (or all tied) scores 1 against 0 for a page the list lacks; a NaN score counts as
    missing, so a broken retriever cannot poison the sum."""
    one, two = [Hit("p", 2.0)], [Hit("q", 5.0), Hit("p", 1.0)]
    # one: p 1, q missing 0; two: q +1, p -1 (mean 3, std 2)
    assert _ids_scores(fuse([one, two], Fusion("zscore"))) == [("q", 1.0), ("p", 0.0)]
    assert _ids_scores(fuse([one, two], Fusion("minmax"))) == [("p", 1.0), ("q", 1.0)]
    broken = [Hit("p", float("nan")), Hit("q", 1.0), Hit("r", 3.0)]  # z over q, r: r +1, q -1
    fused = fuse([broken, [Hit("q", 4.0)]], Fusion("zscore"))  # second: q 1, p and r missing 0
    assert _ids_scores(fused) == [("r", 1.0), ("q", 0.0), ("p", -1.0)]


class Fixed:
    """A retriever that returns fixed hits for every query, honouring ``k`` and ``exclude``."""

    def __init__(self, hits: Sequence[Hit]) -> None:
        self.hits = list(hits)
        self.asked: list[int] = []

    def search(self, queries: Sequence[str], k: int = 10, exclude: Exclude = None) -> list[list[Hit]]:
        self.asked.append(k)
        skip = exclude or [()] * len(queries)
        return [[h for h in self.hits if h.page_id not in s][:k] for s in skip]


def test_hybrid_retriever_default_is_zscore_over_100_hits() -> None:
    a, b = Fixed(A), Fixed(B)
    hits = HybridRetriever((a, b)).search(["q"], k=2, exclude=[{"y"}])[0]
    # without y, A is x 9, z 7 (z +1, -1) and B z +1, x -1: both sum to 0, x seen first
    assert _ids_scores(hits) == [("x", 0.0), ("z", 0.0)]
    assert a.asked == b.asked == [100] and Fusion("zscore", 100, None, 60) == DEFAULT_FUSION
    assert HybridRetriever((a, b), Fusion(depth=1)).search(["q"], k=3)[0] != []
    assert a.asked[-1] == 3  # a cut deeper than the depth asks for k hits


@pytest.mark.parametrize(
    ("fusion", "message"),
    [
        ({"rule": "zscroe"}, "did you mean 'zscore'"),
        ({"depth": 0}, "depth must be an integer >= 1, got 0"),
        ({"rrf_k": -1}, "RRF k must be an integer >= 0, got -1"),
        ({"weights": (1.0, -1.0)}, "weights must be finite numbers >= 0"),
        ({"weights": (0.0, 0.0)}, "not all 0"),
        ({"weights": (float("nan"), 1.0)}, "finite"),
    ],
)
def test_bad_settings_are_refused_with_one_line(fusion: dict[str, object], message: str) -> None:
    with pytest.raises(EvidraError, match=message) as exc:
        Fusion(**fusion)  # type: ignore[arg-type]
    assert "\n" not in str(exc.value)


def test_weights_must_match_the_retrievers() -> None:
    with pytest.raises(InvalidInputError, match="got 3 fusion weights for 2 retrievers"):
        HybridRetriever((Fixed(A), Fixed(B)), Fusion(weights=(1.0, 1.0, 1.0)))
    assert FUSIONS.names() == ["minmax", "rrf", "zscore"]

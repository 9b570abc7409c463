"""Comparing what two code paths retrieved: the pages exactly, the scores within a stated tolerance.

Two ways of computing the same MaxSim or BM25 score (another kernel, another dtype in between,
blocks cut differently, a store written and read back, a score sent through JSON) sum the same
products in another order, and fp32 keeps ~7 significant digits: the last digit of a score may
differ, so no test compares such floats exactly (a CPU profile of the suite only changes which
path runs, and the arithmetic of the machine underneath is whatever it is). The pages found, their
order and their image paths must still be identical.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from evidra.retrieval.interfaces import Hit

# A score is a sum of up to a few hundred products of unit vectors (|score| <= tokens): summed in
# another order, fp32 moves it by a few units in its last place (~1e-7 relative each); 1e-5 leaves
# room for that and is still ~1000x below what a wrong page, a missed token or a filler vector
# that wins a max moves a score by (>= 1e-2 in these tests).
SCORE_TOL = 1e-5


def assert_hits_close(
    got: Sequence[Sequence[Hit]], want: Sequence[Sequence[Hit]], *, tol: float = SCORE_TOL
) -> None:
    """``got`` and ``want`` (one row of hits per query) name the same pages in the same order with
    the same images, and each score within ``tol`` (absolute and relative) of the other's."""
    assert len(got) == len(want), f"{len(got)} rows of hits, expected {len(want)}"
    for i, (row, ref) in enumerate(zip(got, want, strict=True)):
        assert [(h.page_id, h.image_path) for h in row] == [(h.page_id, h.image_path) for h in ref], i
        assert [h.score for h in row] == pytest.approx([h.score for h in ref], rel=tol, abs=tol), i

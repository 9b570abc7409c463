"""The evidence region, the graded relevance judgements and the answer's type travel as typed
fields of ``Sample`` (``evidence_box``, ``qrels``, ``answer_type``), never as ``extras`` keys."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from evidra.core.errors import InvalidInputError
from evidra.core.types import Box, EvidenceBox, Page, Sample
from evidra.metrics.official import official

ROOT = Path(__file__).parents[1]
TYPED = ("evidence_box", "qrels", "answer_format")
# extras["evidence_box"], extras.get('qrels'), extras={..., "answer_format": fmt, ...}
EXTRAS_KEY = re.compile(
    r"extras\s*(?:\[|\.get\(|=\s*\{[^}]*?)\s*['\"](?:" + "|".join(TYPED) + r")['\"]", re.S
)


def extras_uses(text: str) -> list[str]:
    r"""The places ``text`` reads or writes one of the typed keys through ``extras``.

    >>> extras_uses('box = sample.extras.get("evidence_box")')
    ['extras.get("evidence_box"']
    >>> extras_uses("extras={'qrels': judged}") + extras_uses('extras={"doc": d,\n "answer_format": f}')
    ["extras={'qrels'", 'extras={"doc": d,\n "answer_format"']
    >>> extras_uses('row = {"qrels": dict(s.qrels)}')  # a JSON row of its own, not extras
    []
    >>> extras_uses("box = sample.evidence_box")
    []
    """
    return [m.group(0) for m in EXTRAS_KEY.finditer(text)]


def test_no_module_reads_or_writes_these_extras_keys() -> None:
    found = [
        f"{path.relative_to(ROOT)}: {use}"
        for path in sorted((ROOT / "src").rglob("*.py"))
        for use in extras_uses(path.read_text(encoding="utf-8"))
    ]
    assert not found, "typed Sample fields read or written through extras:\n" + "\n".join(found)


def test_the_fields_are_checked() -> None:
    page = Page("p1", "p1.png", 10, 10)
    with pytest.raises(InvalidInputError, match="not among its pages"):
        Sample("s", "q?", pages=(page,), evidence_box=EvidenceBox("p9", Box(0, 0, 1, 1)))
    with pytest.raises(InvalidInputError, match="must be an EvidenceBox"):
        Sample("s", "q?", evidence_box=Box(0, 0, 1, 1))  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="must be a finite number"):
        Sample("s", "q?", qrels={"p1": float("nan")})
    frozen = Sample("s", "q?", qrels={"p1": 1.0})
    with pytest.raises(TypeError):
        frozen.qrels["p2"] = 1.0  # type: ignore[index]


def test_mmlongbench_scores_by_the_answer_type() -> None:
    """MMLongBench's ``answer_format`` is the sample's ``answer_type``: a List answer matches
    in any order, the same text as a Str answer does not."""
    gold = "['intro', 'scope']"
    as_list = Sample("s", "q?", (gold,), answer_type="list", dataset="mmlongbench")
    as_str = Sample("s", "q?", (gold,), answer_type="str", dataset="mmlongbench")
    pred = "['scope', 'intro']"
    assert official(as_list, pred)["mmlongbench_score"] == 1.0
    assert official(as_str, pred)["mmlongbench_score"] == 0.0

"""Token scopes of the EVisRAG rewards (RS-GRPO): which response tokens each reward trains.

A scope is a half-open token span ``[start, end)`` between two markers, found on the exact
sampled token ids (never re-tokenised text) as the first contiguous occurrence of the marker's
token-id sequence (``tokenizer.encode("<think>", add_special_tokens=False)``).

Two mappings:

* ``UPSTREAM_SCOPE_RULES``: the released RS-GRPO (``BatchFunctionRewardManager``): accuracy
  from the first ``<think>`` to the end; evidence from the start to ``<think>`` (so it covers
  the observe span and tag tokens); format and overlong everywhere; isObserve from the start
  to ``<evidence>``; isThink from ``<think>`` to ``<answer>``. A start marker that is not found
  starts at 0, an end marker that is not found ends at the sequence length.
* ``PAPER_SCOPES``: EVisRAG Eq. 7. The response splits into observe, evidence, think and answer
  scopes at the ``<evidence>``, ``<think>`` and ``<answer>`` markers; R_perception covers
  observe + evidence, R_derivation think + answer, R_format everything. Eq. 8 averages the
  rewards that apply to a token (``token_rewards``).

Upstream computes these masks for a batch in a loop that multiplies every row by the markers
of the current row (so in a batch of more than one, later rows lose their start-marker scopes);
these functions work on one sequence at a time, which is what the recorded contract describes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from evidra.core.errors import InvalidInputError
from evidra.core.types import Span

START, END = "start", "end"

UPSTREAM_SCOPE_RULES: Mapping[str, tuple[str, str]] = {
    "accuracy": ("<think>", END),
    "evidence": (START, "<think>"),
    "format": (START, END),
    "overlong": (START, END),
    "isObserve": (START, "<evidence>"),
    "isThink": ("<think>", "<answer>"),
}

PAPER_SCOPE_RULES: Mapping[str, tuple[str, str]] = {
    "observe": (START, "<evidence>"),
    "evidence": ("<evidence>", "<think>"),
    "think": ("<think>", "<answer>"),
    "answer": ("<answer>", END),
}

PAPER_SCOPES: Mapping[str, tuple[str, ...]] = {  # reward -> the scopes it supervises (Eq. 7)
    "perception": ("observe", "evidence"),
    "derivation": ("think", "answer"),
    "format": ("observe", "evidence", "think", "answer"),
}


def find_first(ids: Sequence[int], marker: Sequence[int]) -> int:
    """Index of the first contiguous occurrence of ``marker`` in ``ids``, or -1.

    >>> find_first([5, 901, 902, 7], [901, 902]), find_first([5, 901], [901, 902])
    (1, -1)
    """
    m, target = len(marker), list(marker)
    for i in range(len(ids) - m + 1):
        if list(ids[i : i + m]) == target:
            return i
    return -1


def rule_spans(
    rules: Mapping[str, tuple[str, str]], locate: Callable[[str], int], length: int
) -> dict[str, Span]:
    """The one definition of a scope's span: each rule's ``[start, end)`` between its two markers.

    ``locate(marker)`` is the token index where ``marker`` first occurs, or -1. ``START``/``END``
    are 0 and ``length``; a start marker that is not found starts at 0, an end marker that is not
    found ends at ``length``; the span is empty (start == end) when the end comes first.

    >>> rule_spans({"a": ("<x>", END), "b": (START, "<y>")}, {"<x>": 2, "<y>": -1}.__getitem__, 5)
    {'a': Span(start=2, end=5), 'b': Span(start=0, end=5)}
    """
    found: dict[str, int] = {}

    def bound(marker: str, *, is_start: bool) -> int:
        if marker == START:
            return 0
        if marker == END:
            return length
        if marker not in found:
            found[marker] = locate(marker)
        idx = found[marker]
        return (0 if is_start else length) if idx < 0 else idx

    spans: dict[str, Span] = {}
    for name, (start_marker, end_marker) in rules.items():
        start = bound(start_marker, is_start=True)
        spans[name] = Span(start, max(start, bound(end_marker, is_start=False)))
    return spans


def scope_spans(
    ids: Sequence[int],
    marker_ids: Mapping[str, Sequence[int]],
    rules: Mapping[str, tuple[str, str]] = UPSTREAM_SCOPE_RULES,
) -> dict[str, Span]:
    """Each rule's token span ``[start, end)``; empty (start == end) when the end marker
    comes before the start marker.

    >>> ids = [100, 801, 5, 901, 902, 7, 701, 9]
    >>> markers = {"<think>": [901, 902], "<evidence>": [801], "<answer>": [701]}
    >>> s = scope_spans(ids, markers)
    >>> (s["accuracy"].start, s["accuracy"].end), (s["isThink"].start, s["isThink"].end)
    ((3, 8), (3, 6))
    """

    def locate(marker: str) -> int:
        if marker not in marker_ids:
            raise InvalidInputError(f"no token ids given for marker {marker!r}; pass marker_ids[{marker!r}]")
        return find_first(ids, marker_ids[marker])

    return rule_spans(rules, locate, len(ids))


def span_mask(span: Span, length: int, response_mask: Sequence[int] | None = None) -> list[int]:
    """The one definition of a span's mask: ``length`` 0/1 entries, 1 on the tokens of ``span``
    (the part of it below ``length``), times ``response_mask`` when given.

    >>> span_mask(Span(1, 3), 4), span_mask(Span(1, 3), 4, [1, 0, 1, 1])
    ([0, 1, 1, 0], [0, 0, 1, 0])
    """
    start, end = min(max(span.start, 0), length), min(max(span.end, 0), length)
    mask = [0] * start + [1] * max(0, end - start) + [0] * (length - max(start, end))
    if response_mask is not None:
        if len(response_mask) != length:
            raise InvalidInputError(f"response_mask has {len(response_mask)} entries for {length} tokens")
        mask = [m * int(r) for m, r in zip(mask, response_mask, strict=True)]
    return mask


def scope_masks(
    ids: Sequence[int],
    response_mask: Sequence[int],
    marker_ids: Mapping[str, Sequence[int]],
    rules: Mapping[str, tuple[str, str]] = UPSTREAM_SCOPE_RULES,
) -> dict[str, list[int]]:
    """Per reward, the 0/1 token mask of its scope multiplied by ``response_mask`` (markers are
    searched over the whole row, padding included, as upstream does)."""
    spans = scope_spans(ids, marker_ids, rules)
    return {name: span_mask(span, len(ids), response_mask) for name, span in spans.items()}


def token_rewards(
    length: int,
    spans: Mapping[str, Span],
    rewards: Mapping[str, float],
    reward_scopes: Mapping[str, tuple[str, ...]] = PAPER_SCOPES,
) -> list[float]:
    """Scope-aggregated token reward R̄_t: the mean of the rewards whose scopes contain token t
    (EVisRAG Eq. 8); 0 for a token that no reward covers.

    >>> spans = {"observe": Span(0, 1), "evidence": Span(1, 2), "think": Span(2, 3), "answer": Span(3, 4)}
    >>> token_rewards(4, spans, {"perception": 1.0, "derivation": 0.0, "format": 1.0})
    [1.0, 1.0, 0.5, 0.5]
    """
    total, count = [0.0] * length, [0] * length
    for reward, scopes in reward_scopes.items():
        if reward not in rewards:
            continue
        covered = {t for s in scopes if s in spans for t in range(spans[s].start, min(spans[s].end, length))}
        for t in covered:
            total[t] += rewards[reward]
            count[t] += 1
    return [v / c if c else 0.0 for v, c in zip(total, count, strict=True)]

"""EVisRAG evidence-guided format: prompt, parser, scopes, and scores through EVisRAG's rewards."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from evidra.core.types import ImagePart, Page, Sample, Span, TextPart, Trajectory
from evidra.methods.evisrag.paradigm import (
    EVIDENCE_PROMPT,
    SCOPE_NAMES,
    EvidenceGuided,
    evidence_oracle_text,
    evidence_scopes,
    parse_evidence,
    upstream_scopes,
)
from evidra.methods.evisrag.reward import EvisragReward

GOOD = (
    "<observe>Image 2 shows a revenue table.</observe>"
    "<evidence>[1]: no relevant information\n[2]: revenue 2023 was 5M</evidence>"
    "<think>Image 2 says revenue was 5M.</think><answer>5M</answer>"
)


def two_page_sample(page_factory: Callable[..., Page], sufficient: bool = True) -> Sample:
    p1, p2 = page_factory("doc-p0001"), page_factory("doc-p0002")
    return Sample(
        id="e",
        question="What was revenue in 2023?",
        answers=("5M",) if sufficient else (),
        pages=(p1, p2),
        gold_pages=(p2.id,) if sufficient else (),
        gold_evidence={p2.id: "revenue 2023 was 5M"} if sufficient else {},
        answerable=sufficient,
        sufficient=sufficient,
    )


def test_prompt_text_comes_first_then_the_images(sample: Sample) -> None:
    (msg,) = EvidenceGuided().build_messages(sample, sample.pages)
    assert isinstance(msg.content[0], TextPart)
    assert msg.content[0].text.endswith("Question: What was revenue in 2023")
    assert msg.content[0].text.startswith("You are an AI Visual QA assistant.")
    assert isinstance(msg.content[1], ImagePart)
    assert "`<answer>insufficient to answer</answer>`" in EVIDENCE_PROMPT


def test_well_formed_output_parses_evidence_per_image() -> None:
    parsed = parse_evidence(GOOD)
    assert parsed.ok and parsed.answer == "5M"
    assert [(s.text, s.page_index) for s in parsed.steps] == [("revenue 2023 was 5M", 1)]
    assert parsed.fields["observe"] == "Image 2 shows a revenue table."


def test_well_formed_output_scores_three(page_factory: Callable[..., Page]) -> None:
    # perception: image 1 negative and predicted negative (1) + image 2 relevant with F1 1 (3 * 1)
    # over 1 + 3 -> 1; derivation F1("5M", "5M") = 1; format 1. Scopes: means of (1, 1) = 1.
    r = EvisragReward()(parse_evidence(GOOD), two_page_sample(page_factory))
    assert dict(r.components) == {"perception": 1.0, "derivation": 1.0, "format": 1.0}
    assert r.total == 3.0 and set(r.scopes) == set(SCOPE_NAMES)


def test_wrong_evidence_scores_partial_perception(page_factory: Callable[..., Page]) -> None:
    # image 1 wrongly cited (0 of 1), image 2 "revenue was 7M" vs gold set {revenue, 2023, was, 5m}:
    # common 2, p = 2/3, r = 2/4 -> F1 4/7; perception = (0 + 3 * 4/7) / 4 = 3/7.
    text = GOOD.replace(
        "[1]: no relevant information\n[2]: revenue 2023 was 5M", "[1]: a cat\n[2]: revenue was 7M"
    )
    r = EvisragReward()(parse_evidence(text), two_page_sample(page_factory))
    assert abs(r.components["perception"] - 3 / 7) < 1e-12
    # Eq. 8: observe/evidence tokens get mean(perception, format) = (3/7 + 1) / 2
    assert abs(r.scopes["evidence"] - (3 / 7 + 1) / 2) < 1e-12 and r.scopes["answer"] == 1.0


def test_insufficient_context_wants_insufficient_to_answer(page_factory: Callable[..., Page]) -> None:
    sample = two_page_sample(page_factory, sufficient=False)
    text = evidence_oracle_text(sample)
    assert parse_evidence(text).answer == "insufficient to answer"
    assert EvisragReward()(parse_evidence(text), sample).total == 3.0
    guessed = text.replace("<answer>insufficient to answer</answer>", "<answer>5M</answer>")
    assert EvisragReward()(parse_evidence(guessed), sample).components["derivation"] == 0.0


def test_tags_out_of_order_and_repeats_are_flagged_and_fail_format(page_factory: Callable[..., Page]) -> None:
    swapped = (
        "<evidence>[2]: revenue 2023 was 5M</evidence><observe>x</observe><think>t</think><answer>5M</answer>"
    )
    parsed = parse_evidence(swapped)
    assert "tags out of order (observe, evidence, think, answer)" in parsed.errors
    assert EvisragReward()(parsed, two_page_sample(page_factory)).components["format"] == 0.0
    repeated = GOOD + "<answer>5M</answer>"
    assert "<answer> repeated" in parse_evidence(repeated).errors
    assert (
        EvisragReward()(parse_evidence(repeated), two_page_sample(page_factory)).components["format"] == 0.0
    )


def test_truncated_and_garbled_outputs_never_raise() -> None:
    for text in [
        "",
        "<observe>half",
        "<evidence>[1]: x [",
        "<evidence>[99999999999999999999]: y",
        "<evidence></evidence>",
        "<evidence>[２]: fullwidth digit</evidence>",
        "\x00<answer>\u202e</answer>",
    ]:
        parsed = parse_evidence(text)
        assert isinstance(parsed.errors, tuple)
    assert "evidence index [0] is not 1-based" in parse_evidence("<evidence>[0]: x</evidence>").errors


class _CharTokenizer:
    """One token per character (ord), so marker ids are the characters' codes."""

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [ord(c) for c in text]

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return "".join(chr(i) for i in ids)


def test_scopes_split_the_sampled_ids_at_the_tags() -> None:
    ids = tuple(ord(c) for c in GOOD)
    traj = Trajectory((), ids, (1,) * len(ids), (0.0,) * len(ids), (Span(0, len(ids)),), (GOOD,))
    spans = evidence_scopes(traj, _CharTokenizer())
    ev, th, an = GOOD.index("<evidence>"), GOOD.index("<think>"), GOOD.index("<answer>")
    assert spans == {
        "observe": (Span(0, ev),),
        "evidence": (Span(ev, th),),
        "think": (Span(th, an),),
        "answer": (Span(an, len(ids)),),
    }


def test_scopes_on_the_qwen_tokenizer_split_at_the_tags(tiny_dirs: dict[str, Path]) -> None:
    """Qwen's BPE merges the tags with their neighbours (``"><"``), so the released token-id
    matching finds no marker and every scope is the whole response; locating the tags in the
    decoded text splits the response into its four blocks."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_dirs["qwen2_5_vl"]))
    ids = tuple(tok.encode(GOOD, add_special_tokens=False))
    traj = Trajectory((), ids, (1,) * len(ids), (0.0,) * len(ids), (Span(0, len(ids)),), (GOOD,))
    spans = evidence_scopes(traj, tok)
    decoded = {k: tok.decode(list(ids[v[0].start : v[0].end])) for k, v in spans.items()}
    assert decoded["evidence"].startswith("<evidence>[1]:") and decoded["evidence"].endswith("</evidence>")
    assert decoded["think"] == "<think>Image 2 says revenue was 5M.</think>"
    assert decoded["answer"] == "<answer>5M</answer>"
    assert spans["observe"][0].start == 0 and spans["answer"][0].end == len(ids)
    released = upstream_scopes(traj, tok)
    assert all(v == (Span(0, len(ids)),) for v in released.values())

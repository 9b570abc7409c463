from __future__ import annotations

import pytest

from evidra.core.errors import InvalidInputError, RegistryError
from evidra.core.registry import Registry
from evidra.core.types import (
    Box,
    CoordSpace,
    EvidenceBox,
    ImagePart,
    Message,
    Page,
    Sample,
    Span,
    TextPart,
    Trajectory,
    Word,
    content_hash,
    make_page_id,
)


def _page(pid: str = "abc-p0001") -> Page:
    return Page(id=pid, image_path="/tmp/x.png", width=100, height=200)


def test_page_ids_are_content_based() -> None:
    h = content_hash(b"%PDF-1.4 same bytes")
    assert h == content_hash(b"%PDF-1.4 same bytes") and len(h) == 16
    assert make_page_id(h, 3) == f"{h}-p0003"
    with pytest.raises(InvalidInputError, match="1-based"):
        make_page_id(h, 0)


def test_page_validation_and_text() -> None:
    with pytest.raises(InvalidInputError, match="invalid size"):
        Page(id="x", image_path="a.png", width=0, height=10)
    page = Page(
        id="x",
        image_path="a.png",
        width=10,
        height=10,
        words=[Word("hello", Box(0, 0, 5, 5)), Word("you", Box(5, 0, 9, 5))],
    )
    assert page.text == "hello you" and isinstance(page.words, tuple) and page.size == (10, 10)
    with pytest.raises(InvalidInputError, match="page pixels"):
        Word("x", Box(0, 0, 1, 1, CoordSpace.NORM1000))


def test_sample_validation() -> None:
    page = _page()
    sample = Sample(
        id="q1",
        question="Who?",
        answers=["Jane"],
        pages=[page],
        gold_pages=[page.id],
        gold_boxes=[EvidenceBox(page.id, Box(1, 2, 3, 4))],
        gold_evidence={page.id: "Jane wrote it."},
    )
    assert sample.answers == ("Jane",) and sample.page_index(page.id) == 0
    with pytest.raises(TypeError):
        sample.gold_evidence["other"] = "x"  # type: ignore[index]
    with pytest.raises(InvalidInputError, match="not among its pages"):
        Sample(id="q2", question="Who?", pages=[page], gold_pages=["missing"])
    with pytest.raises(InvalidInputError, match="empty question"):
        Sample(id="q3", question="  ")
    with pytest.raises(InvalidInputError, match="not a str"):
        Sample(id="q4", question="Who?", answers="Jane")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="page pixels"):
        EvidenceBox(page.id, Box(0, 0, 1, 1, CoordSpace.MODEL))


def test_message_parts() -> None:
    msg = Message("user", (ImagePart("/tmp/a.png", page_id="p"), TextPart("Q?")))
    assert msg.plain_text == "Q?" and len(msg.images) == 1
    assert Message.text("system", "hi").content == (TextPart("hi"),)
    with pytest.raises(InvalidInputError, match="role"):
        Message("robot", (TextPart("x"),))  # type: ignore[arg-type]


def test_trajectory_consistency() -> None:
    traj = Trajectory(
        prompt_ids=[1, 2],
        token_ids=[5, 6, 7, 8],
        policy_mask=[1, 1, 0, 1],
        logprobs=[-0.1, -0.2, 0.0, -0.3],
        turns=[Span(0, 2), Span(3, 4)],
        texts=["ab", "d"],
        scopes={"answer": [Span(3, 4)]},
    )
    assert traj.num_turns == 2 and traj.num_policy_tokens == 3 and traj.text == "abd"
    with pytest.raises(InvalidInputError, match="lengths differ"):
        Trajectory(prompt_ids=[], token_ids=[1], policy_mask=[], logprobs=[], turns=[], texts=[])
    with pytest.raises(InvalidInputError, match="exceeds"):
        Trajectory(
            prompt_ids=[], token_ids=[1], policy_mask=[1], logprobs=[0.0], turns=[Span(0, 2)], texts=["x"]
        )
    with pytest.raises(InvalidInputError):
        Span(3, 1)


def test_registry_suggests_close_names() -> None:
    reg: Registry[int] = Registry("advantage")
    reg.add("grpo", 1)
    reg.add("dr_grpo", 2)
    assert reg.get("grpo") == 1 and "dr_grpo" in reg and len(reg) == 2
    with pytest.raises(RegistryError, match="did you mean 'grpo'"):
        reg.get("gpro")
    with pytest.raises(RegistryError, match="already registered"):
        reg.add("grpo", 3)

"""``evidra.core.conversation``: the retrieval query and the history a follow-up question carries, and
``RAG.ask(history=...)`` over a BM25 index: the follow-up alone finds the wrong page."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from evidra.core.conversation import check_history, recent, retrieval_query, with_history
from evidra.core.errors import InvalidInputError
from evidra.core.types import ImagePart, Message

U, A = "user", "assistant"


def _turns(*pairs: tuple[str, str]) -> list[Message]:
    return [Message.text(role, text) for role, text in pairs]  # type: ignore[arg-type]


def test_the_query_is_the_question_then_earlier_user_turns_newest_first_within_the_cap() -> None:
    history = _turns((U, "alpha beta"), (A, "ignored answer"), (U, "gamma  delta\nepsilon"))
    assert retrieval_query("q?", history) == "q?\ngamma delta epsilon\nalpha beta"
    # 2 + 1 + 19 = 22 characters; the older turn gets the 8 left, cut at a word: "alpha"
    assert retrieval_query("q?", history, max_chars=30) == "q?\ngamma delta epsilon\nalpha"
    assert retrieval_query("q?", history, max_chars=12) == "q?\ngamma"  # a cut inside a word ends before it
    assert retrieval_query("x" * 50, history, max_chars=40) == "x" * 50  # the question stays whole
    assert retrieval_query("q?", []) == "q?"


def test_recent_keeps_the_newest_turns_within_the_cap_starting_on_a_user_turn() -> None:
    history = _turns((U, "a" * 10), (A, "b" * 10), (U, "c" * 10), (A, "d" * 10))
    assert [m.plain_text[0] for m in recent(history, 40)] == ["a", "b", "c", "d"]
    assert [m.plain_text[0] for m in recent(history, 39)] == ["c", "d"]  # "b" would start on the assistant
    assert recent(_turns((U, "x" * 100)), 30) == (Message.text(U, "x" * 30),)  # the newest alone: its start
    assert recent(_turns((U, "  "), (U, "y")), 10) == (Message.text(U, "y"),)  # empty turns are left out


def test_history_goes_after_the_system_message_and_before_the_prompt() -> None:
    history = _turns((U, "earlier"), (A, "answer"))
    chat = [Message.text("system", "fmt"), Message.text(U, "prompt")]
    assert [m.plain_text for m in with_history(chat, history)] == ["fmt", "earlier", "answer", "prompt"]
    assert [m.plain_text for m in with_history(chat[1:], history)] == ["earlier", "answer", "prompt"]


def test_a_history_with_images_other_roles_or_too_many_turns_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="history turn 1 holds an image"):
        check_history([Message(U, (ImagePart("p.png"),))])
    with pytest.raises(InvalidInputError, match="history turn 2 is a 'system'"):
        check_history([Message.text(U, "q"), Message.text("system", "s")])
    with pytest.raises(InvalidInputError, match="over the cap of 64"):
        check_history([Message.text(U, "q")] * 65)


PAGES = (
    "The Falcon pump moves water at forty litres per minute.",
    "The Heron valve holds a pressure of twelve bar.",
    "Return policy: every return is accepted within thirty days; a return needs the receipt.",
)


def test_rag_ask_retrieves_and_prompts_with_the_history(
    tmp_path: Path, tiny_dirs: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    import evidra.models.generation as generation
    from evidra.corpus.pdfwriter import PdfCanvas, write_pdf
    from evidra.rag import RAG

    canvases = []
    for text in PAGES:
        canvas = PdfCanvas(420, 200)
        canvas.text(20, 60, text, 11)
        canvases.append(canvas)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "manual.pdf").write_bytes(write_pdf(canvases))
    chats: list[list[Message]] = []

    def fake_generate(vlm: Any, batch: Any, params: Any, **_: Any) -> list[generation.Generation]:
        chats.append(list(batch[0]))
        return [generation.Generation((), (), (), "<answer>twelve bar</answer>", "eos")]

    monkeypatch.setattr(generation, "generate", fake_generate)
    follow_up = "And what about its return?"
    history = _turns((U, "What pressure does the Heron valve hold?"), (A, "twelve bar"))
    with RAG.from_documents(
        tmp_path / "docs", model=tiny_dirs["qwen2_5_vl"], store=tmp_path / "s", dpi=50
    ) as rag:
        alone = rag.ask(follow_up, k=1)
        followed = rag.ask(follow_up, k=1, history=history)
    assert [p.page_number for p in alone.pages] == [3] and [p.page_number for p in followed.pages] == [2]
    assert [m.role for m in chats[0]] == [U] and [m.role for m in chats[1]] == [U, A, U]
    assert chats[1][0].plain_text == history[0].plain_text and follow_up in chats[1][2].plain_text
    assert followed.question == follow_up

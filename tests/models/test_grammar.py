"""Grammar-constrained structured answers: bounded so they end, masked so they always parse."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from evidra.core.errors import InvalidInputError, MissingDependencyError
from evidra.core.types import Page
from evidra.models.generation import SamplingParams, generate
from evidra.models.structured import build_messages, parse

pytest.importorskip("xgrammar")

from evidra.models.grammar import AnswerGrammar, AnswerLimits, require_xgrammar


def test_limits_for_the_default_budget_by_hand() -> None:
    # the longest one-step answer without its strings:
    # {"answer": "", "steps": [{"text": "", "page": 3, "box": [N, N, N, N]}]} with N 11 characters
    # wide is 15 + 10 + 13 + 11 + 8 + (4 * 11 + 3 * 2) + 2 + 2 = 111 bytes, + 1 end-of-turn token;
    # two steps need 111 + 2 + 84 + 1 = 198, leaving (256 - 198) // (4 * 3) = 4 < 16 characters,
    # so one step, and the answer and its text share (256 - 112) // (4 * 2) = 18 characters each
    assert AnswerLimits(1, 0, 0, 3).worst_case_tokens() == 112
    assert AnswerLimits(2, 0, 0, 3).worst_case_tokens() == 198
    limits = AnswerLimits.for_budget(256, pages=3)
    assert (limits.steps, limits.answer_chars, limits.text_chars) == (1, 18, 18)
    assert limits.worst_case_tokens() == 112 + 4 * 18 * 2 <= 256


@pytest.mark.parametrize("pages", [1, 4, 12])
def test_the_longest_answer_always_fits_the_budget(pages: int) -> None:
    least = AnswerLimits(1, 1, 1, pages).worst_case_tokens()
    for budget in range(least, 4000, 53):
        limits = AnswerLimits.for_budget(budget, pages)
        assert limits.worst_case_tokens() <= budget and limits.steps >= 1, (budget, limits)
    assert AnswerLimits.for_budget(4000, pages).steps == 3


def test_a_budget_too_small_names_the_option() -> None:
    with pytest.raises(InvalidInputError, match="--max-new-tokens"):
        AnswerLimits.for_budget(40, pages=2)


def test_a_missing_xgrammar_is_one_line_naming_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "xgrammar", None)  # import xgrammar now raises ImportError
    with pytest.raises(MissingDependencyError, match=r"evidra\[grammar\]") as info:
        require_xgrammar()
    assert "\n" not in str(info.value)


def test_structured_in_process_without_xgrammar_fails_before_anything_opens(
    monkeypatch: pytest.MonkeyPatch, tiny_dirs: dict[str, Path], tmp_path: Path
) -> None:
    from evidra.rag import RAG

    monkeypatch.setitem(sys.modules, "xgrammar", None)
    with pytest.raises(MissingDependencyError, match=r"pip install 'evidra\[grammar\]'"):
        RAG.load(tmp_path / "no-store", model=tiny_dirs["qwen2_5_vl"], structured=True)
    assert not (tmp_path / "no-store").exists()


class _NeverStops:
    """Logits (1, V) of a model that wants the answer of most tokens: it opens strings rather than
    write null, writes the shortest tokens inside them, never closes a string, a list or an object
    by choice, and never ends its turn. Only the grammar makes it stop."""

    def __init__(self, tokenizer: Any, width: int, eos: tuple[int, ...]) -> None:
        import torch

        pieces = [tokenizer.decode([t]) for t in range(len(tokenizer))]
        length = torch.zeros(1, width)
        length[0, : len(pieces)] = torch.tensor([float(len(p.encode())) for p in pieces])
        quote = torch.zeros(1, width, dtype=torch.bool)
        closer = torch.zeros(1, width, dtype=torch.bool)
        for t, piece in enumerate(pieces):
            quote[0, t] = '"' in piece
            closer[0, t] = "]" in piece or "}" in piece
        self.length, self.quote, self.closer, self.eos = length, quote, closer, list(eos)

    def __call__(self, text: str, noise: Any) -> Any:
        inside = text.count('"') % 2 == 1
        bias = noise - self.length
        bias = bias.masked_fill(self.quote, -40.0 if inside else 40.0).masked_fill(self.closer, -40.0)
        bias[0, self.eos] = -80.0
        return bias


@pytest.mark.parametrize("budget", [120, 256, 600])
def test_a_model_that_never_stops_still_closes_its_answer_in_budget(
    tiny_vlms: dict[str, Any], budget: int
) -> None:
    import torch

    vlm = tiny_vlms["qwen2_5_vl"]
    grammar = AnswerGrammar.for_model(vlm)
    limits = AnswerLimits.for_budget(budget, pages=2)
    model = _NeverStops(vlm.tokenizer, grammar.vocab_size, vlm.eos_token_ids)
    gen = torch.Generator().manual_seed(budget)
    mask = grammar.mask(limits)
    drawn: list[int] = []
    while not drawn or drawn[-1] not in vlm.eos_token_ids:
        assert len(drawn) < budget, vlm.tokenizer.decode(drawn)
        noise = torch.randn(1, grammar.vocab_size, generator=gen)
        scores = mask(model(vlm.tokenizer.decode(drawn), noise))  # (1, V)
        token = scores.argmax(dim=-1)  # (1,)
        mask.accept(token)
        drawn.append(int(token))
    text = vlm.tokenizer.decode(drawn[:-1])
    parsed = parse(text, ["p1", "p2"])
    assert parsed.answer is not None and len(drawn) <= limits.worst_case_tokens() <= budget
    written = json.loads(text, strict=False)
    assert len(written["answer"]) == limits.answer_chars and len(written["steps"]) == limits.steps, text
    assert all(s.page_index in (0, 1) for s in parsed.steps), parsed


def mask_for(vlm: Any, rows: int) -> Any:
    return AnswerGrammar.for_model(vlm).mask(AnswerLimits.for_budget(200, pages=1), rows=rows)


@pytest.mark.parametrize("arch", ["qwen2_5_vl", "qwen3_vl"])  # evidra's decode loop; transformers' generate
def test_constrained_generation_parses_on_every_row(
    tiny_vlms: dict[str, Any], arch: str, tmp_path: Path
) -> None:
    from PIL import Image

    vlm = tiny_vlms[arch]
    Image.new("RGB", (64, 48), "white").save(tmp_path / "p.png")
    page = Page("p", str(tmp_path / "p.png"), 64, 48)
    chats = [build_messages(q, [page]) for q in ("Who?", "When was it founded?")]
    params = SamplingParams(max_new_tokens=200, temperature=1.0, seed=3)
    for gen in generate(vlm, chats, params, mask=mask_for(vlm, 2)):
        parsed = parse(gen.text, ["p"])
        assert gen.finish_reason == "eos" and parsed.answer is not None, gen.text
        assert len(gen.logprobs) == len(gen.token_ids) and all(lp <= 0 for lp in gen.logprobs)
    (unconstrained,) = generate(vlm, chats[:1], params)
    assert parse(unconstrained.text, ["p"]).answer is None  # a random model writes no JSON by itself
    pieces: list[str] = []  # streamed (transformers' generate with a streamer, any family)
    (streamed,) = generate(vlm, chats[:1], params, on_text=pieces.append, mask=mask_for(vlm, 1))
    assert parse(streamed.text, ["p"]).answer is not None and "".join(pieces) == streamed.text


@pytest.mark.slow
def test_rag_structured_answers_of_the_tiny_model_parse_on_20_of_20_questions(
    tiny_dirs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Questions about generated PDFs, ingested, indexed and retrieved as ``evidra ask`` does."""
    import torch

    from evidra.data.synth.documents import generate_documents
    from evidra.rag import RAG

    root = tmp_path_factory.mktemp("grammar-rag")
    corpus = generate_documents(root / "gen", n_docs=6, seed=3, dpi=50)
    questions = [q.question for q in corpus.questions][:20]
    assert len(questions) == 20
    params = SamplingParams(max_new_tokens=256, temperature=1.0)
    torch.manual_seed(0)
    rag = RAG.from_documents(
        corpus.docs_dir, model=tiny_dirs["qwen2_5_vl"], params=params, dpi=50, k=2, structured=True
    )
    with rag:
        assert rag.constrained
        answers = [rag.ask(q) for q in questions]
        rag.constrained = False  # the same prompt without the grammar
        free = [rag.ask(q) for q in questions[:5]]
    assert sum(a.parsed for a in answers) == 20, [a.output for a in answers if not a.parsed]
    assert all(a.finish_reason == "eos" and a.pages for a in answers)
    assert all(s.page_id in {p.id for p in a.pages} for a in answers for s in a.steps)
    assert not any(a.parsed for a in free), [a.output for a in free]

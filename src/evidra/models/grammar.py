"""Grammar-constrained decoding: a checkpoint in this process writes a structured answer that parses.

An OpenAI-compatible server keeps a reply to ``evidra.models.structured.ANSWER_SCHEMA`` through
``response_format``; a checkpoint loaded by transformers in this process gets the same guarantee
here. Before each token is drawn, every token that cannot continue a valid answer has its logit
set to ``-inf`` (xgrammar's token bitmask, filled from a JSON schema compiled once per tokenizer),
and each drawn token advances the row's grammar state.

A valid answer must also *end*: a random or confused model inside a string would otherwise write
until the token budget runs out and leave the JSON open. So the schema is bounded
(``AnswerLimits``): at most ``steps`` steps, an answer of at most ``answer_chars`` characters,
step texts of at most ``text_chars``, pages 1..``pages`` and box numbers 0..10000 with at most six
fraction digits. ``AnswerLimits.for_budget`` picks the largest limits whose longest answer fits in
``max_new_tokens`` counting one token per UTF-8 byte (every byte-level BPE token writes at least
one byte; xgrammar admits no escape sequence in a bounded string, so a character is at most four
bytes), so the grammar closes the JSON and forces the end-of-turn token within the budget.

xgrammar was chosen over llguidance by measurement (``benchmarks/grammar_decode.py``,
docs/structured.md). It is an optional dependency: ``pip install 'evidra[grammar]'``.

>>> limits = AnswerLimits.for_budget(256, pages=3)
>>> limits.steps, limits.answer_chars, limits.text_chars, limits.worst_case_tokens() <= 256
(1, 18, 18, True)
>>> AnswerLimits.for_budget(2048, pages=3).steps
3
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING

from evidra.core.errors import InvalidInputError, MissingDependencyError
from evidra.core.jsonvalue import JSONObject

if TYPE_CHECKING:
    from collections.abc import Sequence

    from torch import Tensor
    from transformers import LogitsProcessor
    from xgrammar import CompiledGrammar

    from evidra.models.decode import TokenMask
    from evidra.models.hf_types import Tokenizer
    from evidra.models.loading import VLM

logger = logging.getLogger(__name__)

EXTRA = "grammar"  # pip install 'evidra[grammar]'
MAX_STEPS = 3  # steps a constrained answer may have
MAX_CHARS = 160  # characters of the answer and of each step's text, however large the budget
MIN_CHARS = 16  # below this many characters per string, fewer steps are allowed instead
MAX_BOX = 10000  # box numbers lie in 0..MAX_BOX (pixels of a resized page, 0-1000 grids, fractions)
NUMBER_CHARS = 11  # the longest such number xgrammar writes: "9999.999999" (six fraction digits)
BYTES_PER_CHAR = 4  # UTF-8; a byte-level token writes at least one byte


@dataclass(frozen=True)
class AnswerLimits:
    """Bounds of a constrained structured answer, so that its longest form fits the token budget."""

    steps: int
    answer_chars: int
    text_chars: int
    pages: int = 1  # a step cites image 1..pages

    @classmethod
    def for_budget(cls, max_new_tokens: int, pages: int) -> AnswerLimits:
        """The most steps (up to ``MAX_STEPS``), then the longest strings, whose worst case fits."""
        pages = max(1, pages)
        for steps in range(MAX_STEPS, 0, -1):
            spare = max_new_tokens - cls(steps, 0, 0, pages).worst_case_tokens()
            chars = spare // (BYTES_PER_CHAR * (steps + 1))  # the answer and each step's text share it
            if chars >= MIN_CHARS or (steps == 1 and chars >= 1):
                return cls(steps, min(chars, MAX_CHARS), min(chars, MAX_CHARS), pages)
        least = cls(1, 1, 1, pages).worst_case_tokens()
        raise InvalidInputError(
            f"max_new_tokens {max_new_tokens} is too few for a grammar-constrained structured answer; "
            f"give at least {least} (--max-new-tokens), or --no-structured"
        )

    def worst_case_tokens(self) -> int:
        """Most tokens an answer within these limits takes, its end-of-turn token included: one per
        byte of its longest JSON text (xgrammar writes ``", "`` and ``": "`` between items)."""
        widest = 10 ** (NUMBER_CHARS - 1)  # a number NUMBER_CHARS characters wide
        step = {"text": "x" * (BYTES_PER_CHAR * self.text_chars), "page": self.pages, "box": [widest] * 4}
        longest = {"answer": "x" * (BYTES_PER_CHAR * self.answer_chars), "steps": [step] * self.steps}
        return len(json.dumps(longest, separators=(", ", ": "))) + 1

    def schema(self) -> JSONObject:
        """``ANSWER_SCHEMA`` bounded by these limits (pages as image numbers, boxes as four numbers)."""
        number: JSONObject = {"type": "number", "minimum": 0, "maximum": MAX_BOX}
        step: JSONObject = {
            "type": "object",
            "properties": {
                "text": {"type": "string", "maxLength": self.text_chars},
                "page": {"type": "integer", "minimum": 1, "maximum": self.pages},
                "box": {"type": "array", "items": number, "minItems": 4, "maxItems": 4},
            },
            "required": ["text", "page", "box"],
            "additionalProperties": False,
        }
        answer: JSONObject = {"anyOf": [{"type": "string", "maxLength": self.answer_chars}, {"type": "null"}]}
        return {
            "type": "object",
            "properties": {
                "answer": answer,
                "steps": {"type": "array", "items": step, "maxItems": self.steps},
            },
            "required": ["answer", "steps"],
            "additionalProperties": False,
        }


def require_xgrammar() -> ModuleType:
    """The ``xgrammar`` module, or one line naming the extra that installs it."""
    try:
        import xgrammar
    except ImportError as exc:
        raise MissingDependencyError(
            "grammar-constrained structured answers from an in-process model need xgrammar: "
            f"pip install 'evidra[{EXTRA}]' (or --no-structured)"
        ) from exc
    return xgrammar


def grammar_available() -> bool:
    """Whether xgrammar can be imported (the ``grammar`` extra is installed)."""
    try:
        require_xgrammar()
    except MissingDependencyError:
        return False
    return True


class AnswerGrammar:
    """The structured answer's grammar for one tokenizer; ``mask`` starts one generation.

    ``vocab_size`` is the width of the model's logits (it may exceed the tokenizer's length; the
    extra ids are never allowed); ``eos_ids`` end a completed answer."""

    def __init__(self, tokenizer: Tokenizer, vocab_size: int, eos_ids: Sequence[int]) -> None:
        xgr = require_xgrammar()
        info = xgr.TokenizerInfo.from_huggingface(
            tokenizer, vocab_size=vocab_size, stop_token_ids=list(eos_ids)
        )
        self._compiler = xgr.GrammarCompiler(info)  # caches each compiled schema
        self.vocab_size = vocab_size

    @classmethod
    def for_model(cls, vlm: VLM) -> AnswerGrammar:
        """The grammar for ``vlm``'s tokenizer, logits width and end-of-turn tokens."""
        head = vlm.model.get_output_embeddings()
        width = (
            int(head.weight.shape[0])
            if head is not None
            else int(vlm.model.config.get_text_config().vocab_size)
        )
        return cls(vlm.tokenizer, width, vlm.eos_token_ids)

    def mask(self, limits: AnswerLimits, rows: int = 1) -> GrammarMask:
        """A fresh mask for ``rows`` completions of an answer within ``limits``."""
        compiled = self._compiler.compile_json_schema(json.dumps(limits.schema()), any_whitespace=False)
        return GrammarMask(compiled, rows, self.vocab_size)


class GrammarMask:
    """Per-row grammar states of one batched generation (``models.decode``'s ``TokenMask``).

    ``__call__`` masks the logits ``(B, V)`` of the next token; ``accept`` advances each row by the
    token drawn for it. A row whose grammar has ended (its end-of-turn token accepted) is left as
    it is: the sampler pads it."""

    def __init__(self, compiled: CompiledGrammar, rows: int, vocab_size: int) -> None:
        xgr = require_xgrammar()
        self._xgr = xgr
        self._matchers = [xgr.GrammarMatcher(compiled) for _ in range(rows)]
        self._bitmask = xgr.allocate_token_bitmask(rows, vocab_size)  # (B, ceil(V / 32)) int32
        self._ended = [False] * rows

    def __call__(self, logits: Tensor) -> Tensor:
        """A float32 copy of ``logits`` (B, V) with every token the grammar forbids at ``-inf`` (the
        logits themselves stay whole: log-probs are read from them)."""
        import torch

        scores = logits.to(dtype=torch.float32, copy=True)
        live = [i for i, ended in enumerate(self._ended) if not ended]
        if not live:
            return scores
        for i in live:
            self._matchers[i].fill_next_token_bitmask(self._bitmask, i)
        bitmask = self._bitmask.to(scores.device)
        self._xgr.apply_token_bitmask_inplace(scores, bitmask, indices=live)
        return scores

    def accept(self, tokens: Tensor) -> None:
        """Advance each live row by its drawn token (``tokens`` (B,); a negative id skips the row)."""
        for i, token in enumerate(tokens.tolist()):
            if self._ended[i] or token < 0:
                continue
            matcher = self._matchers[i]
            if not matcher.accept_token(int(token)):  # a token the mask allowed is always accepted
                logger.warning("row %d: token %d left the answer grammar; unconstrained from here", i, token)
                self._ended[i] = True
            elif matcher.is_terminated():
                self._ended[i] = True


def hf_logits_processor(mask: TokenMask) -> LogitsProcessor:
    """``mask`` as a transformers ``LogitsProcessor`` for ``model.generate``."""
    from transformers import LogitsProcessor

    class _GrammarProcessor(LogitsProcessor):
        def __init__(self) -> None:
            self.prompt_len: int | None = None

        def __call__(self, input_ids: Tensor, scores: Tensor) -> Tensor:
            if self.prompt_len is not None and input_ids.shape[1] > self.prompt_len:
                mask.accept(input_ids[:, -1])  # the token drawn at the previous step
            self.prompt_len = input_ids.shape[1]
            return mask(scores).to(scores.dtype)

    return _GrammarProcessor()

"""Grammar-constrained decoding of a structured answer: xgrammar vs llguidance, and their cost.

Two measures, both with the bounded answer schema of ``evidra.models.grammar`` (``AnswerLimits``
for the token budget):

1. **In evidra's generation path.** A tiny random Qwen-VL (``evidra.models.tiny``) answers a
   structured prompt about one page through ``evidra.models.generation.generate``: evidra's own
   decode loop for ``qwen2_5_vl``, transformers' ``generate`` (with a logits processor) for
   ``qwen3_vl``. Each way runs ``--repeats`` answers, unconstrained, with xgrammar's mask
   (evidra's ``GrammarMask``) and with llguidance's (an adapter below); tokens/s of each, the
   share of answers that parse, and the RESULT line's ratio constrained / unconstrained tokens/s.
   The tiny model's step takes about three milliseconds over a 660-token vocabulary, so this
   ratio is the worst case for the model and the best for the mask; part 2 prices the mask at a
   real vocabulary's width, to set against a real model's step.
2. **At a real vocabulary's width.** The mask's own cost per token (fill the bitmask, apply it to
   a copy of the logits, advance the state; drawing the token is not timed) with random logits,
   over a byte-level BPE of ``--vocab`` tokens trained on evidra's own sources (or ``--tokenizer
   DIR``, e.g. a Qwen2.5-VL checkpoint's), and the one-off cost of preparing the tokenizer and
   compiling the schema.

    OMP_NUM_THREADS=1 python benchmarks/grammar_decode.py
    OMP_NUM_THREADS=1 python benchmarks/grammar_decode.py --tokenizer /models/Qwen2.5-VL-3B-Instruct

Needs ``pip install 'evidra[grammar]' llguidance``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from evidra.core.types import Page
from evidra.models.grammar import MAX_BOX, AnswerGrammar, AnswerLimits, GrammarMask
from evidra.models.structured import build_messages, parse

WAYS = ("none", "xgrammar", "llguidance")
BENCH_DIR = Path(__file__).resolve().parent


def llguidance_schema(limits: AnswerLimits) -> dict[str, Any]:
    """The same schema; llguidance bounds a number's fraction digits only through ``multipleOf``
    (xgrammar writes at most six), so the box numbers get it."""
    schema = limits.schema()
    box = schema["properties"]["steps"]["items"]["properties"]["box"]
    box["items"] = {"type": "number", "minimum": 0, "maximum": MAX_BOX, "multipleOf": 1e-6}
    return schema


class LLGuidanceMask:
    """llguidance's matcher behind the ``TokenMask`` protocol ``GrammarMask`` also follows.

    llguidance stops a matcher once its grammar can take nothing more and leaves ending the turn
    to the engine; here that row may then draw only an end-of-turn token, as xgrammar's does."""

    def __init__(self, lltok: Any, limits: AnswerLimits, rows: int, width: int, eos: tuple[int, ...]) -> None:
        import llguidance
        import llguidance.torch as lt

        grammar = llguidance.LLMatcher.grammar_from_json_schema(
            llguidance_schema(limits), defaults={"whitespace_flexible": False}
        )
        self._lt = lt
        self._matchers = [llguidance.LLMatcher(lltok, grammar) for _ in range(rows)]
        self._bitmask = lt.allocate_token_bitmask(rows, width)
        self._eos = list(eos)

    def __call__(self, logits: Any) -> Any:
        import torch

        scores = logits.to(dtype=torch.float32, copy=True)
        ending = scores[:, self._eos].clone()  # (B, E)
        for i, matcher in enumerate(self._matchers):
            if not matcher.is_stopped():
                self._lt.fill_next_token_bitmask(matcher, self._bitmask, i)
        self._lt.apply_token_bitmask_inplace(scores, self._bitmask.to(scores.device))
        for i, matcher in enumerate(self._matchers):
            if matcher.is_stopped():
                scores[i] = float("-inf")
                scores[i, self._eos] = ending[i]
        return scores

    def accept(self, tokens: Any) -> None:
        for matcher, token in zip(self._matchers, tokens.tolist(), strict=True):
            if token >= 0 and not matcher.is_stopped():
                matcher.consume_token(int(token))


def llguidance_tokenizer(tokenizer: Any, width: int, eos: int) -> Any:
    import llguidance.hf

    return llguidance.hf.from_tokenizer(tokenizer, n_vocab=width, eos_token=eos)


def _masks(way: str, tokenizer: Any, width: int, eos: tuple[int, ...]) -> Callable[[AnswerLimits], Any]:
    """A maker of fresh masks of ``way`` (the tokenizer prepared once, as evidra does)."""
    if way == "xgrammar":
        grammar = AnswerGrammar(tokenizer, width, eos)
        return lambda limits: grammar.mask(limits)
    lltok = llguidance_tokenizer(tokenizer, width, eos[0])
    return lambda limits: LLGuidanceMask(lltok, limits, 1, width, eos)


def in_generation(arch: str, repeats: int, budget: int) -> dict[str, dict[str, float]]:
    """Tokens/s and parse rate of ``repeats`` sampled answers of a tiny ``arch`` model, per way.

    The ways take turns, answer by answer, so that a busy machine slows each alike; tokens/s is
    the median over answers of (tokens - 1) / (seconds - the prompt's forward pass)."""
    from PIL import Image

    from evidra.models.generation import SamplingParams, generate
    from evidra.models.loading import load_vlm
    from evidra.models.tiny import build_tiny

    with tempfile.TemporaryDirectory() as tmp:
        vlm = load_vlm(build_tiny(arch, Path(tmp) / arch))
        Image.new("RGB", (224, 168), "white").save(Path(tmp) / "page.png")
        page = Page("p", str(Path(tmp) / "page.png"), 224, 168)
        chat = build_messages("In which city was the project founded?", [page])
        width = int(vlm.model.get_output_embeddings().weight.shape[0])
        limits = AnswerLimits.for_budget(budget, pages=1)
        params = SamplingParams(max_new_tokens=budget, temperature=1.0)
        makers = {way: _masks(way, vlm.tokenizer, width, vlm.eos_token_ids) for way in WAYS[1:]}
        prefill = _prefill_seconds(vlm, chat)
        rates: dict[str, list[float]] = {way: [] for way in WAYS}
        parsed: dict[str, int] = dict.fromkeys(WAYS, 0)
        tokens: dict[str, int] = dict.fromkeys(WAYS, 0)
        for turn in range(repeats + 1):  # the first turn warms up
            for way in WAYS:
                mask = makers[way](limits) if way in makers else None
                start = time.perf_counter()
                (gen,) = generate(vlm, [chat], params, mask=mask)
                seconds = time.perf_counter() - start
                if turn:
                    rates[way].append((len(gen.token_ids) - 1) / max(seconds - prefill, 1e-9))
                    parsed[way] += parse(gen.text, ["p"]).answer is not None
                    tokens[way] += len(gen.token_ids)
    return {
        way: {
            "tokens_per_s": statistics.median(rates[way]),
            "parsed": parsed[way] / repeats,
            "tokens": tokens[way] / repeats,
        }
        for way in WAYS
    }


def _prefill_seconds(vlm: Any, chat: Any, repeats: int = 5) -> float:
    """Median seconds of a one-token answer: the prompt's forward pass and the first token."""
    from evidra.models.generation import SamplingParams, generate

    one = SamplingParams(max_new_tokens=1, temperature=1.0)
    times = []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        generate(vlm, [chat], one)
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


def _evidra_sources(seed: int = 0) -> Iterator[str]:
    """evidra's own modules and docs (the corpus of part 2's tokenizer; ``seed`` is unused)."""
    root = BENCH_DIR.parent
    for path in sorted([*root.glob("src/evidra/**/*.py"), *root.glob("docs/*.md")]):
        yield path.read_text(encoding="utf-8")


def wide_tokenizer(vocab: int, given: str | None) -> Any:
    """A real tokenizer (``given``) or a byte-level BPE of ``vocab`` tokens trained on evidra's sources."""
    from transformers import AutoTokenizer

    if given:
        return AutoTokenizer.from_pretrained(given)
    from evidra.models import tiny_parts

    corpus = tiny_parts._training_corpus
    tiny_parts._training_corpus = _evidra_sources  # type: ignore[assignment]
    try:
        return tiny_parts.build_tokenizer(vocab_size=vocab)
    finally:
        tiny_parts._training_corpus = corpus


def mask_cost(tokenizer: Any, budget: int, answers: int) -> dict[str, dict[str, float]]:
    """Per-token cost of each mask over random logits at the tokenizer's width, and set-up costs."""
    import torch

    width = len(tokenizer)
    eos = (int(tokenizer.convert_tokens_to_ids("<|im_end|>")),)
    limits = AnswerLimits.for_budget(budget, pages=3)
    out: dict[str, dict[str, float]] = {}
    for way in WAYS[1:]:
        start = time.perf_counter()
        make = _masks(way, tokenizer, width, eos)
        prepare = time.perf_counter() - start
        compiles, per_token, parsed = [], [], 0
        gen = torch.Generator().manual_seed(0)
        for _ in range(answers):
            start = time.perf_counter()
            mask = make(limits)
            compiles.append(time.perf_counter() - start)
            drawn: list[int] = []
            spent = 0.0
            while not drawn or drawn[-1] not in eos:
                logits = torch.randn(1, width, generator=gen)
                start = time.perf_counter()
                scores = mask(logits)
                spent += time.perf_counter() - start
                token = torch.multinomial(scores.softmax(dim=-1), 1, generator=gen)[:, 0]  # (1,), not timed
                start = time.perf_counter()
                mask.accept(token)
                spent += time.perf_counter() - start
                drawn.append(int(token))
                if len(drawn) > budget:
                    break
            per_token.append(spent / len(drawn))
            parsed += parse(tokenizer.decode(drawn[:-1]), ["a", "b", "c"]).answer is not None
        out[way] = {
            "prepare_s": prepare,
            "first_compile_ms": 1000 * compiles[0],
            "compile_ms": 1000 * statistics.median(compiles),  # the same schema again: cached by xgrammar
            "mask_us_per_token": 1e6 * statistics.median(per_token),
            "parsed": parsed / answers,
        }
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--arch", nargs="+", default=["qwen2_5_vl", "qwen3_vl"])
    p.add_argument("--repeats", type=int, default=20, help="answers per way in the generation path")
    p.add_argument("--budget", type=int, default=256, help="max_new_tokens of an answer")
    p.add_argument("--vocab", type=int, default=32768, help="width of the trained tokenizer (part 2)")
    p.add_argument("--tokenizer", default=None, help="a tokenizer folder for part 2 instead of training one")
    p.add_argument("--answers", type=int, default=10, help="answers per library in part 2")
    args = p.parse_args()
    assert isinstance(GrammarMask, type)  # evidra's xgrammar mask is what "xgrammar" measures
    for arch in args.arch:
        rows = in_generation(arch, args.repeats, args.budget)
        for way, r in rows.items():
            print(
                f"{arch:11s} {way:10s} {r['tokens_per_s']:8.1f} tokens/s  {r['tokens']:6.1f} tokens/answer  "
                f"parsed {r['parsed']:.0%}"
            )
        for way in WAYS[1:]:
            ratio = rows[way]["tokens_per_s"] / rows["none"]["tokens_per_s"]
            print(f"RESULT {arch} {way}: constrained / unconstrained tokens/s = {ratio:.2f}")
    tokenizer = wide_tokenizer(args.vocab, args.tokenizer)
    cost = mask_cost(tokenizer, args.budget, args.answers)
    for way, r in cost.items():
        print(
            f"vocab {len(tokenizer)} {way:10s} prepare {r['prepare_s']:.2f} s  "
            f"compile {r['first_compile_ms']:.1f} ms (cached {r['compile_ms']:.1f})  "
            f"mask {r['mask_us_per_token']:.0f} us/token  "
            f"parsed {r['parsed']:.0%}"
        )
    ratio = cost["llguidance"]["mask_us_per_token"] / cost["xgrammar"]["mask_us_per_token"]
    print(f"RESULT vocab {len(tokenizer)}: llguidance / xgrammar mask time per token = {ratio:.2f}")
    print(json.dumps({"generation": args.arch, "mask_cost": cost}))


if __name__ == "__main__":
    main()

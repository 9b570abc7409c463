"""One rollout loop for single- and multi-turn episodes.

B samples x G episodes advance together, turn by turn: every still-active episode's context
is generated in one batch until end-of-turn or one of its environment's stop strings, each
environment answers, observations (text and images) are tokenised with the chat template and
appended, and the episodes that are not done continue. A trajectory keeps the exact sampled
token ids, a mask that is 1 on policy tokens and 0 on observation tokens, and the span of each
policy turn. Turn and token limits end an episode as truncated: the policy's token budget, and
either one budget for everything after the prompt or, with ``max_context_tokens``, a cap on the
whole context that observations count against instead (``RolloutLimits``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Protocol

from evidra.core.errors import InvalidInputError
from evidra.core.types import Parsed, Sample, Span, Trajectory
from evidra.env.environment import BatchedSearch, Environment, SearchRequest, StepInfo
from evidra.models.context import Context, encode_messages, encode_turn
from evidra.models.generation import Generation, SamplingParams, generate_contexts
from evidra.models.loading import VLM

if TYPE_CHECKING:
    from evidra.models.hf_types import HFModel, Processor, Tokenizer

Parser = Callable[[str], Parsed]


class GenerationBackend(Protocol):
    """Generates after tokenized contexts. HF ``generate`` here; a vLLM server fits the same shape."""

    @property
    def processor(self) -> Processor: ...

    def generate(self, contexts: Sequence[Context], params: SamplingParams) -> list[Generation]: ...


@dataclass(frozen=True)
class HFBackend:
    """Generation with the policy's own transformers model (the default, CPU or GPU)."""

    vlm: VLM

    @property
    def processor(self) -> Processor:
        return self.vlm.processor

    def generate(self, contexts: Sequence[Context], params: SamplingParams) -> list[Generation]:
        return generate_contexts(self.vlm, contexts, params)

    def release(self) -> None:
        """Nothing to free: generation uses the policy itself."""

    def sync(self, model: HFModel) -> None:
        """Nothing to copy: generation always sees the policy's current weights."""


@dataclass(frozen=True)
class RolloutLimits:
    """Turn and token limits of an episode.

    With ``max_context_tokens`` 0 (the default) ``max_response_tokens`` caps everything after the
    prompt, observations included. With ``max_context_tokens`` > 0 the budgets are separate:
    ``max_response_tokens`` caps the policy's own tokens only, and ``max_context_tokens`` caps the
    whole context (prompt, policy turns and observations), so observation images do not eat the
    policy's budget (VRAG-RL's released rollout: a prompt of 8192 tokens where observations
    accumulate, plus 2048 response tokens).
    """

    max_turns: int = 1
    max_new_tokens: int = 256  # per policy turn
    max_response_tokens: int = 1024  # see above: after the prompt, or the policy's tokens only
    max_context_tokens: int = 0  # the whole context; 0: no cap of its own

    def __post_init__(self) -> None:
        if self.max_turns < 1 or self.max_new_tokens < 1 or self.max_response_tokens < 1:
            raise InvalidInputError(f"rollout limits must be positive, got {self}")
        if self.max_context_tokens < 0:
            raise InvalidInputError(
                f"max_context_tokens must be >= 0 (0: no cap), got {self.max_context_tokens}"
            )

    @property
    def separate(self) -> bool:
        """Whether observations count against the context cap instead of the response budget."""
        return self.max_context_tokens > 0


@dataclass(frozen=True, eq=False)
class Episode:
    """A finished episode: the trajectory, the full token context with images, what happened."""

    sample: Sample
    group: int  # index of the sample in the batch: episodes of one group share it
    trajectory: Trajectory
    context: Context  # prompt + response, with every image (what the policy loss needs)
    infos: tuple[StepInfo, ...]  # what the environment did at each step
    parsed: tuple[Parsed | None, ...] = ()  # the environment's parse of each turn (None: none)
    parser: Parser | None = None  # the parse the environment used (its paradigm's)

    def final_parsed(self, parse: Parser) -> Parsed:
        """The final policy turn parsed by ``parse``: the environment's own parse of it when the
        environment parsed with the same parser, so each turn is parsed once; else parsed now."""
        texts = self.trajectory.texts
        last = self.parsed[-1] if self.parsed and len(self.parsed) == len(texts) else None
        if last is not None and self.parser is not None and same_parser(self.parser, parse):
            return last
        return parse(texts[-1] if texts else "")


def same_parser(a: Parser, b: Parser) -> bool:
    """Whether ``a`` and ``b`` are one parser: the same function, or the same method of equal
    paradigms (``SearchAgent().parse`` twice)."""
    if a is b or a == b:
        return True
    fa, fb = getattr(a, "__func__", None), getattr(b, "__func__", None)
    return fa is not None and fa is fb and getattr(a, "__self__", None) == getattr(b, "__self__", None)


@dataclass
class _Running:
    env: Environment
    sample: Sample
    group: int
    prompt: Context
    context: Context
    limits: RolloutLimits
    ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    turns: list[Span] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    infos: list[StepInfo] = field(default_factory=list)
    parsed: list[Parsed | None] = field(default_factory=list)
    done: bool = False
    truncated: bool = False

    @property
    def budget(self) -> int:
        """Policy tokens the episode may still generate."""
        lim = self.limits
        if not lim.separate:
            return lim.max_response_tokens - len(self.ids)
        policy = lim.max_response_tokens - sum(self.mask)
        return min(policy, lim.max_context_tokens - len(self.context))

    def fits(self, obs: Context) -> bool:
        """Whether ``obs`` fits with room for at least one more policy token after it."""
        if not self.limits.separate:
            return len(obs) < self.budget
        return len(self.context) + len(obs) < self.limits.max_context_tokens

    def add_policy(self, gen: Generation) -> None:
        start = len(self.ids)
        self.ids.extend(gen.token_ids)
        self.mask.extend([1] * len(gen.token_ids))
        self.logprobs.extend(gen.logprobs)
        self.context = self.context.append_ids(gen.token_ids)
        self.turns.append(Span(start, len(self.ids)))
        self.texts.append(gen.text)

    def add_observation(self, obs: Context) -> None:
        self.ids.extend(obs.token_ids)
        self.mask.extend([0] * len(obs))
        self.logprobs.extend([0.0] * len(obs))
        self.context = self.context.extend(obs)

    def finish(self) -> Episode:
        traj = Trajectory(
            prompt_ids=self.prompt.token_ids,
            token_ids=tuple(self.ids),
            policy_mask=tuple(self.mask),
            logprobs=tuple(self.logprobs),
            turns=tuple(self.turns),
            texts=tuple(self.texts),
            truncated=self.truncated,
            finished=self.done and not self.truncated,
        )
        paradigm = getattr(self.env, "paradigm", None)  # environments that parse hold their paradigm
        parser = paradigm.parse if paradigm is not None else None
        return Episode(
            self.sample, self.group, traj, self.context, tuple(self.infos), tuple(self.parsed), parser
        )


def _clip(gen: Generation, budget: int, tokenizer: Tokenizer) -> Generation:
    """Cut a generation to the episode's remaining token budget (the batch shared one limit)."""
    if len(gen.token_ids) <= budget:
        return gen
    ids = gen.token_ids[:budget]
    return replace(
        gen,
        token_ids=ids,
        logprobs=gen.logprobs[:budget],
        text=tokenizer.decode(list(ids)),
        finish_reason="length",
    )


def prefetch_searches(episodes: Sequence[_Running], texts: Sequence[str]) -> int:
    """Run the searches the environments are about to make as one batch per index (and result
    depth), handing each environment its hits; returns the number of searches batched. The
    hits are those of one-by-one searches: each query keeps its own exclusions."""
    batches: dict[tuple[int, int], list[tuple[BatchedSearch, SearchRequest]]] = {}
    for ep, text in zip(episodes, texts, strict=True):
        env = ep.env
        if not isinstance(env, BatchedSearch):
            continue
        request = env.pending_search(text)
        if request is not None:
            batches.setdefault((id(request.searcher), request.k), []).append((env, request))
    for entries in batches.values():
        searcher, k = entries[0][1].searcher, entries[0][1].k
        queries = [r.query for _, r in entries]
        hits = searcher.search(queries, k=k, exclude=[set(r.exclude) for _, r in entries])
        for (searching, _), found in zip(entries, hits, strict=True):
            searching.prefetch(found)
    return sum(len(e) for e in batches.values())


def _apply_turn(ep: _Running, gen: Generation, processor: Processor) -> None:
    """Record one policy turn, let the environment answer, insert its observation."""
    ep.add_policy(gen)
    result = ep.env.step(gen.text)
    ep.infos.append(result.info)
    ep.parsed.append(result.parsed)
    if result.done:
        ep.done = True
        ep.truncated = gen.finish_reason == "length"  # the last turn was cut by the token limit
        return
    if len(ep.turns) >= ep.limits.max_turns or not result.observation or ep.budget <= 0:
        ep.done = ep.truncated = True  # out of turns or tokens, or an environment with nothing to say
        return
    obs = encode_turn(processor, result.observation, close_previous=gen.finish_reason != "eos")
    if not ep.fits(obs):
        ep.done = ep.truncated = True
        return
    ep.add_observation(obs)


def rollout(
    backend: GenerationBackend,
    make_env: Callable[[Sample], Environment],
    samples: Sequence[Sample],
    group_size: int,
    params: SamplingParams,
    limits: RolloutLimits,
) -> list[Episode]:
    """Run ``group_size`` episodes per sample; returns them grouped: sample 0's G, then sample 1's."""
    if group_size < 1:
        raise InvalidInputError(f"group_size must be >= 1, got {group_size}")
    running: list[_Running] = []
    for g, sample in enumerate(samples):
        encoded: dict[str, Context] = {}  # a group's episodes usually share one prompt: encode it once
        for _ in range(group_size):
            env = make_env(sample)
            messages = env.reset(sample)
            key = repr(messages)
            prompt = encoded.get(key) or encoded.setdefault(key, encode_messages(backend.processor, messages))
            if limits.separate and len(prompt) >= limits.max_context_tokens:
                raise InvalidInputError(
                    f"sample {sample.id!r}: its {len(prompt)}-token prompt leaves no room under "
                    f"max_context_tokens={limits.max_context_tokens}; raise it or show smaller images"
                )
            running.append(_Running(env, sample, g, prompt, prompt, limits))
    while active := [ep for ep in running if not ep.done]:
        by_stop: dict[tuple[str, ...], list[_Running]] = {}
        for ep in active:  # episodes whose environments stop on different strings generate apart
            by_stop.setdefault(tuple(ep.env.stop), []).append(ep)
        for stop, eps in by_stop.items():
            max_new = min(limits.max_new_tokens, max(ep.budget for ep in eps))
            turn_params = replace(params, stop=stop or params.stop, max_new_tokens=max_new)
            tok = backend.processor.tokenizer
            gens = backend.generate([e.context for e in eps], turn_params)
            gens = [_clip(gen, ep.budget, tok) for ep, gen in zip(eps, gens, strict=True)]
            prefetch_searches(eps, [gen.text for gen in gens])  # one index call per turn, not per episode
            for ep, gen in zip(eps, gens, strict=True):
                _apply_turn(ep, gen, backend.processor)
    return [ep.finish() for ep in running]

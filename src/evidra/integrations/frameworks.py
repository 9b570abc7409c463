"""TRL and verl adapters for any evidra reward (see the package docstring).

>>> from evidra.rewards.toy import digit_fraction
>>> fn = as_trl_reward(digit_fraction)
>>> fn(prompts=["How many?"], completions=[[{"role": "assistant", "content": "12 a"}]], completion_ids=[[1]])
[0.6666666666666666]
>>> as_verl_compute_score(digit_fraction)("toy", "1 2", "12", {"question": "How many?"})["score"]
1.0
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from evidra.core.errors import ConfigError, RegistryError
from evidra.core.types import Parsed
from evidra.integrations.samples import as_strings, message_text, sample_from_fields
from evidra.integrations.trl_env import Episode, episode_parsed
from evidra.rewards.reward import REWARDS, RewardFn, RewardResult

Parser = Callable[[str], Parsed]


def _plain_parse(text: str) -> Parsed:
    return Parsed(text=text)


def _last_assistant_text(completion: object) -> str:
    """The text of a multi-turn completion's last assistant message (tool results follow the
    assistant turns that called them; a rollout cut at the length limit may end on one)."""
    if isinstance(completion, Sequence) and not isinstance(completion, str):
        for message in reversed(completion):
            if isinstance(message, Mapping) and message.get("role") == "assistant":
                return message_text(message)
        return ""
    return message_text(completion)


def _usable(reward: RewardFn) -> None:
    """Refuse, when the adapter is made, a reward that would leave every sample unscored."""
    check = getattr(reward, "missing_service", None)
    reason = check() if callable(check) else None
    if reason:
        raise ConfigError(f"this reward cannot score as configured: {reason}")


def registered_reward(reward: RewardFn | str) -> RewardFn:
    """``reward`` itself, or the reward registered under that name in ``evidra.rewards.REWARDS``
    (``"lat"``, ``"vragrl.total"``, ``"lang2act.toolrl"``...); an unknown name is a one-line error.

    >>> registered_reward("lat.format").component_names
    ('format',)
    """
    if not isinstance(reward, str):
        return reward
    import evidra.rewards  # noqa: F401  (registers every paper's rewards)

    try:
        return REWARDS.get(reward)
    except RegistryError as exc:
        raise ConfigError(f"reward: {exc.args[0]}") from None


def method_reward(name: str, **options: object) -> tuple[RewardFn, Parser]:
    """The reward and parser a registered method (``evidra.methods.METHODS``) trains with, its
    ``options`` checked as the recipe's ``method:`` section would be: what the adapters take,
    ``as_trl_reward(*method_reward("lat"))``, so another framework trains on the same reward.

    >>> reward, parse = method_reward("lang2act", stage=1)
    >>> reward(parse("<description>d</description><reasoning>r</reasoning><answer>4</answer>"),
    ...        sample_from_fields({"question": "2+2?", "answers": ["4"]})).total
    1.0
    """
    from evidra.methods import get_method

    task = get_method(name).task(options)
    return task.reward, task.parse


def as_trl_reward(
    reward: RewardFn | str, parse: Parser = _plain_parse, name: str | None = None
) -> Callable[..., list[float | None]]:
    """A TRL ``GRPOTrainer`` reward function: ``f(prompts, completions, completion_ids, **columns)``.

    Dataset columns arrive as lists (one value per completion); TRL's own extras
    (``trainer_state``, ``log_extra``, ``log_metric``) are ignored. With a multi-turn
    environment made by ``as_trl_environment``, TRL passes ``environments`` (one per
    completion): the completion's last assistant text is played as the episode's final turn,
    and the reward sees the episode's sample, a text trajectory of its actions and the pages it
    retrieved (``parsed.retrieved``, VRAG-RL's reward). Other environments are
    ignored. An unscored sample (judge down) is ``None``, which TRL records as NaN; a reward
    that cannot score at all (a missing service) is refused here, not discovered as all-None
    rewards. ``reward`` may be a registered reward's name (``registered_reward``).
    """
    if isinstance(reward, str):
        name = name or reward
    reward = registered_reward(reward)
    _usable(reward)
    framework_keys = {"trainer_state", "log_extra", "log_metric", "environments"}

    def reward_func(
        prompts: Sequence[object],
        completions: Sequence[object],
        completion_ids: Sequence[Sequence[int]] | None = None,
        **columns: Any,
    ) -> list[float | None]:
        environments = columns.get("environments") or ()
        columns = {k: v for k, v in columns.items() if k not in framework_keys}
        out: list[float | None] = []
        for i, (prompt, completion) in enumerate(zip(prompts, completions, strict=True)):
            text = message_text(completion)
            episode = getattr(environments[i], "evidra_episode", None) if i < len(environments) else None
            if isinstance(episode, Episode):
                text = _last_assistant_text(completion)
                episode.finish(text)
                ids = completion_ids[i] if completion_ids is not None else ()
                parsed = episode_parsed(parse(text), episode)
                result = reward(parsed, episode.sample, episode.trajectory(ids))
            else:
                row = {
                    k: v[i] for k, v in columns.items() if isinstance(v, Sequence) and len(v) == len(prompts)
                }
                result = reward(parse(text), sample_from_fields(row, index=i, prompt=prompt), None)
            out.append(result.total if result.scored else None)
        return out

    reward_func.__name__ = str(name or getattr(reward, "__name__", type(reward).__name__))
    return reward_func


RETRIEVED_FIELD = "retrieved_pages"  # the key evidra's verl tools write into extra_info


def as_verl_compute_score(
    reward: RewardFn | str, parse: Parser = _plain_parse, keys: Sequence[str] | None = None
) -> Callable[..., dict[str, float]]:
    """A verl ``compute_score(data_source, solution_str, ground_truth, extra_info=None)``.

    Every sample returns the same keys (verl collects each key into one list per batch):
    ``score``, ``scored`` (1.0, or 0.0 when the reward could not score the sample, e.g. the
    judge was down: its ``score`` 0.0 is not a verdict, drop it by ``scored``) and one value per
    component in ``keys`` (default: the reward's ``component_names``, if it declares them; 0.0
    where a result lacks one). The pages evidra's verl search tool retrieved reach it in
    ``extra_info["retrieved_pages"]`` and are read as VRAG-RL's reward reads them; gold pages
    come from ``extra_info["gold_pages"]``.
    """
    reward = registered_reward(reward)
    _usable(reward)
    names = tuple(keys) if keys is not None else tuple(getattr(reward, "component_names", ()))

    def compute_score(
        data_source: str,
        solution_str: str,
        ground_truth: object,
        extra_info: Mapping[str, object] | None = None,
        **_: object,
    ) -> dict[str, float]:
        fields = {**dict(extra_info or {}), "answers": ground_truth, "data_source": data_source}
        parsed = parse(solution_str)
        if not parsed.retrieved:
            parsed = dataclasses.replace(parsed, retrieved=as_strings(fields.get(RETRIEVED_FIELD)))
        result: RewardResult = reward(parsed, sample_from_fields(fields), None)
        total = result.total if result.scored else 0.0
        out: dict[str, float] = {"score": total, "scored": float(result.scored)}
        out.update({k: float(result.components.get(k, 0.0)) for k in names})
        return out

    return compute_score

"""evidra environments as TRL ``GRPOTrainer(environment_factory=...)`` environments.

TRL's multi-turn contract (``trl.GRPOTrainer``, ``environment_factory``; experimental in TRL):

* the factory is called with no argument, once per concurrent rollout; instances are pooled and
  reused, so ``reset(**row)`` is called with the dataset row before every rollout;
* ``reset`` returns ``None`` or the text (or a list of content blocks) appended to the last user
  message of the row's prompt;
* every public method of the environment's *class* other than ``reset`` and ``get_reward`` is a
  tool: its name, type hints and Google-style docstring become the tool schema rendered by the
  chat template; the model calls it with the chat template's tool-call syntax (Qwen's
  ``<tool_call>{"name": ..., "arguments": ...}</tool_call>``), TRL parses the call, runs the
  method and inserts its return value as a ``tool`` message (a string, or a list of content
  blocks: ``{"type": "image", "image": PIL.Image}`` parts reach a VLM's processor);
* a rollout ends when the model answers without a tool call (or at
  ``GRPOConfig.max_tool_calling_iterations``); reward functions then receive
  ``environments=[...]``, the instance of each completion.

evidra environments act on the policy's *text* (``step("<search>q</search>")``), so each TRL
tool renders its arguments as the action text the evidra environment parses (``ToolSpec``).
The final answer is never a tool call: ``as_trl_reward`` plays the completion's last assistant
text as the episode's final ``step`` before scoring, as evidra's own rollout loop does.

>>> from evidra.env.toy import KeyValueEnv
>>> Env = as_trl_environment(lambda sample: KeyValueEnv({"x": "7"}), (SEARCH_TOOL,))
>>> env = Env()
>>> env.reset(question="What is x?", answer="7") is None
True
>>> env.search(query="x")
'<information>7</information>'
>>> env.evidra_episode.infos[0].hit
True
"""

from __future__ import annotations

import dataclasses
import inspect
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from evidra.core import imagefiles
from evidra.core.errors import ConfigError
from evidra.core.types import ImagePart, Message, Parsed, Sample, Span, TextPart, Trajectory
from evidra.env.environment import Environment, StepInfo, StepResult
from evidra.integrations.samples import sample_from_fields

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage

EnvMaker = Callable[[Sample], Environment]
ENDED = "The episode has ended: write the final answer."


@dataclass(frozen=True)
class ToolSpec:
    """One evidra action exposed to TRL as a tool.

    ``params`` maps each argument to ``(type, description)`` (the JSON schema TRL renders into
    the prompt); ``action`` turns the arguments into the text the evidra environment's ``step``
    parses.
    """

    name: str
    description: str
    params: Mapping[str, tuple[object, str]]  # the type is an annotation: str, int, list[int]
    action: Callable[..., str]

    def __post_init__(self) -> None:
        if not self.name.isidentifier() or self.name.startswith("_") or self.name in ("reset", "get_reward"):
            raise ConfigError(
                f"tool name {self.name!r} must be a public identifier other than reset/get_reward"
            )


SEARCH_TOOL = ToolSpec(
    "search",
    "Search the collection and receive the best result not shown yet.",
    {"query": (str, "The search query.")},
    lambda query: f"<search>{query}</search>",
)
"""``<search>query</search>``: ``KeyValueEnv`` and VRAG-RL's ``SearchEnv``."""

BBOX_TOOL = ToolSpec(
    "bbox",
    "Crop and zoom into a region of the last image shown.",
    {"box": (list[int], "The region [x1, y1, x2, y2] in pixels of the last image shown.")},
    lambda box: f"<bbox>{json.dumps(list(box))}</bbox>",
)
"""``<bbox>[x1, y1, x2, y2]</bbox>``: VRAG-RL's ``SearchEnv``."""

ZOOM_TOOL = ToolSpec(
    "image_zoom_in_tool",
    "Zoom into a region of the image.",
    {"bbox_2d": (list[int], "The region [x1, y1, x2, y2] in pixels of the original image.")},
    lambda bbox_2d: (
        "<tool_call>"
        + json.dumps({"name": "image_zoom_in_tool", "arguments": {"bbox_2d": list(bbox_2d)}})
        + "</tool_call>"
    ),
)
"""DeepEyes' / CAVE's zoom call: ``ZoomEnv``."""


@dataclass
class Episode:
    """What one TRL rollout did in its evidra environment (read by ``as_trl_reward``)."""

    sample: Sample
    env: Environment
    prompt: list[Message]
    actions: list[str] = field(default_factory=list)  # the action text of every step, in order
    infos: list[StepInfo] = field(default_factory=list)  # StepResult.info of every step
    done: bool = False

    def step(self, text: str) -> StepResult:
        result = self.env.step(text)
        self.actions.append(text)
        self.infos.append(result.info)
        self.done = result.done
        return result

    def finish(self, text: str) -> None:
        """Play the final assistant text as the last turn (once; nothing if the episode ended)."""
        if not self.done:
            self.step(text)
            self.done = True

    def retrieved(self) -> tuple[str, ...]:
        """The page ids the episode inserted (``StepInfo.retrieved`` of its last step)."""
        return self.infos[-1].retrieved if self.infos else ()

    def trajectory(self, completion_ids: Sequence[int] = ()) -> Trajectory:
        """A text-level trajectory: ``texts`` are the actions; ``token_ids`` TRL's completion ids.

        TRL gives reward functions no tool mask nor turn boundaries, so every token counts as a
        policy token and each turn's span is empty (rewards that need per-turn spans cannot be
        computed from TRL's arguments).
        """
        ids = tuple(int(t) for t in completion_ids)
        n = len(ids)
        return Trajectory(
            prompt_ids=(),
            token_ids=ids,
            policy_mask=(1,) * n,
            logprobs=(0.0,) * n,
            turns=tuple(Span(n, n) for _ in self.actions),
            texts=tuple(self.actions),
            finished=self.done,
        )


def trl_content(messages: Sequence[Message]) -> str | list[dict[str, object]]:
    """evidra messages as TRL tool-result / reset content: their text joined by newlines, or,
    when they hold images, a list of ``{"type": "text"|"image"}`` blocks (PIL images; paths are
    opened) that TRL routes to a VLM's processor."""
    parts = [p for m in messages for p in m.content]
    if not any(isinstance(p, ImagePart) for p in parts):
        return "\n".join(m.plain_text for m in messages)
    blocks: list[dict[str, object]] = []
    for p in parts:
        if isinstance(p, TextPart):
            blocks.append({"type": "text", "text": p.text})
        else:
            blocks.append({"type": "image", "image": _pil(p.image)})
    return blocks


def _pil(image: str | Path | PILImage) -> PILImage:
    if isinstance(image, (str, Path)):
        return imagefiles.decode(image, f"image {str(image)!r}")
    return image


class TRLEnvironment:
    """Base of the classes ``as_trl_environment`` builds; one instance serves many rollouts.

    Only ``reset`` and the tool methods are public functions of the class (TRL turns every other
    public function into a tool); the episode is the ``evidra_episode`` attribute.
    """

    _make_env: EnvMaker
    _to_sample: Callable[[Mapping[str, object]], Sample]
    _prompt_from_env: bool = False

    def __init__(self) -> None:
        self.evidra_episode: Episode | None = None

    def reset(self, **row: object) -> str | list[dict[str, object]] | None:
        """Start an episode for the dataset row (TRL passes the row's columns)."""
        sample = type(self)._to_sample(row)
        env = type(self)._make_env(sample)
        prompt = env.reset(sample)
        self.evidra_episode = Episode(sample, env, list(prompt))
        return trl_content(prompt) if type(self)._prompt_from_env else None

    def _act(self, text: str) -> str | list[dict[str, object]]:
        episode = self.evidra_episode
        if episode is None:
            raise RuntimeError("reset was not called before a tool call")
        if episode.done:
            return ENDED
        result = episode.step(text)
        content = trl_content(result.observation)
        return content if content else (ENDED if result.done else "")


def _tool_method(spec: ToolSpec) -> Callable[..., str | list[dict[str, object]]]:
    def tool(self: TRLEnvironment, **kwargs: object) -> str | list[dict[str, object]]:
        return self._act(spec.action(**kwargs))

    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    params += [
        inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=t)
        for n, (t, _) in spec.params.items()
    ]
    tool.__signature__ = inspect.Signature(params, return_annotation=str)  # type: ignore[attr-defined]
    tool.__annotations__ = {**{n: t for n, (t, _) in spec.params.items()}, "return": str}
    args = "\n".join(f"    {n}: {d}" for n, (_, d) in spec.params.items())
    tool.__doc__ = f"{spec.description}\n\nArgs:\n{args}\n\nReturns:\n    What the environment shows next."
    tool.__name__ = tool.__qualname__ = spec.name
    return tool


def as_trl_environment(
    make_env: EnvMaker,
    tools: Sequence[ToolSpec],
    *,
    to_sample: Callable[[Mapping[str, object]], Sample] | None = None,
    prompt_from_env: bool = False,
    name: str = "EvidraEnvironment",
) -> type[TRLEnvironment]:
    """A TRL ``environment_factory``: a class whose instances run one evidra episode per rollout.

    ``make_env(sample)`` builds the evidra environment of a row's sample (the row's fields read
    by ``sample_from_fields``, or ``to_sample(row)``); ``tools`` are the actions the model may
    call. With ``prompt_from_env`` the text (and images) of the environment's own prompt is
    appended to the row's last user message; by default the dataset's prompt stands alone
    (evidra's prompts describe its text-tag protocol, TRL's models call tools instead).
    Reward functions made by ``as_trl_reward`` read each rollout's episode (its sample, actions
    and step infos, e.g. the pages VRAG-RL's search retrieved).
    """
    if not tools:
        raise ConfigError("as_trl_environment needs at least one tool (TRL ends a rollout without one)")
    names = [t.name for t in tools]
    if len(set(names)) != len(names):
        raise ConfigError(f"duplicate tool names: {names}")

    def default_sample(row: Mapping[str, object]) -> Sample:
        return sample_from_fields(row, prompt=row.get("prompt"))

    attrs: dict[str, object] = {t.name: _tool_method(t) for t in tools}
    attrs.update(
        _make_env=staticmethod(make_env),
        _to_sample=staticmethod(to_sample or default_sample),
        _prompt_from_env=prompt_from_env,
    )
    return type(name, (TRLEnvironment,), attrs)


def episode_parsed(parsed: Parsed, episode: Episode) -> Parsed:
    """``parsed`` with the page ids the episode retrieved (``Parsed.retrieved``, which VRAG-RL's
    reward reads)."""
    return dataclasses.replace(parsed, retrieved=episode.retrieved())

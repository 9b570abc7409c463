"""evidra's search, crop and zoom environments as tools of verl's multi-turn tool agent loop.

verl's contract (``verl/tools/base_tool.py``, ``verl/experimental/agent_loop/tool_agent_loop.py``;
checked against verl 0.9.1):

* a tool is a ``BaseTool`` subclass named by ``class_name`` in the YAML file that
  ``actor_rollout_ref.rollout.multi_turn.tool_config_path`` points at; verl builds it as
  ``cls(config=<the entry's config dict>, tool_schema=<its OpenAIFunctionToolSchema>)`` and renders
  the schema into the prompt; the model calls it with the chat template's tool-call syntax;
* for every call, the tool agent loop runs ``create(create_kwargs=...)`` (the row's
  ``extra_info.tools_kwargs[<tool name>].create_kwargs``) -> ``execute(instance_id, arguments,
  agent_data=...)`` -> ``release(instance_id)``; ``execute`` returns ``(ToolResponse(text, image),
  step reward, metrics)``; the response becomes a ``tool`` message, its images go to the processor;
* ``calc_reward`` is part of the interface; the 0.9.1 agent loop does not call it.

An instance id therefore lives for one call, while evidra's environments keep state over a whole
trajectory (the pages seen, the image a crop refers to). The episode is kept on verl's
per-trajectory ``agent_data`` object (as verl keeps its own per-trajectory tool selection there);
when a caller passes no ``agent_data`` (a loop that creates one instance per trajectory and reuses
its id), the episode is keyed by instance id and dropped at ``release``. Search and crop share one
episode: the crop tool crops the last image the search tool showed.

Rewards stay with evidra's reward adapter: each call records the episode in
``agent_data.extra_fields`` (``retrieved_pages``, ``evidra_tool_calls``,
``evidra_invalid_tool_calls``), which verl hands to the reward function as ``extra_info``; the
``compute_score`` that ``as_verl_compute_score`` builds reads ``retrieved_pages`` as VRAG-RL's NDCG
does. A step's reward is ``invalid_penalty`` (config, default 0) for an invalid call, else 0;
``calc_reward`` returns the sum of a trajectory's step rewards.

verl stays optional: when it is installed these classes subclass its ``BaseTool`` and answer its
``ToolResponse``; without it they are plain classes with the same methods (and a ``ToolResponse``
of the same fields), so the contract can be exercised without verl.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar
from uuid import uuid4

from evidra.core import imagefiles
from evidra.core.errors import ConfigError, InvalidInputError
from evidra.core.types import ImagePart, Message, Page, Sample, TextPart
from evidra.env.environment import Environment
from evidra.integrations._verl_compat import (
    VERL_AVAILABLE,
    PlainToolResponse,
    ResponseFields,
    ToolSchema,
    _Base,
    _Response,
    openai_schema,
    param_type,
    schema_dict,
    schema_object,
)
from evidra.integrations.samples import sample_from_fields
from evidra.integrations.trl_env import BBOX_TOOL, ENDED, SEARCH_TOOL, ZOOM_TOOL, Episode, ToolSpec

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage

    from evidra.retrieval.interfaces import Retriever

__all__ = [
    "EPISODES_ATTRIBUTE",
    "TOOLS",
    "VERL_AVAILABLE",
    "CropTool",
    "EvidraTool",
    "PlainToolResponse",
    "SearchTool",
    "ZoomTool",
    "openai_schema",
    "tool_config",
    "write_tool_config",
]

EPISODES_ATTRIBUTE = "_evidra_episodes"  # on verl's AgentData: the trajectory's episodes by env
NO_IMAGE_YET = "There is no image to crop yet; call the search tool first."
_WRAPPERS = ("<tool_response>", "</tool_response>")


# environments -------------------------------------------------------------------------------------
@lru_cache(maxsize=8)
def _search_backend(index: str, store: str) -> tuple[Retriever, dict[str, Page]]:
    """The searcher and pages of a tool config, opened once per process (verl's worker)."""
    from evidra.env.search import bm25_searcher

    pages: dict[str, Page] = {}
    if store:
        from evidra.corpus.store import PageStore

        with PageStore.open(store) as opened:
            pages = {p.id: p for p in opened.pages()}
    if index:
        from evidra.retrieval.lifecycle.index_folder import open_searcher
        from evidra.safeio.keys import KeyPolicy

        return open_searcher(index, key_policy=KeyPolicy.file("the tool config's index")), pages
    return bm25_searcher(pages.values()), pages


def _zoom_page(fields: Mapping[str, object], image_root: str) -> Page:

    from evidra.data.loaders._records import inside_folder

    ref = fields.get("image")
    if not isinstance(ref, str) or not ref:
        raise InvalidInputError("the zoom tool needs create_kwargs {'image': PATH} (the image to zoom into)")
    path = Path(ref) if Path(ref).is_absolute() or not image_root else Path(image_root) / ref
    if image_root and not inside_folder(path, Path(image_root)):
        raise InvalidInputError(f"image {ref!r} points outside the zoom tool's image_root {image_root!r}")
    width, height = imagefiles.size(path, f"the zoom tool's image {str(path)!r}")
    return Page(str(fields.get("page_id") or path.stem), str(path), width, height)


# tools --------------------------------------------------------------------------------------------
@dataclass
class _Session:
    """One trajectory's episode in one environment, with its summed step rewards; the lock keeps
    parallel calls of one trajectory (verl's ``max_parallel_calls``) from stepping it at once."""

    episode: Episode
    reward: float = 0.0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


# sessions of callers that pass no agent_data, by "<env kind>:<instance id>" (search and crop
# calls with the same instance id share one)
_BY_INSTANCE: dict[str, _Session] = {}


class EvidraTool(_Base):
    """One evidra action as a verl tool; subclasses fix the action and the environment."""

    spec: ClassVar[ToolSpec]
    env_kind: ClassVar[str]  # the episode this tool acts in ("search" is shared with crop)
    starts_episode: ClassVar[bool] = True  # False: acts only in an episode another tool started
    options: ClassVar[frozenset[str]] = frozenset()  # config keys besides type and invalid_penalty

    @classmethod
    def check_config(cls, config: Mapping[str, object]) -> dict[str, object]:
        """The tool's config, checked: known keys only."""
        known = cls.options | {"type", "invalid_penalty"}
        unknown = sorted(set(config) - known)
        if unknown:
            raise ConfigError(f"{cls.__name__} config: unknown keys {unknown}; known: {sorted(known)}")
        return dict(config)

    def __init__(
        self,
        config: Mapping[str, object] | None = None,
        tool_schema: ToolSchema | Mapping[str, object] | None = None,
    ) -> None:
        config = self.check_config(config or {"type": "native"})
        given_schema = tool_schema if tool_schema is not None else openai_schema(self.spec)
        schema = schema_object(given_schema) if isinstance(given_schema, Mapping) else given_schema
        given = _parameter_names(schema)
        if given != set(self.spec.params):
            raise ConfigError(
                f"{type(self).__name__}: the tool_schema's parameters {sorted(given)} must be "
                f"{sorted(self.spec.params)}, the arguments of {self.spec.name!r}"
            )
        super().__init__(config, schema)
        self.invalid_penalty = _penalty(config.get("invalid_penalty", 0.0))
        self._created: dict[str, dict[str, object]] = {}  # instance id -> the row's create kwargs

    def get_openai_tool_schema(self) -> ToolSchema:
        schema: ToolSchema = self.tool_schema  # set by the base class, verl's (untyped) or the plain one
        return schema

    def make_sample(self, fields: Mapping[str, object]) -> Sample:
        """The episode's sample from the row's create kwargs (``sample_from_fields``)."""
        return sample_from_fields(fields)

    def make_env(self) -> Environment:
        """A fresh environment for one trajectory."""
        raise NotImplementedError(f"{type(self).__name__} starts no episode")

    async def create(
        self,
        instance_id: str | None = None,
        create_kwargs: Mapping[str, object] | None = None,
        **kwargs: object,
    ) -> tuple[str, object]:
        """Remember the row's create kwargs (verl passes them as ``create_kwargs=``; older loops
        spread them as keywords) for the episode this call may start."""
        instance_id = instance_id or str(uuid4())
        self._created[instance_id] = {**kwargs, **dict(create_kwargs or {})}
        return instance_id, _Response()

    def _store(self, instance_id: str, agent_data: object) -> tuple[dict[str, _Session], str]:
        """Where the trajectory's session lives: on verl's ``agent_data`` when given, else by
        instance id."""
        if agent_data is None:
            return _BY_INSTANCE, f"{self.env_kind}:{instance_id}"
        if getattr(agent_data, EPISODES_ATTRIBUTE, None) is None:
            setattr(agent_data, EPISODES_ATTRIBUTE, {})
        return getattr(agent_data, EPISODES_ATTRIBUTE), self.env_kind

    def _session(self, instance_id: str, agent_data: object) -> _Session | None:
        """The trajectory's session, started here (reset with the row's sample) when this tool
        starts episodes and none is running."""
        store, key = self._store(instance_id, agent_data)
        if key not in store and self.starts_episode:
            sample, env = self.make_sample(self._created.get(instance_id, {})), self.make_env()
            store[key] = _Session(Episode(sample, env, list(env.reset(sample))))
        return store.get(key)

    def _action(self, parameters: Mapping[str, object]) -> str | None:
        """The action text of a call, or None when its arguments do not fit the schema."""
        args = {}
        for name, (kind, _) in self.spec.params.items():
            value = parameters.get(name)
            if value is None or (param_type(kind) == "array" and not isinstance(value, (list, tuple))):
                return None
            args[name] = value
        return self.spec.action(**args)

    async def execute(
        self, instance_id: str, parameters: Mapping[str, object], **kwargs: object
    ) -> tuple[object, float, dict[str, bool]]:
        """Play the call as the environment's action; the observation is the tool's response."""
        agent_data = kwargs.get("agent_data")
        session = self._session(instance_id, agent_data)
        action = self._action(parameters or {})
        images: list[PILImage]
        if action is None:
            text = f"Invalid call of {self.name}: expected arguments {_arguments(self.spec)}."
            images, invalid, done = [], True, False
        elif session is None:
            images, text, invalid, done = [], NO_IMAGE_YET, True, False
        else:
            async with session.lock:
                text, images, invalid, done = await self._step(session.episode, action)
        reward = self.invalid_penalty if invalid else 0.0
        if session is not None:
            session.reward += reward
        _record(agent_data, session.episode if session is not None else None, invalid)
        # verl's ToolResponse refuses image=None: absent fields are left out
        fields: ResponseFields = {}
        if text:
            fields["text"] = text
        if images:
            fields["image"] = images
        return _Response(**fields), reward, {"invalid": invalid, "done": done}

    @staticmethod
    async def _step(episode: Episode, action: str) -> tuple[str, list[PILImage], bool, bool]:
        """Text, images, invalid and done of one action (searches and crops run in a thread)."""
        if episode.done:
            return ENDED, [], False, True
        result = await asyncio.to_thread(episode.step, action)
        text, images = _observation(result.observation)
        return text or (ENDED if result.done else ""), images, result.info.invalid, result.done

    async def calc_reward(self, instance_id: str, **kwargs: object) -> float:
        """The summed step rewards of the trajectory's episode so far (0 before it starts)."""
        store, key = self._store(instance_id, kwargs.get("agent_data"))
        return store[key].reward if key in store else 0.0

    async def release(self, instance_id: str, **kwargs: object) -> None:
        """Forget the call's instance; a session kept by instance id goes with it."""
        self._created.pop(instance_id, None)
        _BY_INSTANCE.pop(f"{self.env_kind}:{instance_id}", None)


def _parameter_names(schema: ToolSchema) -> set[str]:
    """The parameters a tool schema declares (``function.parameters.properties``); none where it
    holds no such mapping."""
    function = schema_dict(schema).get("function")
    parameters = function.get("parameters", {}) if isinstance(function, Mapping) else {}
    properties = parameters.get("properties", {}) if isinstance(parameters, Mapping) else {}
    return {str(name) for name in properties} if isinstance(properties, Mapping) else set()


def _penalty(value: object) -> float:
    """The config's ``invalid_penalty`` as a number, or one line naming it."""
    if isinstance(value, (int, float, str)):
        try:
            return float(value)
        except ValueError:
            pass
    raise ConfigError(f"invalid_penalty must be a number, got {value!r}")


def _arguments(spec: ToolSpec) -> str:
    return ", ".join(f"{name} ({param_type(kind)})" for name, (kind, _) in spec.params.items())


def _observation(messages: Sequence[Message]) -> tuple[str, list[PILImage]]:
    """An observation as verl's tool response: its text joined, its images as PIL images."""
    from evidra.models.chat import load_image

    # ZoomEnv wraps its image in CAVE's <tool_response> text; verl's chat template wraps tool messages
    texts = [
        p.text for m in messages for p in m.content if isinstance(p, TextPart) and p.text not in _WRAPPERS
    ]
    images = [load_image(p) for m in messages for p in m.content if isinstance(p, ImagePart)]
    return "".join(texts), images


def _record(agent_data: object, episode: Episode | None, invalid: bool) -> None:
    """The call in verl's per-trajectory ``extra_fields`` (the reward function's ``extra_info``):
    the pages retrieved so far, the evidra tool calls and the invalid ones among them."""
    fields = getattr(agent_data, "extra_fields", None)
    if not isinstance(fields, dict):
        return
    if episode is not None or "retrieved_pages" not in fields:
        fields["retrieved_pages"] = list(episode.retrieved()) if episode is not None else []
    fields["evidra_tool_calls"] = int(fields.get("evidra_tool_calls", 0)) + 1
    fields["evidra_invalid_tool_calls"] = int(fields.get("evidra_invalid_tool_calls", 0)) + int(invalid)


class SearchTool(EvidraTool):
    """VRAG-RL's ``<search>``: the best page not shown yet in this trajectory, as an image.

    Config: ``index`` (an ``evidra index build`` directory or a serve-index URL) and/or ``store``
    (a page store: its pages' images; with no ``index``, BM25 over their text layer), ``top_k``,
    ``max_turns`` (calls of search and crop; the one that reaches it ends the episode, VRAG-RL's 5).
    """

    spec = SEARCH_TOOL
    env_kind = "search"
    options = frozenset({"index", "store", "top_k", "max_turns"})

    @classmethod
    def check_config(cls, config: Mapping[str, object]) -> dict[str, object]:
        checked = super().check_config(config)
        if not (checked.get("index") or checked.get("store")):
            raise ConfigError("SearchTool config needs index (a directory or serve-index URL) or store")
        if str(checked.get("index", "")).startswith(("http://", "https://")) and not checked.get("store"):
            raise ConfigError(
                "SearchTool config names a serve-index URL as index; add store (the page store the "
                "service indexes), whose pages the episodes open"
            )
        return checked

    def make_env(self) -> Environment:
        from evidra.env.search import SearchEnv

        cfg = self.config
        searcher, pages = _search_backend(str(cfg.get("index") or ""), str(cfg.get("store") or ""))
        return SearchEnv(
            searcher, pages, top_k=int(cfg.get("top_k", 5)), max_turns=int(cfg.get("max_turns", 5))
        )


class CropTool(EvidraTool):
    """VRAG-RL's ``<bbox>``: crop and zoom a region of the last image the search tool showed."""

    spec = BBOX_TOOL
    env_kind = "search"
    starts_episode = False


class ZoomTool(EvidraTool):
    """CAVE's zoom: a region of the row's image (``create_kwargs: {"image": PATH}``), enlarged.

    Config: ``image_root`` (relative image paths resolve in it and must stay inside it),
    ``max_rounds`` (CAVE's round limit, 4).
    """

    spec = ZOOM_TOOL
    env_kind = "zoom"
    options = frozenset({"image_root", "max_rounds"})

    def make_sample(self, fields: Mapping[str, object]) -> Sample:
        page = _zoom_page(fields, str(self.config.get("image_root") or ""))
        return replace(sample_from_fields(fields), pages=(page,))

    def make_env(self) -> Environment:
        from evidra.env.zoom import ZoomEnv
        from evidra.methods.cave.paradigm import ZoomAgent

        return ZoomEnv(ZoomAgent(), max_rounds=int(self.config.get("max_rounds", 4)))


TOOLS: dict[str, type[EvidraTool]] = {"search": SearchTool, "crop": CropTool, "zoom": ZoomTool}


def tool_config(tools: Mapping[str, Mapping[str, object]]) -> dict[str, list[dict[str, object]]]:
    """The YAML document verl's ``tool_config_path`` reads, for ``{tool: config}`` (tool one of
    search, crop, zoom); each config is checked as the tool will check it.

    >>> entry = tool_config({"crop": {}})["tools"][0]
    >>> entry["class_name"], entry["config"], entry["tool_schema"]["function"]["name"]
    ('evidra.integrations.verl_tools.CropTool', {'type': 'native'}, 'bbox')
    """
    entries: list[dict[str, object]] = []
    for name, options in tools.items():
        if name not in TOOLS:
            raise ConfigError(f"unknown evidra verl tool {name!r}; known: {sorted(TOOLS)}")
        cls = TOOLS[name]
        config = cls.check_config({"type": "native", **dict(options)})
        entries.append(
            {
                "class_name": f"{cls.__module__}.{cls.__qualname__}",
                "config": config,
                "tool_schema": openai_schema(cls.spec),
            }
        )
    return {"tools": entries}


def write_tool_config(path: str | Path, tools: Mapping[str, Mapping[str, object]]) -> Path:
    """Write ``tool_config(tools)`` as YAML at ``path`` (for ``multi_turn.tool_config_path``)."""
    import yaml

    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(yaml.safe_dump(tool_config(tools), sort_keys=False), encoding="utf-8")
    return out

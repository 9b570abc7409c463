"""verl's tool base class, response and schema types when verl is installed, plain stand-ins with
the same fields and methods when it is not (``evidra.integrations.verl_tools`` builds on these).

verl is imported here, when this module is, never by ``import evidra`` or ``evidra.integrations``.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypedDict, Unpack

from evidra.core.errors import ConfigError
from evidra.integrations.trl_env import ToolSpec

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage

VERL_AVAILABLE = importlib.util.find_spec("verl") is not None
_TYPES: dict[object, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


@dataclass(frozen=True)
class PlainToolResponse:
    """verl's ``ToolResponse`` fields, for use without verl."""

    text: str | None = None
    image: list[PILImage] | None = None
    video: list[object] | None = None

    def is_empty(self) -> bool:
        return not self.text and not self.image and not self.video


class ToolSchema(Protocol):
    """What evidra reads of a tool schema: verl's pydantic ``OpenAIFunctionToolSchema``, or
    ``PlainToolSchema`` without verl."""

    def model_dump(self, *, exclude_unset: bool = ..., exclude_none: bool = ...) -> Mapping[str, object]: ...


class ResponseFields(TypedDict, total=False):
    """A tool response's fields; an absent one is left out (verl's ``ToolResponse`` refuses None)."""

    text: str
    image: list[PILImage]


class MakeResponse(Protocol):
    """verl's ``ToolResponse`` class, or ``PlainToolResponse`` without verl."""

    def __call__(self, **fields: Unpack[ResponseFields]) -> object: ...


class PlainToolSchema:
    """An OpenAI function tool schema offering what verl's loop reads of its pydantic one."""

    def __init__(self, schema: Mapping[str, object]) -> None:
        _check_schema(schema)  # one ConfigError line unless it is a function tool schema
        self.schema = dict(schema)
        function = schema["function"]
        assert isinstance(function, Mapping)  # _check_schema
        self.name = str(function["name"])

    def model_dump(self, *, exclude_unset: bool = False, exclude_none: bool = False) -> dict[str, object]:
        return dict(self.schema)


class PlainBaseTool:
    """``BaseTool``'s constructor when verl is absent (verl's also prints the schema)."""

    def __init__(self, config: dict[str, object], tool_schema: PlainToolSchema) -> None:
        self.config = config
        self.tool_schema = tool_schema
        self.name = tool_schema.name


if VERL_AVAILABLE:
    from verl.tools.base_tool import BaseTool
    from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

    _Base: Any = BaseTool  # a base class chosen at import: mypy reads a variable base only as Any
    _Response: MakeResponse = ToolResponse
else:
    _Base, _Response = PlainBaseTool, PlainToolResponse


def param_type(kind: object) -> str:
    """The JSON schema type of a ``ToolSpec`` parameter type.

    >>> param_type(str), param_type(list[int])
    ('string', 'array')
    """
    return _TYPES.get(kind, "array")


def _param_schema(kind: object, description: str) -> dict[str, object]:
    if kind in _TYPES:
        return {"type": _TYPES[kind], "description": description}
    item = getattr(kind, "__args__", (int,))[0]
    return {"type": "array", "description": description, "items": {"type": _TYPES.get(item, "number")}}


def openai_schema(spec: ToolSpec) -> dict[str, object]:
    """The OpenAI function tool schema of an evidra tool (what verl renders into the prompt).

    >>> from evidra.integrations.trl_env import SEARCH_TOOL
    >>> openai_schema(SEARCH_TOOL)["function"]["parameters"]["required"]
    ['query']
    """
    properties = {name: _param_schema(kind, doc) for name, (kind, doc) in spec.params.items()}
    parameters = {"type": "object", "properties": properties, "required": list(spec.params)}
    return {
        "type": "function",
        "function": {"name": spec.name, "description": spec.description, "parameters": parameters},
    }


_HOW = "write it as evidra.integrations.verl_tools.openai_schema(Tool.spec) does"


def schema_object(schema: Mapping[str, object]) -> ToolSchema:
    """verl's ``OpenAIFunctionToolSchema`` of a schema dict (a ``PlainToolSchema`` without verl);
    a ``ConfigError`` in one line, with verl or without, where the dict is not such a schema."""
    _check_schema(schema)
    if not VERL_AVAILABLE:
        return PlainToolSchema(schema)
    from pydantic import ValidationError

    try:
        return OpenAIFunctionToolSchema.model_validate(dict(schema))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise ConfigError(
            f"tool_schema is not a function tool schema verl reads: {where}: {first['msg']} "
            f"({exc.error_count()} problem(s)); {_HOW}"
        ) from None


def _check_schema(schema: Mapping[str, object]) -> None:
    """What verl's ``OpenAIFunctionToolSchema`` requires of the parts evidra reads."""
    function = schema.get("function")
    if not isinstance(schema.get("type"), str) or not isinstance(function, Mapping):
        raise ConfigError(f"tool_schema needs a string 'type' and a 'function' object; {_HOW}")
    if not isinstance(function.get("name"), str) or not isinstance(function.get("description"), str):
        raise ConfigError(f"tool_schema needs a string 'name' and 'description' in its 'function'; {_HOW}")
    parameters = function.get("parameters", {})
    properties = parameters.get("properties", {}) if isinstance(parameters, Mapping) else None
    if not isinstance(properties, Mapping) or not all(
        isinstance(p, Mapping) and isinstance(p.get("type"), str) for p in properties.values()
    ):
        raise ConfigError(
            "tool_schema: function.parameters.properties must map each parameter to an object with a "
            f"string 'type'; {_HOW}"
        )


def schema_dict(schema: ToolSchema) -> dict[str, object]:
    return dict(schema.model_dump(exclude_unset=True, exclude_none=True))

"""Function tools and tool choice (OpenAI GA): their wire spellings, checked once at the edge.

`session.tools` / `response.tools` are `[{type: "function", name, description, parameters}]`,
`tool_choice` is `"auto"`, `"none"`, `"required"` or `{type: "function", name}`. Past the
codec only `FunctionTool` and `ToolChoice` exist, already checked.

Rules (each an `InvalidInput` naming the field):
- A tool's `type` is `function` (absent: `function`); another type is `invalid_value`.
- A name matches `^[a-zA-Z0-9_-]{1,64}$` (OpenAI's) and no two tools of one list share one
  (`invalid_value`, on the later one's `name`).
- `parameters` is a JSON schema (Draft 2020-12's metaschema) whose top level is
  `type: "object"`, as OpenAI requires; otherwise `invalid_function_parameters`, OpenAI's code,
  with its message ("Invalid schema for function 'NAME': ..."). Absent, it is the empty object
  schema (a function without arguments).
- A `tool_choice` string is one of the three modes, an object is `{type: "function", name}`
  (`invalid_value`). Whether it fits the tools (`"required"` needs one, a named function must
  be among them) depends on what the session already holds: `choice_problem` says, and the
  core asks it once the tools in force are known.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Final, Literal

import msgspec
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from msgspec import UNSET, Meta

from .errors import InvalidInput

__all__ = [
    "MAX_TOOLS",
    "FunctionTool",
    "ToolChoice",
    "ToolChoiceFunction",
    "ToolMode",
    "WireTool",
    "WireToolChoice",
    "WireTools",
    "choice_problem",
    "normalize_tool_choice",
    "normalize_tools",
]

MAX_TOOLS: Final = 128  # OpenAI's limit on one request's tools
_NAME: Final = re.compile(r"[a-zA-Z0-9_-]{1,64}")
_EMPTY_SCHEMA: Final[dict[str, Any]] = {"type": "object", "properties": {}}

ToolMode = Literal["auto", "none", "required"]
_MODES: Final[tuple[ToolMode, ...]] = ("auto", "none", "required")


class FunctionTool(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="function"):
    """A function the model may call; `parameters` is a checked JSON schema of an object."""

    name: str
    description: str | None = None
    parameters: dict[str, Any] = msgspec.field(default_factory=lambda: dict(_EMPTY_SCHEMA))


class ToolChoiceFunction(
    msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="function"
):
    """`{type: "function", name}`: the reply is a call of exactly this function."""

    name: str


ToolChoice = ToolMode | ToolChoiceFunction


# --- the wire ---------------------------------------------------------------------------


class WireTool(msgspec.Struct, frozen=True, kw_only=True):
    # Plain strs and Any: a bad type, name or schema is named in a precise error rather than
    # a generic msgspec one.
    type: str = "function"
    name: str
    description: str | None = None
    parameters: Any = UNSET


class WireToolChoiceObject(msgspec.Struct, frozen=True, kw_only=True):
    type: str
    name: str | None = None


WireToolChoice = str | WireToolChoiceObject
WireTools = Annotated[tuple[WireTool, ...], Meta(max_length=MAX_TOOLS)]


def normalize_tools(wire: tuple[WireTool, ...], param: str) -> tuple[FunctionTool, ...]:
    tools: list[FunctionTool] = []
    seen: set[str] = set()
    for index, tool in enumerate(wire):
        at = f"{param}[{index}]"
        if tool.type != "function":
            raise InvalidInput(
                "invalid_value",
                f"Unsupported tool type '{tool.type[:64]}'; only 'function' tools are supported.",
                f"{at}.type",
            )
        if _NAME.fullmatch(tool.name) is None:
            raise InvalidInput(
                "invalid_value",
                f"Invalid '{at}.name': string does not match pattern. Expected a string that "
                "matches the pattern '^[a-zA-Z0-9_-]{1,64}$'.",
                f"{at}.name",
            )
        if tool.name in seen:
            raise InvalidInput(
                "invalid_value", f"Duplicate function name '{tool.name}'.", f"{at}.name"
            )
        seen.add(tool.name)
        tools.append(
            FunctionTool(
                name=tool.name,
                description=tool.description,
                parameters=_schema(tool.name, tool.parameters, f"{at}.parameters"),
            )
        )
    return tuple(tools)


def _schema(name: str, schema: Any, param: str) -> dict[str, Any]:
    if schema is UNSET or schema is None:
        return dict(_EMPTY_SCHEMA)
    if not isinstance(schema, dict):
        problem = f"{type(schema).__name__} is not a JSON schema object."
    else:
        try:
            Draft202012Validator.check_schema(schema)
            problem = None
        except SchemaError as error:
            problem = error.message[:200]
        if problem is None and schema.get("type") != "object":
            got = msgspec.json.encode(schema.get("type")).decode()[:64]
            problem = f"schema must be a JSON Schema of 'type: \"object\"', got 'type: {got}'."
    if problem is not None:
        raise InvalidInput(
            "invalid_function_parameters",
            f"Invalid schema for function '{name}': {problem}",
            param,
        )
    return dict(schema)


def normalize_tool_choice(wire: WireToolChoice, param: str) -> ToolChoice:
    if isinstance(wire, str):
        for mode in _MODES:
            if wire == mode:
                return mode
        raise InvalidInput(
            "invalid_value",
            f"Unsupported tool_choice '{wire[:64]}'; use 'auto', 'none', 'required' or "
            "{'type': 'function', 'name': ...}.",
            param,
        )
    if wire.type != "function":
        raise InvalidInput(
            "invalid_value",
            f"Unsupported tool_choice type '{wire.type[:64]}'; only 'function' is supported.",
            f"{param}.type",
        )
    if wire.name is None:
        raise InvalidInput(
            "missing_required_parameter",
            f"Missing required parameter: '{param}.name'.",
            f"{param}.name",
        )
    return ToolChoiceFunction(name=wire.name)


def choice_problem(tools: tuple[FunctionTool, ...], choice: ToolChoice) -> str | None:
    """Why `choice` cannot go with `tools` (None: it can)."""
    if choice == "required" and not tools:
        return "Tool choice 'required' must be specified with at least one tool in 'tools'."
    if isinstance(choice, ToolChoiceFunction) and all(t.name != choice.name for t in tools):
        return f"Tool choice 'function' with name '{choice.name[:64]}' not found in 'tools'."
    return None

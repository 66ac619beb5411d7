"""Function tools, tool choice and call items at the edge (orchestrator/protocol/tools.py):
each rule's precise error, and the shapes the openai SDK sends and reads."""

from __future__ import annotations

import json
from typing import Any

import pydantic
import pytest

from orchestrator.protocol.client import ConversationItemCreate, ResponseCreate, SessionUpdate
from orchestrator.protocol.codec import ServerEventEncoder, decode_client_event
from orchestrator.protocol.errors import ProtocolError
from orchestrator.protocol.items import FunctionCallItem, FunctionCallOutputItem
from orchestrator.protocol.server import SessionCreated
from orchestrator.protocol.session_config import SessionConfig
from orchestrator.protocol.tools import FunctionTool, ToolChoiceFunction

MISSING = "missing_required_parameter"
WEATHER: dict[str, Any] = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def _session(**session: Any) -> SessionUpdate | ProtocolError:
    event = decode_client_event(
        json.dumps({"type": "session.update", "event_id": "e1", "session": session})
    )
    assert isinstance(event, SessionUpdate | ProtocolError)
    return event


def _response(**response: Any) -> ResponseCreate | ProtocolError:
    event = decode_client_event(
        json.dumps({"type": "response.create", "event_id": "e1", "response": response})
    )
    assert isinstance(event, ResponseCreate | ProtocolError)
    return event


def test_session_tools_and_tool_choice_parse_to_checked_values() -> None:
    event = _session(tools=[WEATHER], tool_choice={"type": "function", "name": "get_weather"})
    assert isinstance(event, SessionUpdate)
    assert event.session.tools == (
        FunctionTool(
            name="get_weather",
            description="The weather in a city.",
            parameters=WEATHER["parameters"],
        ),
    )
    assert event.session.tool_choice == ToolChoiceFunction(name="get_weather")
    for mode in ("auto", "none", "required"):
        parsed = _session(tool_choice=mode)
        assert isinstance(parsed, SessionUpdate) and parsed.session.tool_choice == mode


def test_a_tool_without_type_or_parameters_is_a_function_of_no_arguments() -> None:
    event = _session(tools=[{"name": "ping"}])
    assert isinstance(event, SessionUpdate) and event.session.tools is not None
    [tool] = event.session.tools
    assert tool.parameters == {"type": "object", "properties": {}}


def test_response_create_takes_tools_and_tool_choice_as_overrides() -> None:
    event = _response(tools=[WEATHER], tool_choice="required")
    assert isinstance(event, ResponseCreate) and event.response is not None
    assert [t.name for t in event.response.tools or ()] == ["get_weather"]
    assert event.response.tool_choice == "required"
    plain = _response()
    assert isinstance(plain, ResponseCreate) and plain.response is not None
    assert plain.response.tools is None and plain.response.tool_choice is None


BAD_SCHEMAS = [
    {"type": 5},  # not a schema
    {"type": "object", "properties": []},  # not a schema
    {"type": "string"},  # a schema, but not of an object
    {"properties": {"a": {"type": "string"}}},  # no top-level type
    [],  # not an object at all
    "object",
]


@pytest.mark.parametrize("schema", BAD_SCHEMAS)
@pytest.mark.parametrize("where", ["session", "response"])
def test_parameters_that_are_not_an_object_json_schema_are_invalid_function_parameters(
    schema: Any, where: str
) -> None:
    tool = {**WEATHER, "parameters": schema}
    event = _session(tools=[tool]) if where == "session" else _response(tools=[tool])
    assert isinstance(event, ProtocolError)
    assert event.code == "invalid_function_parameters"
    assert event.param == f"{where}.tools[0].parameters"
    assert event.message.startswith("Invalid schema for function 'get_weather': ")
    assert event.event_id == "e1"


@pytest.mark.parametrize(
    ("tools", "code", "param"),
    [
        ([{**WEATHER, "name": "get weather"}], "invalid_value", "session.tools[0].name"),
        ([{**WEATHER, "name": ""}], "invalid_value", "session.tools[0].name"),
        ([{**WEATHER, "name": "x" * 65}], "invalid_value", "session.tools[0].name"),
        ([{**WEATHER, "name": "get.weather"}], "invalid_value", "session.tools[0].name"),
        ([WEATHER, {**WEATHER, "description": "again"}], "invalid_value", "session.tools[1].name"),
        ([{**WEATHER, "type": "mcp"}], "invalid_value", "session.tools[0].type"),
        ([{**WEATHER, "description": 5}], "invalid_value", "session.tools[0].description"),
        ([{"type": "function"}], "missing_required_parameter", "session.tools[0].name"),
        ([{"name": f"f{i}"} for i in range(129)], "invalid_value", "session.tools"),
        ({"name": "f"}, "invalid_value", "session.tools"),
    ],
)
def test_every_bad_tool_definition_is_refused_naming_its_field(
    tools: Any, code: str, param: str
) -> None:
    event = _session(tools=tools)
    assert isinstance(event, ProtocolError)
    assert (event.code, event.param) == (code, param), event
    assert event.event_id == "e1"


@pytest.mark.parametrize(
    ("choice", "code", "param"),
    [
        ("sometimes", "invalid_value", "session.tool_choice"),
        ({"type": "mcp", "server_label": "x"}, "invalid_value", "session.tool_choice.type"),
        ({"type": "function"}, "missing_required_parameter", "session.tool_choice.name"),
        (5, "invalid_value", "session.tool_choice"),
    ],
)
def test_a_bad_tool_choice_is_refused_naming_its_field(choice: Any, code: str, param: str) -> None:
    event = _session(tool_choice=choice)
    assert isinstance(event, ProtocolError)
    assert (event.code, event.param) == (code, param)


def test_call_items_parse_and_an_item_without_type_stays_a_message() -> None:
    call = decode_client_event(
        json.dumps(
            {
                "type": "conversation.item.create",
                "item": {"type": "function_call", "name": "f", "arguments": "{}", "call_id": "c1"},
            }
        )
    )
    assert isinstance(call, ConversationItemCreate)
    assert call.item == FunctionCallItem(call_id="c1", name="f", arguments="{}")
    answer = decode_client_event(
        json.dumps(
            {
                "type": "conversation.item.create",
                "item": {"type": "function_call_output", "call_id": "c1", "output": "ok"},
            }
        )
    )
    assert isinstance(answer, ConversationItemCreate)
    assert answer.item == FunctionCallOutputItem(call_id="c1", output="ok")


@pytest.mark.parametrize(
    ("item", "code", "param"),
    [
        ({"type": "function_call", "arguments": "{}"}, MISSING, "item.name"),
        ({"type": "function_call", "name": "f"}, MISSING, "item.arguments"),
        ({"type": "function_call_output", "output": "x"}, MISSING, "item.call_id"),
        ({"type": "function_call_output", "call_id": "c"}, MISSING, "item.output"),
        (
            {"type": "function_call_output", "call_id": 5, "output": "x"},
            "invalid_value",
            "item.call_id",
        ),
        ({"type": "mcp_call", "name": "f"}, "invalid_value", "item.type"),
        ({"type": "message", "content": []}, MISSING, "item.role"),
        ({"type": "message", "role": "user"}, MISSING, "item.content"),
    ],
)
def test_a_bad_item_is_refused_naming_its_field(item: Any, code: str, param: str) -> None:
    event = decode_client_event(json.dumps({"type": "conversation.item.create", "item": item}))
    assert isinstance(event, ProtocolError)
    assert (event.code, event.param) == (code, param), event


def test_the_sdks_own_tool_events_decode() -> None:
    from openai._utils import maybe_transform
    from openai.types.realtime import RealtimeClientEventParam

    events: list[dict[str, Any]] = [
        {
            "type": "session.update",
            "session": {"type": "realtime", "tools": [WEATHER], "tool_choice": "auto"},
        },
        {
            "type": "response.create",
            "response": {"tool_choice": {"type": "function", "name": "get_weather"}},
        },
        {
            "type": "conversation.item.create",
            "item": {"type": "function_call_output", "call_id": "call_1", "output": "{}"},
        },
        {
            "type": "conversation.item.create",
            "item": {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
        },
    ]
    for event in events:
        raw = json.dumps(maybe_transform(event, RealtimeClientEventParam))
        assert not isinstance(decode_client_event(raw), ProtocolError), raw


def test_a_session_with_tools_renders_as_the_sdk_reads_it() -> None:
    from openai.types.realtime import RealtimeServerEvent

    config = SessionConfig(
        tools=(FunctionTool(name="get_weather", parameters=WEATHER["parameters"]),),
        tool_choice=ToolChoiceFunction(name="get_weather"),
    )
    event = SessionCreated(session=config.to_session_object(session_id="s", model="m"))
    raw = json.loads(ServerEventEncoder().encode(event))
    parsed = pydantic.TypeAdapter(RealtimeServerEvent).validate_python(raw)
    assert parsed.type == "session.created"
    assert raw["session"]["tools"][0]["name"] == "get_weather"
    assert raw["session"]["tool_choice"] == {"type": "function", "name": "get_weather"}

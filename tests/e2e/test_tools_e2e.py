"""Function calling end to end (docs/protocol.md "Function calling"): the real server, the real
tritonserver, the real models calling tools (SmolLM2 on the cascade, tiny Qwen3-Omni), over a
real WebSocket and through the `openai` SDK's own client.

What a user would notice:
- with `tool_choice` "required" or a named function the reply is one `function_call` whose
  streamed arguments add up to its `arguments`, which validate against the function's
  `parameters`, and nothing of the call is spoken;
- the client's `function_call_output` and a `response.create` bring a spoken answer;
- every event validates against the `openai` SDK's models;
- a call cancelled, or barged in on by speech, before its arguments are complete ends once and
  never reaches the history.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import numpy as np
import pydantic
from openai.types.realtime import RealtimeServerEvent

from orchestrator.service.serve import BackgroundServer
from tests.e2e.realtime_client import (
    RawSession,
    flite_speech,
    raw_session,
    sdk_events_until_done,
    sdk_realtime,
    silence,
)

WEATHER: dict[str, Any] = {
    "type": "function",
    "name": "get_weather",
    "description": "Get the current weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "The city, e.g. Paris"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        },
        "required": ["city"],
        "additionalProperties": False,
    },
}
QUESTION = "What is the weather like in Paris right now?"
# A call whose arguments take seconds to decode (at least 300 characters), so that a cancel
# after its first delta surely lands mid-arguments.
# Random (tiny) weights never end a string by themselves: bounded strings let the grammar end
# them, so the call completes within max_output_tokens.
BOUNDED_WEATHER: dict[str, Any] = {
    **WEATHER,
    "parameters": {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 12},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        },
        "required": ["city"],
        "additionalProperties": False,
    },
}
NOTE: dict[str, Any] = {
    "type": "function",
    "name": "save_note",
    "description": "Save a long note for the user.",
    "parameters": {
        "type": "object",
        "properties": {"text": {"type": "string", "minLength": 300}},
        "required": ["text"],
    },
}

_SDK: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(RealtimeServerEvent)


def _configure(
    session: RawSession, tool_choice: Any, tools: tuple[dict[str, Any], ...] = (WEATHER,)
) -> None:
    session.send(
        {
            "type": "session.update",
            "session": {
                "type": "realtime",
                "output_modalities": ["audio"],
                "max_output_tokens": 200,
                "tools": list(tools),
                "tool_choice": tool_choice,
                "audio": {"input": {"turn_detection": None}},
            },
        }
    )
    updated = session.until("session.updated", timeout_s=10)
    assert updated["session"]["tools"] == list(tools)
    assert updated["session"]["tool_choice"] == tool_choice


def _ask(session: RawSession, text: str, response: dict[str, Any] | None = None) -> str:
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    session.send({"type": "conversation.item.create", "item": item})
    create: dict[str, Any] = {"type": "response.create"}
    if response is not None:
        create["response"] = response
    session.send(create)
    return str(session.until("response.created", timeout_s=30)["response"]["id"])


def _response_events(session: RawSession, rid: str, timeout_s: float = 120) -> list[dict[str, Any]]:
    done = session.until("response.done", timeout_s=timeout_s)
    assert done["response"]["id"] == rid
    start = next(i for i, e in enumerate(session.events) if e.get("response", {}).get("id") == rid)
    return session.events[start:]


def _the_call(events: list[dict[str, Any]], tool: dict[str, Any] = WEATHER) -> dict[str, Any]:
    """The response's one function call, checked as a client would read it."""
    for event in events:
        _SDK.validate_python(event)
    added = [
        e
        for e in events
        if e["type"] == "response.output_item.added" and e["item"]["type"] == "function_call"
    ]
    assert len(added) == 1, [e["type"] for e in events]
    item = added[0]["item"]
    deltas = [e for e in events if e["type"] == "response.function_call_arguments.delta"]
    [done] = [e for e in events if e["type"] == "response.function_call_arguments.done"]
    assert all(d["item_id"] == item["id"] and d["call_id"] == item["call_id"] for d in deltas)
    assert "".join(d["delta"] for d in deltas) == done["arguments"]
    assert done["name"] == "get_weather" == item["name"]
    # Nothing of the call is spoken or shown as text.
    spoken = [e for e in events if e["type"].startswith("response.output_audio")]
    assert not [e for e in spoken if e["type"] == "response.output_audio.delta"], (
        "a call was spoken"
    )
    final = events[-1]["response"]
    assert final["status"] == "completed", final.get("status_details")
    calls = [o for o in final["output"] if o["type"] == "function_call"]
    assert len(calls) == 1 and calls[0]["arguments"] == done["arguments"]
    arguments = json.loads(done["arguments"])
    jsonschema.validate(arguments, tool["parameters"])
    return {"call_id": item["call_id"], "item_id": item["id"], "arguments": arguments}


def _assert_the_cut_call_is_gone(session: RawSession, done: dict[str, Any]) -> None:
    """After a call's terminal: no piece of it comes later (rule 2), it had one terminal
    (rule 3), and the history holds no call (a cut call never reaches it)."""
    session.drain(0.5)
    after = session.events[session.events.index(done) + 1 :]
    assert not [e for e in after if e["type"].startswith("response.function_call")]
    assert [e["type"] for e in session.events].count("response.done") == 1
    session.send({"type": "conversation.context.retrieve"})
    context = session.until("conversation.context", timeout_s=10)
    assert "function_call" not in [item.get("type") for item in context["items"]]


def test_a_required_call_validates_and_its_output_brings_a_spoken_answer(
    realtime_server: BackgroundServer,
) -> None:
    with raw_session(realtime_server.url) as session:
        _configure(session, "required")
        rid = _ask(session, QUESTION)
        call = _the_call(_response_events(session, rid))
        output = {"temperature": 18, "unit": "celsius", "sky": "sunny"}
        session.send(
            {
                "type": "conversation.item.create",
                "item": {
                    "type": "function_call_output",
                    "call_id": call["call_id"],
                    "output": json.dumps(output),
                },
            }
        )
        added = session.until("conversation.item.added", timeout_s=10)
        assert added["item"]["type"] == "function_call_output"
        session.send({"type": "response.create", "response": {"tool_choice": "none"}})
        answer_id = str(session.until("response.created", timeout_s=30)["response"]["id"])
        events = _response_events(session, answer_id)
        for event in events:
            _SDK.validate_python(event)
        assert events[-1]["response"]["status"] == "completed"
        audio = [e for e in events if e["type"] == "response.output_audio.delta"]
        assert audio, "no spoken answer after the function's output"
        assert not [e for e in events if e["type"] == "response.function_call_arguments.delta"]
        # The history holds the call and its output, in their turn.
        session.send({"type": "conversation.context.retrieve"})
        context = session.until("conversation.context", timeout_s=10)
        kinds = [item.get("type") for item in context["items"]]
        assert "function_call" in kinds and "function_call_output" in kinds
        assert kinds.index("function_call") < kinds.index("function_call_output")


def test_a_named_function_is_called_through_the_openai_sdk(
    realtime_server: BackgroundServer,
) -> None:
    with sdk_realtime(realtime_server.http_url) as conn:
        conn.session.update(
            session={
                "type": "realtime",
                "output_modalities": ["text"],
                "tools": [WEATHER],  # type: ignore[list-item]
                "tool_choice": {"type": "function", "name": "get_weather"},
                "audio": {"input": {"turn_detection": None}},
            }
        )
        conn.conversation.item.create(
            item={
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "Is it raining in Oslo?"}],
            }
        )
        conn.response.create()
        events = sdk_events_until_done(conn)
    done = events[-1]
    assert done.response.status == "completed"
    calls = [o for o in done.response.output if o.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather"
    jsonschema.validate(json.loads(calls[0].arguments), WEATHER["parameters"])
    kinds = [e.type for e in events]
    assert "response.function_call_arguments.delta" in kinds
    assert "response.function_call_arguments.done" in kinds


def test_qwen3_omni_makes_a_required_call_that_validates(
    omni_realtime_server: BackgroundServer,
) -> None:
    with raw_session(omni_realtime_server.url) as session:
        _configure(session, {"type": "function", "name": "get_weather"}, (BOUNDED_WEATHER,))
        rid = _ask(session, QUESTION)
        _the_call(_response_events(session, rid), BOUNDED_WEATHER)


def test_a_call_cancelled_mid_arguments_ends_once_and_never_reaches_the_history(
    realtime_server: BackgroundServer,
) -> None:
    with raw_session(realtime_server.url) as session:
        _configure(session, "required", (NOTE,))
        rid = _ask(session, "Write me a long note about the history of Paris.")
        session.until("response.function_call_arguments.delta", timeout_s=60)
        session.send({"type": "response.cancel"})
        done = session.until("response.done", timeout_s=30)
        assert done["response"]["id"] == rid and done["response"]["status"] == "cancelled"
        _assert_the_cut_call_is_gone(session, done)


def test_speech_during_a_call_barges_in_once_and_leaves_no_call_in_the_history(
    realtime_server: BackgroundServer,
) -> None:
    with raw_session(realtime_server.url) as session:
        _configure(session, "required", (NOTE,))
        session.send(
            {
                "type": "session.update",
                "session": {
                    "type": "realtime",
                    "audio": {
                        "input": {
                            "turn_detection": {"type": "server_vad", "create_response": False}
                        }
                    },
                },
            }
        )
        session.until("session.updated", timeout_s=10)
        rid = _ask(session, "Write me a long note about the history of Paris.")
        session.until("response.function_call_arguments.delta", timeout_s=60)
        # The user speaks over the call (rule 1): server VAD barges in.
        session.append(np.concatenate([flite_speech("Wait, stop that."), silence(0.8)]))
        done = session.until("response.done", timeout_s=30)
        assert done["response"]["id"] == rid
        assert done["response"]["status"] == "cancelled"
        assert done["response"]["status_details"]["reason"] == "turn_detected"
        _assert_the_cut_call_is_gone(session, done)

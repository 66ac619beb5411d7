"""Function calling in the session core, in memory (docs/protocol.md "Function calling";
orchestrator/session/core_tools.py states the rules these are named for)."""

from __future__ import annotations

import base64
import json
from typing import Any

import msgspec
import pydantic
import pytest

from orchestrator.protocol import server as se
from orchestrator.protocol.codec import ServerEventEncoder, decode_client_event
from orchestrator.protocol.errors import ProtocolError
from orchestrator.service.backends.requests import pipeline_request
from orchestrator.session.actions import CancelBackend, StartBackend
from orchestrator.session.core import CoreConfig, SessionCore, Step
from orchestrator.session.history import conversation as conv
from orchestrator.session.inputs import (
    BackendAudio,
    BackendDone,
    BackendFailed,
    BackendText,
    BackendToolCall,
    VadSpeechStarted,
    VadSpeechStopped,
)
from turntaker_models.contract import ToolCallPart, ToolResultPart, ToolSpec

WEATHER: dict[str, Any] = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
ALARM: dict[str, Any] = {
    "type": "function",
    "name": "set_alarm",
    "parameters": {"type": "object", "properties": {"at": {"type": "string"}}},
}
MANUAL: dict[str, Any] = {"audio": {"input": {"turn_detection": None}}}
USER: dict[str, Any] = {
    "type": "message",
    "role": "user",
    "content": [{"type": "input_text", "text": "Paris?"}],
}
ARGS = ('{"city":', ' "Paris"}')


def vad(**knobs: Any) -> dict[str, Any]:
    return {"audio": {"input": {"turn_detection": {"type": "server_vad", **knobs}}}}


def of(step: Step, cls: type[Any]) -> list[Any]:
    return [o for o in (*step.actions, *step.events) if isinstance(o, cls)]


class Session:
    """A core driven through the codec, as the session actor drives it; every server event it
    sends is kept as a client reads it (JSON)."""

    def __init__(self, **session: Any) -> None:
        self.core = SessionCore("t", CoreConfig())
        self.encoder = ServerEventEncoder()
        self.wire: list[dict[str, Any]] = []
        self.step(self.core.open(0))
        if session:
            self.send("session.update", session={**MANUAL, **session})

    def step(self, step: Step) -> Step:
        self.wire += [json.loads(self.encoder.encode(e)) for e in step.events]
        return step

    def send(self, kind: str, **fields: Any) -> Step:
        event = decode_client_event(json.dumps({"type": kind, **fields}))
        assert not isinstance(event, ProtocolError), event
        return self.step(self.core.handle(event))

    def backend(self, event: Any) -> Step:
        return self.step(self.core.handle(event))

    def respond(self, **response: Any) -> StartBackend:
        step = self.send("response.create", **({"response": response} if response else {}))
        [start] = of(step, StartBackend)
        return start

    def call(self, start: StartBackend, name: str = "get_weather") -> Step:
        """The model calls `name` with ARGS, and its stream ends."""
        rid, seq = start.response_id, start.seq
        out = self.backend(BackendToolCall(rid, seq, name, ARGS[0]))
        out += self.backend(BackendToolCall(rid, seq, "", ARGS[1]))
        return out + self.backend(BackendDone(rid, seq, 4))

    def context(self) -> list[dict[str, Any]]:
        self.send("conversation.context.retrieve")
        items: list[dict[str, Any]] = self.wire[-1]["items"]
        return items

    def errors(self, step: Step) -> list[tuple[str, str | None]]:
        return [(e.error.code or "", e.error.param) for e in of(step, se.ErrorEvent)]


def sdk_validates(events: list[dict[str, Any]]) -> None:
    from openai.types.realtime import RealtimeServerEvent

    adapter: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(RealtimeServerEvent)
    for event in events:
        if event["type"] != "conversation.context":  # our extension
            adapter.validate_python(event)


def types_since(session: Session, index: int) -> list[str]:
    return [e["type"] for e in session.wire[index:]]


# Output items ---------------------------------------------------------------------------


def test_a_required_call_streams_added_deltas_done_in_order_and_the_sdk_reads_every_event() -> None:
    s = Session(tools=[WEATHER], tool_choice="required")
    mark = len(s.wire)
    start = s.respond()
    s.call(start)
    assert types_since(s, mark) == [
        "response.created",
        "response.output_item.added",
        "conversation.item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "conversation.item.done",
        "response.done",
    ]
    events = s.wire[mark:]
    added, done, response = events[1]["item"], events[6]["item"], events[-1]["response"]
    assert added["type"] == "function_call" and added["status"] == "in_progress"
    assert added["arguments"] == "" and added["name"] == "get_weather"
    call_id = added["call_id"]
    assert call_id.startswith("call_") and len(call_id) == 21
    assert [e["delta"] for e in events[3:5]] == list(ARGS)
    for event in events[1:8]:
        assert event.get("call_id", call_id) == call_id
        assert event.get("output_index", 0) == 0  # the call alone: output 0
    assert events[5]["arguments"] == "".join(ARGS) and events[5]["name"] == "get_weather"
    assert done["status"] == "completed" and done["arguments"] == "".join(ARGS)
    assert response["status"] == "completed" and response["output"] == [done]
    json.loads(done["arguments"])
    sdk_validates(s.wire)


def test_a_named_function_choice_is_a_call_alone_and_its_request_names_it() -> None:
    s = Session(tools=[WEATHER, ALARM])
    start = s.respond(tool_choice={"type": "function", "name": "set_alarm"})
    assert start.request.call_only
    params = pipeline_request("r", start.request, default_max_tokens=8).parameters
    assert (params.tool_choice, params.tool_name) == ("function", "set_alarm")
    assert [e["type"] for e in s.wire[-1:]] == ["response.created"]


def test_an_auto_call_follows_the_message_and_closes_it_first() -> None:
    s = Session(tools=[WEATHER], tool_choice="auto")
    start = s.respond()
    rid, seq = start.response_id, start.seq
    s.backend(BackendAudio(rid, seq, b"\0\0" * 24 * 40, "Let me check. "))
    mark = len(s.wire)
    s.call(start)
    kinds = types_since(s, mark)
    assert kinds[:5] == [
        "response.output_audio.done",
        "response.output_audio_transcript.done",
        "response.content_part.done",
        "response.output_item.done",
        "conversation.item.done",
    ]
    assert kinds[5:7] == ["response.output_item.added", "conversation.item.added"]
    message_id = s.wire[mark + 3]["item"]["id"]
    assert s.wire[mark + 6]["previous_item_id"] == message_id
    assert s.wire[mark + 5]["output_index"] == 1
    response = s.wire[-1]["response"]
    assert [item["type"] for item in response["output"]] == ["message", "function_call"]
    assert response["output"][0]["content"][0]["transcript"] == "Let me check. "
    assert kinds.count("response.output_item.done") == 2  # the message closed once
    sdk_validates(s.wire)


def test_nothing_is_spoken_after_a_call_started_or_in_a_call_alone() -> None:
    s = Session(tools=[WEATHER], tool_choice="auto")
    start = s.respond()
    rid, seq = start.response_id, start.seq
    s.backend(BackendToolCall(rid, seq, "get_weather", "{"))
    assert not s.backend(BackendText(rid, seq, "more words")).events
    assert not s.backend(BackendAudio(rid, seq, b"\0\0" * 480, "x")).events
    s.backend(BackendDone(rid, seq))
    required = Session(tools=[WEATHER], tool_choice="required")
    start = required.respond()
    assert not required.backend(BackendText(start.response_id, start.seq, "hi")).events


def test_tool_choice_none_and_no_tools_keep_todays_message_reply() -> None:
    s = Session(tools=[WEATHER], tool_choice="none")
    mark = len(s.wire)
    start = s.respond()
    assert not start.request.call_only
    assert types_since(s, mark)[:2] == ["response.created", "response.output_item.added"]
    params = pipeline_request("r", start.request, default_max_tokens=8).parameters
    assert params.tool_choice == "none" and [t.name for t in params.tools] == ["get_weather"]


# History --------------------------------------------------------------------------------


def test_a_call_output_and_response_create_carry_the_call_and_its_result_then_speech_follows() -> (
    None
):
    s = Session(tools=[WEATHER])  # tool_choice auto: the answer is spoken
    s.send("conversation.item.create", item=USER)
    s.call(s.respond(tool_choice={"type": "function", "name": "get_weather"}))
    call = s.wire[-2]["item"]
    s.send(
        "conversation.item.create",
        item={"type": "function_call_output", "call_id": call["call_id"], "output": '{"c": 21}'},
    )
    start = s.respond()
    kinds = [item.call is not None for item in start.request.items]
    assert kinds == [False, True, False]
    request = pipeline_request("r", start.request, default_max_tokens=8)
    roles = [m.role for m in request.conversation.messages]
    assert roles == ["user", "assistant", "tool"]
    assert request.conversation.messages[1].content == [
        ToolCallPart(call["call_id"], "get_weather", "".join(ARGS))
    ]
    assert request.conversation.messages[2].content == [
        ToolResultPart(call["call_id"], '{"c": 21}')
    ]
    assert request.parameters.tools == [
        ToolSpec("get_weather", "The weather in a city.", WEATHER["parameters"])
    ]
    assert request.parameters.tool_choice == "auto"
    mark = len(s.wire)
    rid, seq = start.response_id, start.seq
    s.backend(BackendAudio(rid, seq, b"\0\0" * 24 * 40, "It is 21 degrees."))
    s.backend(BackendDone(rid, seq))
    assert "response.output_audio.delta" in types_since(s, mark)
    assert [i["type"] for i in s.wire[-1]["response"]["output"]] == ["message"]
    sdk_validates(s.wire)


def test_a_preamble_and_its_call_are_one_assistant_turn_in_the_request() -> None:
    s = Session(tools=[WEATHER], output_modalities=["text"])
    start = s.respond()
    s.backend(BackendText(start.response_id, start.seq, "Checking."))
    s.call(start)
    request = pipeline_request("r", s.respond().request, default_max_tokens=8)
    [reply] = request.conversation.messages
    assert reply.role == "assistant"
    assert [type(p).__name__ for p in reply.content] == ["TextPart", "ToolCallPart"]


@pytest.mark.parametrize("how", ["barge_in", "cancel", "fail"])
def test_a_call_cut_mid_arguments_ends_once_with_no_later_delta_and_never_reaches_history(
    how: str,
) -> None:
    s = Session(tools=[WEATHER], tool_choice="required")
    s.send("session.update", session=vad(create_response=True))
    s.send("input_audio_buffer.append", audio=base64.b64encode(b"\x01\x00" * 24 * 500).decode())
    s.step(s.core.vad(VadSpeechStarted(0)))
    [start] = of(s.step(s.core.vad(VadSpeechStopped(500))), StartBackend)
    rid, seq = start.response_id, start.seq
    s.backend(BackendToolCall(rid, seq, "get_weather", ARGS[0]))
    mark = len(s.wire)
    if how == "barge_in":
        out = s.step(s.core.vad(VadSpeechStarted(900)))
    elif how == "cancel":
        out = s.send("response.cancel")
    else:
        out = s.backend(BackendFailed(rid, seq, "boom"))
    assert of(out, CancelBackend)
    kinds = types_since(s, mark)
    assert kinds.count("response.done") == 1
    assert "response.function_call_arguments.done" not in kinds
    done = next(e for e in s.wire[mark:] if e["type"] == "response.output_item.done")
    assert done["item"]["status"] == "incomplete" and done["item"]["type"] == "function_call"
    status = s.wire[mark:][kinds.index("response.done")]["response"]["status"]
    assert status == ("failed" if how == "fail" else "cancelled")
    late = s.backend(BackendToolCall(rid, seq, "", ARGS[1]))
    late += s.backend(BackendDone(rid, seq))
    assert not late.events  # rule 2: fenced
    assert all(item.call is None for item in s.core.conversation.items)
    assert all(item["type"] != "function_call" for item in s.context())
    s.send("session.update", session={"tool_choice": "auto", **MANUAL})
    request = s.respond().request
    assert all(item.call is None for item in request.items)
    messages = pipeline_request("r", request, default_max_tokens=8).conversation.messages
    assert not [p for m in messages for p in m.content if isinstance(p, ToolCallPart)]
    sdk_validates(s.wire)


def test_a_complete_call_is_heard_at_once_though_its_preamble_audio_is_still_playing() -> None:
    s = Session(tools=[WEATHER])
    start = s.respond()
    s.send("playback.ack", response_id=start.response_id, played_ms=0)  # rule 5 as written
    s.backend(BackendAudio(start.response_id, start.seq, b"\0\0" * 24 * 400, "One moment."))
    s.call(start)
    items = s.context()
    assert [i["type"] for i in items] == ["message", "function_call"]
    assert items[0]["content"] == []  # the audio is not heard yet (rule 5)
    assert items[1]["arguments"] == "".join(ARGS)
    s.step(s.core.vad(VadSpeechStarted(100)))  # a barge-in while it plays cuts the preamble
    assert [i["type"] for i in s.context()] == ["message", "function_call"]


def test_pruning_drops_a_call_and_its_output_with_their_turn() -> None:
    s = Session(tools=[WEATHER])
    s.core.conversation.limits = conv.HistoryLimits(max_history_bytes=200)
    user = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "x"}]}
    s.send("conversation.item.create", item=user)
    s.call(s.respond(tool_choice="required"))
    call_id = s.wire[-2]["item"]["call_id"]
    answer = {"type": "function_call_output", "call_id": call_id, "output": "y" * 190}
    s.send("conversation.item.create", item=answer)
    assert [i["type"] for i in s.context()] == ["message", "function_call", "function_call_output"]
    s.send("conversation.item.create", item=user)  # a new turn: the old one is over the limit
    assert [i["type"] for i in s.context()] == ["message"]
    assert all(item.role == "user" for item in s.core.conversation.items)


def test_conversation_context_lists_calls_and_outputs_under_their_item_ids() -> None:
    s = Session(tools=[WEATHER])
    s.call(s.respond(tool_choice="required"))
    call = s.wire[-2]["item"]
    answer = {"type": "function_call_output", "call_id": call["call_id"], "output": "sunny"}
    s.send("conversation.item.create", item={**answer, "id": "out_1"})
    items = s.context()
    assert [(i["id"], i["type"]) for i in items] == [
        (call["id"], "function_call"),
        ("out_1", "function_call_output"),
    ]
    assert items[0]["call_id"] == items[1]["call_id"] == call["call_id"]
    assert items[1]["output"] == "sunny"
    assert conv.context_json(s.core.conversation.prompt_view())["items"][1] == {
        "id": "out_1",
        "type": "function_call_output",
        "call_id": call["call_id"],
        "output": "sunny",
    }


def test_a_call_streaming_is_retrieved_as_the_call_so_far() -> None:
    s = Session(tools=[WEATHER], tool_choice="required")
    start = s.respond()
    s.backend(BackendToolCall(start.response_id, start.seq, "get_weather", ARGS[0]))
    item_id = s.wire[-2]["item"]["id"]
    s.send("conversation.item.retrieve", item_id=item_id)
    item = s.wire[-1]["item"]
    assert (item["type"], item["status"], item["arguments"]) == (
        "function_call",
        "in_progress",
        ARGS[0],
    )


def test_a_clients_call_items_are_history_and_an_unknown_call_id_is_accepted() -> None:
    s = Session()
    s.send(
        "conversation.item.create",
        item={"type": "function_call", "name": "get_weather", "arguments": "{}"},
    )
    made = s.wire[-1]["item"]
    assert made["type"] == "function_call" and made["call_id"].startswith("call_")
    step = s.send(
        "conversation.item.create",
        item={"type": "function_call_output", "call_id": "call_nobody", "output": "ok"},
    )
    assert not of(step, se.ErrorEvent)
    assert [i["type"] for i in s.context()] == ["function_call", "function_call_output"]
    sdk_validates(s.wire)


def test_truncating_a_call_item_is_refused() -> None:
    s = Session(tools=[WEATHER], tool_choice="required")
    s.call(s.respond())
    item_id = s.wire[-2]["item"]["id"]
    step = s.send("conversation.item.truncate", item_id=item_id, content_index=0, audio_end_ms=0)
    assert s.errors(step) == [("invalid_value", "item_id")]


def test_a_response_ending_in_a_call_arms_no_idle_timer() -> None:
    from orchestrator.session.actions import ArmTimer

    s = Session(tools=[WEATHER], tool_choice="required")
    s.send("session.update", session=vad(create_response=False, idle_timeout_ms=5000))
    out = s.call(s.respond())
    assert not of(out, ArmTimer)


def test_a_call_the_output_budget_cut_ends_incomplete_and_is_no_call_to_run() -> None:
    # Was: a call cut by max_output_tokens ended `completed`, with its cut arguments in
    # `arguments.done` and in the history. Now (rules 3, 4, 6): the response is `incomplete`
    # with the reason, the call item `incomplete` without `arguments.done`, never history,
    # and the idle timer is armed (no call runs, so no output and response.create follow).
    from orchestrator.session.actions import ArmTimer

    s = Session(tools=[WEATHER], tool_choice="required")
    s.send("session.update", session=vad(create_response=False, idle_timeout_ms=5000))
    start = s.respond()
    rid, seq = start.response_id, start.seq
    mark = len(s.wire)
    s.backend(BackendToolCall(rid, seq, "get_weather", ARGS[0]))
    out = s.backend(BackendDone(rid, seq, 3, "max_output_tokens"))
    kinds = types_since(s, mark)
    assert kinds.count("response.done") == 1
    assert "response.function_call_arguments.done" not in kinds
    done = s.wire[-1]["response"]
    assert done["status"] == "incomplete"
    details = done["status_details"]
    assert (details["type"], details["reason"]) == ("incomplete", "max_output_tokens")
    [call] = done["output"]
    assert (call["type"], call["status"], call["arguments"]) == (
        "function_call",
        "incomplete",
        ARGS[0],
    )
    assert all(item.call is None for item in s.core.conversation.items)
    assert of(out, ArmTimer), "rule 6: no call runs, so the idle timer is armed"
    sdk_validates(s.wire)


# Settings and errors --------------------------------------------------------------------


def test_session_created_and_updated_render_tools_and_tool_choice_as_the_sdk_reads_them() -> None:
    s = Session()
    assert s.wire[0]["session"]["tools"] == [] and s.wire[0]["session"]["tool_choice"] == "auto"
    ping = {"type": "function", "name": "ping"}
    s.send("session.update", session={"tools": [WEATHER, ping], "tool_choice": ping})
    session = s.wire[-1]["session"]
    assert session["tools"][0] == WEATHER
    assert session["tools"][1] == {
        "type": "function",
        "name": "ping",
        "description": None,
        "parameters": {"type": "object", "properties": {}},
    }
    assert session["tool_choice"] == {"type": "function", "name": "ping"}
    sdk_validates(s.wire)
    s.send("session.update", session={"tools": [], "tool_choice": "none"})
    assert (s.wire[-1]["session"]["tools"], s.wire[-1]["session"]["tool_choice"]) == ([], "none")


def test_a_response_overrides_the_sessions_tools_and_choice() -> None:
    s = Session(tools=[WEATHER], tool_choice="required")
    start = s.respond(tools=[ALARM], tool_choice="auto")
    assert [t.name for t in start.request.tools] == ["set_alarm"]
    assert start.request.tool_choice == "auto" and not start.request.call_only
    s.backend(BackendDone(start.response_id, start.seq))
    again = s.respond()  # the override was for that response only
    assert [t.name for t in again.request.tools] == ["get_weather"]
    assert again.request.tool_choice == "required"


@pytest.mark.parametrize(
    "session",
    [
        {"tool_choice": "required"},
        {"tool_choice": {"type": "function", "name": "nope"}},
        {"tools": [WEATHER], "tool_choice": {"type": "function", "name": "nope"}},
    ],
)
def test_a_tool_choice_before_its_tools_is_applied_and_checked_when_a_response_starts(
    session: dict[str, Any],
) -> None:
    # LiveKit Agents sends its tool choice in one update and its tools in a later one.
    s = Session()
    step = s.send("session.update", session=session)
    assert s.errors(step) == [] and of(step, se.SessionUpdated)
    refused = s.send("response.create")
    assert s.errors(refused) == [("invalid_value", "session.tool_choice")]
    assert not of(refused, StartBackend) and not of(refused, se.ResponseCreated)
    assert not s.core.chart.is_generating


def test_the_tools_a_choice_waits_for_make_it_fit() -> None:
    s = Session(tool_choice="required")
    s.send("session.update", session={"tools": [WEATHER]})
    assert s.respond().request.tool_choice == "required"


def test_a_server_vad_response_whose_choice_fits_no_tool_does_not_start() -> None:
    s = Session(tool_choice="required")
    s.send("session.update", session={"turn_detection": {"type": "server_vad"}})
    s.send("input_audio_buffer.append", audio=base64.b64encode(b"\x01\x00" * 24 * 300).decode())
    s.step(s.core.vad(VadSpeechStarted(0)))
    step = s.step(s.core.vad(VadSpeechStopped(300)))
    assert s.errors(step) == [("invalid_value", "session.tool_choice")]
    assert of(step, se.InputAudioBufferCommitted) and not of(step, StartBackend)
    assert not s.core.chart.is_generating


@pytest.mark.parametrize(
    ("response", "param"),
    [
        ({"tool_choice": "required"}, "response.tool_choice"),
        ({"tool_choice": {"type": "function", "name": "set_alarm"}}, "response.tool_choice"),
        ({"tools": [ALARM]}, "response.tools"),  # the session's choice names get_weather
    ],
)
def test_a_response_whose_tool_choice_fits_no_tool_is_refused_and_starts_nothing(
    response: dict[str, Any], param: str
) -> None:
    s = Session()
    if "tools" in response:
        named = {"type": "function", "name": "get_weather"}
        s.send("session.update", session={"tools": [WEATHER], "tool_choice": named})
    step = s.send("response.create", response=response)
    assert s.errors(step) == [("invalid_value", param)]
    assert not of(step, StartBackend) and not of(step, se.ResponseCreated)
    assert not s.core.chart.is_generating


def test_the_request_parameters_decode_as_the_pipeline_contract() -> None:
    from turntaker_models.contract import decode_parameters

    s = Session(tools=[WEATHER, ALARM], tool_choice="required")
    params = pipeline_request("r", s.respond().request, default_max_tokens=8).parameters
    decoded = decode_parameters(msgspec.json.encode(params))
    assert decoded.tool_choice == "required" and len(decoded.tools) == 2


def test_a_replys_items_are_done_after_the_same_item_as_they_were_added() -> None:
    # The JS Agents SDK places an item in its local history by `conversation.item.done`'s
    # previous_item_id: a null there put every reply at the front.
    s = Session(tools=[WEATHER])
    user = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "x"}]}
    s.send("conversation.item.create", item={**user, "id": "u1"})
    start = s.respond()
    s.backend(BackendAudio(start.response_id, start.seq, b"\0\0" * 24 * 100, "One moment."))
    s.call(start)
    added = {
        e["item"]["id"]: e["previous_item_id"]
        for e in s.wire
        if e["type"] == "conversation.item.added"
    }
    done = {
        e["item"]["id"]: e["previous_item_id"]
        for e in s.wire
        if e["type"] == "conversation.item.done"
    }
    message, call = [i for i in added if i != "u1"]
    assert added[message] == done[message] == "u1"
    assert added[call] == done[call] == message

"""Wire parity (docs/protocol.md "Wire parity with OpenAI"): every server event the e2e suite
receives, checked against the client SDKs' own schemas, strictly.

- The JS Agents SDK (@openai/agents-realtime, tests/clients/js): each event through its zod
  schemas and the item parses of its transport handler, unknown keys an error, except the
  extension fields and events tests/js/sdk_server_events.mjs lists.
- The `openai` Python SDK: each of OpenAI's events through its pydantic models, and no key
  they do not name beyond the extensions listed here.

The events are those of this module's own conversation (which touches every event type it can
on the `null` pipeline) and every one that a RawSession of an earlier e2e test received
(`realtime_client.WIRE_SAMPLES`: this module runs last of tests/e2e).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

import numpy as np
import pydantic
import pytest
from openai._models import BaseModel
from openai.types.realtime import RealtimeServerEvent

from orchestrator.protocol.server import SERVER_EVENT_TYPES
from orchestrator.service.config import ServiceConfig
from orchestrator.service.serve import BackgroundServer
from orchestrator.triton import TritonServer
from tests.conftest import REPO_ROOT, free_port
from tests.e2e.realtime_client import (
    WIRE_SAMPLES,
    RawSession,
    flite_speech,
    raw_session,
    silence,
)

CHECKER = REPO_ROOT / "tests" / "js" / "sdk_server_events.mjs"
SDK_DIR = REPO_ROOT / "tests" / "clients" / "js" / "node_modules" / "@openai" / "agents-realtime"
SCHEMAS = SDK_DIR / "dist" / "openaiRealtimeEvents.mjs"

# Our extension events (docs/protocol.md "Extensions"): not OpenAI's, so not the SDK's.
EXTENSION_EVENTS = frozenset(
    {
        "playback.acknowledged",
        "conversation.context",
        "session.resumed",
        "output_audio_buffer.paused",
        "output_audio_buffer.resumed",
        "overlap.decision",
    }
)
# Keys the Python SDK's models do not name, where they may appear: our extensions, and
# OpenAI's own session fields that the model of `session.created`'s session leaves out.
PY_ALLOWED_EXTRA: dict[str, frozenset[str]] = {
    "": frozenset({"server_event_seq", "resume_token"}),
    "session": frozenset({"id", "object", "expires_at"}),
    "session.audio.input.turn_detection": frozenset({"interruption", "preemptive_response"}),
    # Shown only while a session has it on (docs/protocol.md "Echo cancellation").
    "session.audio.input": frozenset({"echo_cancellation"}),
}
# What this module's conversation must have shown, at least.
COVERED = frozenset(
    {
        "session.created",
        "session.updated",
        "input_audio_buffer.speech_started",
        "input_audio_buffer.speech_stopped",
        "input_audio_buffer.committed",
        "input_audio_buffer.cleared",
        "conversation.item.added",
        "conversation.item.done",
        "conversation.item.retrieved",
        "conversation.item.deleted",
        "conversation.item.truncated",
        "response.created",
        "response.output_item.added",
        "response.output_item.done",
        "response.content_part.added",
        "response.content_part.done",
        "response.output_audio.delta",
        "response.output_audio.done",
        "response.output_audio_transcript.delta",
        "response.output_audio_transcript.done",
        "response.output_text.delta",
        "response.output_text.done",
        "response.done",
        "output_audio_buffer.cleared",
        "playback.acknowledged",
        "conversation.context",
        "error",
    }
)

_SDK: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(RealtimeServerEvent)


@pytest.fixture(scope="module")
def null_server(triton_server: TritonServer) -> Iterator[BackgroundServer]:
    config = ServiceConfig(port=free_port(), triton_urls=(triton_server.grpc_url,), pipeline="null")
    with BackgroundServer(config) as server:
        yield server


def _update(session: RawSession, **fields: Any) -> None:
    session.send({"type": "session.update", "session": {"type": "realtime", **fields}})
    session.until("session.updated", timeout_s=10)


def _conversation(session: RawSession) -> None:
    """A turn spoken and answered, then every client event that has an answer of its own."""
    _update(
        session,
        max_output_tokens=6,  # the null pipeline: one 80 ms chunk a token
        audio={
            "input": {
                "transcription": {"model": "whisper"},
                "turn_detection": {"type": "server_vad", "silence_duration_ms": 300},
            }
        },
    )
    session.append(
        np.concatenate([silence(0.3), flite_speech("Hello there, how are you?"), silence(0.9)])
    )
    done = session.until("response.done", timeout_s=60)
    rid = done["response"]["id"]
    reply = done["response"]["output"][0]["id"]
    session.send({"type": "playback.ack", "response_id": rid, "played_ms": 80})
    session.until("playback.acknowledged", timeout_s=10)
    session.send(
        {
            "type": "conversation.item.truncate",
            "item_id": reply,
            "content_index": 0,
            "audio_end_ms": 0,
        }
    )
    session.until("conversation.item.truncated", timeout_s=10)
    text = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi."}]}
    session.send({"type": "conversation.item.create", "item": {**text, "id": "item_text"}})
    session.until("conversation.item.done", timeout_s=10)
    session.send({"type": "conversation.item.retrieve", "item_id": "item_text"})
    session.until("conversation.item.retrieved", timeout_s=10)
    session.send({"type": "conversation.context.retrieve"})
    session.until("conversation.context", timeout_s=10)
    session.send({"type": "response.create", "response": {"output_modalities": ["text"]}})
    session.until("response.done", timeout_s=30)
    session.send({"type": "conversation.item.delete", "item_id": "item_text"})
    session.until("conversation.item.deleted", timeout_s=10)
    # Errors: a cancel of nothing, an unknown item, an unknown event type.
    for event in (
        {"type": "response.cancel", "event_id": "c1"},
        {"type": "conversation.item.retrieve", "item_id": "nope", "event_id": "c2"},
        {"type": "nope", "event_id": "c3"},
    ):
        session.send(event)
        session.until("error", timeout_s=10)
    session.send({"type": "input_audio_buffer.clear"})
    session.until("input_audio_buffer.cleared", timeout_s=10)
    session.send({"type": "output_audio_buffer.clear", "response_id": rid})
    session.until("output_audio_buffer.cleared", timeout_s=10)


def _unknown_keys(value: Any, at: str, out: list[str]) -> None:
    if isinstance(value, BaseModel):
        allowed = PY_ALLOWED_EXTRA.get(at, frozenset())
        out.extend(f"{at}.{k}".lstrip(".") for k in value.model_extra or {} if k not in allowed)
        for name in value.model_fields_set:
            _unknown_keys(getattr(value, name), f"{at}.{name}".lstrip("."), out)
    elif isinstance(value, list | tuple):
        for element in value:
            _unknown_keys(element, at, out)


def _python_sdk_problems(event: dict[str, Any]) -> list[str]:
    if event["type"] in EXTENSION_EVENTS:
        return []
    try:
        parsed = _SDK.validate_python(event)
    except pydantic.ValidationError as error:
        return [str(error)]
    unknown: list[str] = []
    _unknown_keys(parsed, "", unknown)
    return [f"unknown key '{key}' (not in the Python SDK's model)" for key in unknown]


def _js_sdk_failures(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    lines = "".join(json.dumps(event) + "\n" for event in events)
    run = subprocess.run(
        ["node", str(CHECKER)], input=lines, capture_output=True, text=True, timeout=120
    )
    assert run.returncode in (0, 1) and run.stdout, run.stderr
    result = json.loads(run.stdout)
    assert result["checked"] == len(events)
    failures: list[dict[str, Any]] = result["failures"]
    return failures


def test_every_server_event_parses_strictly_with_the_client_sdks(
    null_server: BackgroundServer,
) -> None:
    # `make test` installs both: a missing one is a failure, never a skip.
    assert shutil.which("node") is not None, "node is not installed"
    assert SCHEMAS.is_file(), f"{SCHEMAS} is missing: run `make test` (it runs npm ci)"
    with raw_session(null_server.url) as session:
        _conversation(session)
    seen = {event["type"] for event in session.events}
    assert COVERED - seen == set()
    # One event per shape: this conversation's (recorded as any RawSession's) and earlier tests'.
    events = list(WIRE_SAMPLES.values())
    assert seen <= {event["type"] for event in events} <= SERVER_EVENT_TYPES

    python = {
        i: problems for i, event in enumerate(events) if (problems := _python_sdk_problems(event))
    }
    assert python == {}, [(events[i], problems) for i, problems in python.items()][:5]
    js = _js_sdk_failures(events)
    assert js == [], [(events[f["index"]], f["problems"]) for f in js][:5]

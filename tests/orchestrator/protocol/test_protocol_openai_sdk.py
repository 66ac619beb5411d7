"""Cross-check against the official `openai` SDK's GA realtime types (a dev dependency).

Every server event is validated strictly with the SDK's pydantic models, and the SDK's own
client-event serialization is fed through our decoder.
"""

from __future__ import annotations

import json
from typing import Any

import pydantic

from orchestrator.protocol.codec import ServerEventEncoder, decode_client_event
from orchestrator.protocol.errors import ProtocolError
from orchestrator.protocol.items import InputAudio, InputImage, InputText, MessageItem, OutputAudio
from orchestrator.protocol.response import (
    Response,
    ResponseAudio,
    ResponseAudioOutput,
    StatusDetails,
    Usage,
)
from orchestrator.protocol.server import (
    ConversationItemAdded,
    ResponseContentPartAdded,
    ResponseDone,
    ResponseOutputAudioDelta,
    SessionCreated,
    response_part,
)
from orchestrator.protocol.session_config import PCM16, SessionConfig
from tests.orchestrator.protocol.protocol_helpers import PCM_20MS, PNG_URL, b64


def test_server_events_validate_strictly_against_sdk_models() -> None:
    from openai.types.realtime import RealtimeServerEvent

    adapter = pydantic.TypeAdapter(RealtimeServerEvent)
    enc = ServerEventEncoder()
    ids = {"response_id": "r", "item_id": "i", "output_index": 0, "content_index": 0}
    user = MessageItem(
        id="u",
        status="completed",
        role="user",
        content=(InputAudio(), InputText(text="t"), InputImage(image_url=PNG_URL)),
    )
    reply = MessageItem(
        id="a", status="incomplete", role="assistant", content=(OutputAudio(transcript=""),)
    )
    events = [
        SessionCreated(session=SessionConfig().to_session_object(session_id="s", model="m")),
        ConversationItemAdded(item=user),
        ResponseContentPartAdded(part=response_part(OutputAudio(transcript="")), **ids),
        ResponseOutputAudioDelta(delta=PCM_20MS, **ids),
        ResponseDone(
            response=Response(
                id="r",
                status="cancelled",
                status_details=StatusDetails(type="cancelled", reason="turn_detected"),
                output=(reply,),
                audio=ResponseAudio(output=ResponseAudioOutput(format=PCM16, voice="alloy")),
                usage=Usage(),
            )
        ),
    ]
    for event in events:
        parsed = adapter.validate_python(json.loads(enc.encode(event)))
        assert parsed.type == type(event).__struct_config__.tag


def test_sdk_serialized_client_events_decode() -> None:
    from openai._utils import maybe_transform
    from openai.types.realtime import RealtimeClientEventParam

    events: list[dict[str, Any]] = [
        {
            "type": "session.update",
            "session": {
                "type": "realtime",
                "output_modalities": ["audio"],
                "audio": {
                    "input": {
                        "format": {"type": "audio/pcm", "rate": 24000},
                        "turn_detection": {"type": "server_vad", "silence_duration_ms": 700},
                    },
                    "output": {"format": {"type": "audio/pcmu"}, "voice": "marin"},
                },
            },
        },
        {"type": "input_audio_buffer.append", "audio": b64(PCM_20MS)},
        {
            "type": "conversation.item.create",
            "item": {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_image", "image_url": PNG_URL}],
            },
        },
        {
            "type": "conversation.item.truncate",
            "item_id": "i",
            "content_index": 0,
            "audio_end_ms": 10,
        },
        {"type": "response.create", "response": {"output_modalities": ["text"]}},
        {"type": "output_audio_buffer.clear"},
    ]
    for event in events:
        raw = json.dumps(maybe_transform(event, RealtimeClientEventParam))
        assert not isinstance(decode_client_event(raw), ProtocolError), raw

"""JSON text in, JSON text out: the protocol edge and the core paired in memory (wsproto style)."""

from __future__ import annotations

import base64
import json
from typing import Any

from orchestrator.protocol.codec import ServerEventEncoder, decode_client_event
from orchestrator.protocol.errors import ProtocolError
from orchestrator.session.actions import CancelBackend, StartBackend
from orchestrator.session.core import SessionCore, Step
from orchestrator.session.inputs import BackendAudio, BackendDone


class Wire:
    def __init__(self) -> None:
        self.core = SessionCore("w")
        self.encoder = ServerEventEncoder()
        self.starts: list[StartBackend] = []
        self.sent = [self._encode(o) for o in self.core.open().events]

    def _encode(self, out: object) -> dict[str, Any]:
        if isinstance(out, StartBackend):
            self.starts.append(out)
            return {"type": "<start>"}
        if isinstance(out, CancelBackend):
            return {"type": "<cancel>"}
        return dict(json.loads(self.encoder.encode(out)))  # type: ignore[arg-type]

    def flat(self, step: Step) -> list[object]:
        backend = [a for a in step.actions if isinstance(a, StartBackend | CancelBackend)]
        return [*backend, *step.events]

    def send(self, message: str | dict[str, Any]) -> list[dict[str, Any]]:
        raw = message if isinstance(message, str) else json.dumps(message)
        event = decode_client_event(raw, input_audio_format=self.core.settings.input_format)
        outs = (
            self.core.reject(event) if isinstance(event, ProtocolError) else self.core.client(event)
        )
        return [self._encode(o) for o in self.flat(outs)]


def test_rule7_malformed_json_is_an_error_and_session_goes_on() -> None:
    w = Wire()
    [err] = w.send('{"type": "input_audio_buffer.append", "event_id": "e1", "audio": ')
    assert err["type"] == "error" and err["error"]["code"] == "invalid_json"
    [err] = w.send({"type": "input_audio_buffer.append", "event_id": "e2", "audio": "@@@"})
    assert err["error"]["code"] == "invalid_base64" and err["error"]["event_id"] == "e2"
    [err] = w.send({"type": "nope.nope", "event_id": "e3"})
    assert err["error"]["code"] == "invalid_value" and err["error"]["event_id"] == "e3"
    [updated] = w.send({"type": "session.update", "session": {"instructions": "be brief"}})
    assert updated["type"] == "session.updated"
    assert updated["session"]["instructions"] == "be brief"


def test_beta_session_update_is_answered_in_ga_spelling() -> None:
    w = Wire()
    [updated] = w.send(
        {
            "type": "session.update",
            "session": {
                "modalities": ["text"],
                "input_audio_format": "pcm16",
                "turn_detection": None,
            },
        }
    )
    session = updated["session"]
    assert session["output_modalities"] == ["text"]
    assert session["audio"]["input"]["format"] == {"type": "audio/pcm", "rate": 24000}
    assert session["audio"]["input"]["turn_detection"] is None


def test_every_server_event_has_an_event_id_and_audio_is_base64() -> None:
    w = Wire()
    w.send({"type": "session.update", "session": {"turn_detection": None}})
    audio = base64.b64encode(b"\x01\x00" * 24 * 200).decode()
    w.send({"type": "input_audio_buffer.append", "audio": audio})
    out = w.send({"type": "input_audio_buffer.commit", "create_response": True})
    assert [o["type"] for o in out if o["type"] != "<start>"][:1] == [
        "input_audio_buffer.committed"
    ]
    start = w.starts[-1]
    pcm = b"\x05\x00" * 24 * 20
    deltas = [
        w._encode(o)
        for o in w.flat(w.core.backend(BackendAudio(start.response_id, start.seq, pcm, "Hi.")))
    ]
    done = [w._encode(o) for o in w.flat(w.core.backend(BackendDone(start.response_id, start.seq)))]
    assert deltas[0]["type"] == "response.output_audio.delta"
    assert base64.b64decode(deltas[0]["delta"]) == pcm
    assert done[-1]["type"] == "response.done" and done[-1]["response"]["status"] == "completed"
    ids = [e["event_id"] for e in w.sent + out + deltas + done if e["type"] != "<start>"]
    assert all(ids) and len(set(ids)) == len(ids)


def test_a_whole_interrupted_conversation_validates_against_the_openai_sdk() -> None:
    """Clients written for OpenAI parse every standard event the core sends (contract)."""
    import pydantic
    from openai.types.realtime import RealtimeServerEvent

    adapter: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(RealtimeServerEvent)
    from orchestrator.session.inputs import VadSpeechStarted, VadSpeechStopped

    w = Wire()
    audio = base64.b64encode(b"\x01\x00" * 24 * 300).decode()
    events: list[dict[str, Any]] = list(w.sent)
    events += w.send({"type": "input_audio_buffer.append", "audio": audio})
    events += [w._encode(o) for o in w.flat(w.core.vad(VadSpeechStarted(0)))]
    events += [w._encode(o) for o in w.flat(w.core.vad(VadSpeechStopped(300)))]
    start = w.starts[-1]
    chunk = BackendAudio(start.response_id, start.seq, b"\0\0" * 24 * 40, "Hi.")
    events += [w._encode(o) for o in w.flat(w.core.backend(chunk))]
    events += [w._encode(o) for o in w.flat(w.core.vad(VadSpeechStarted(400)))]  # barge-in
    events += w.send({"type": "response.cancel", "event_id": "c1"})  # nothing live: error
    events += [w._encode(o) for o in w.flat(w.core.vad(VadSpeechStopped(900)))]
    start = w.starts[-1]
    events += [
        w._encode(o)
        for o in w.flat(
            w.core.backend(chunk.__class__(start.response_id, start.seq, chunk.audio, "Ok."))
        )
    ]
    events += [
        w._encode(o) for o in w.flat(w.core.backend(BackendDone(start.response_id, start.seq)))
    ]
    events += w.send(
        {
            "type": "conversation.item.truncate",
            "item_id": w.core.ledger.item_id(start.response_id),
            "content_index": 0,
            "audio_end_ms": 20,
        }
    )
    standard = [
        e
        for e in events
        if e["type"] not in ("<start>", "<cancel>", "playback.acknowledged", "conversation.context")
    ]
    types = {e["type"] for e in standard}
    assert {
        "response.done",
        "output_audio_buffer.cleared",
        "error",
        "conversation.item.truncated",
        "response.output_audio.delta",
    } <= types
    for event in standard:
        adapter.validate_python(event, strict=False)

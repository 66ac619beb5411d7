"""Bugs found by fuzzing the live server (tests/e2e/test_fuzz_e2e.py), pinned in memory.

Each test is one finding: the input that broke the server, driven through the codec and the
core as the session actor drives them, and what must happen instead. (The reused reply slot
turned up while writing the generators; the fuzzer's sequences cover it too.)
"""

from __future__ import annotations

import json
from typing import Any

from orchestrator.protocol import server as se
from orchestrator.protocol.codec import decode_client_event
from orchestrator.protocol.errors import ProtocolError
from orchestrator.session.actions import StartBackend
from orchestrator.session.core import SessionCore, Step
from orchestrator.session.history import conversation as conv
from orchestrator.session.inputs import BackendDone, BackendText, VadSpeechStarted
from tests.orchestrator.protocol.protocol_helpers import PCM_20MS, b64, reject

SID = "s"


def _send(core: SessionCore, event: dict[str, Any]) -> Step:
    """One client message, through the codec and into the core (never raises)."""
    parsed = decode_client_event(json.dumps(event))
    return core.reject(parsed) if isinstance(parsed, ProtocolError) else core.client(parsed)


def _errors(out: Step) -> list[se.ErrorInfo]:
    return [o.error for o in out.events if isinstance(o, se.ErrorEvent)]


def _core() -> SessionCore:
    core = SessionCore(SID)
    core.open()
    return core


def _user(text: str = "hi", **item: Any) -> dict[str, Any]:
    content = [{"type": "input_text", "text": text}]
    return {
        "type": "conversation.item.create",
        "item": {"type": "message", "role": "user", "content": content, **item},
    }


def _start(core: SessionCore, **response: Any) -> StartBackend:
    out = _send(core, {"type": "response.create", "response": response})
    assert not _errors(out), _errors(out)
    (start,) = [o for o in out.actions if isinstance(o, StartBackend)]
    return start


def test_item_id_root_is_refused_not_a_crash() -> None:
    # Was: ValueError from the conversation, the session closed with 1011.
    core = _core()
    out = _send(core, {**_user(id="root"), "event_id": "e1"})
    (error,) = _errors(out)
    assert (error.code, error.param, error.event_id) == ("invalid_value", "item.id", "e1")
    assert len(core.conversation) == 0
    assert not _errors(_send(core, {**_user(), "previous_item_id": "root"}))


def test_ids_the_server_would_hand_out_next_can_be_taken_by_the_client() -> None:
    # Was: DuplicateItemId when the server reached an id the client had already used (they
    # are predictable: item_<session>_<n>), and the session closed with 1011.
    core = _core()
    for n in range(1, 6):
        assert not _errors(_send(core, _user(id=f"item_{SID}_{n}")))
    start = _start(core, output_modalities=["text"])
    _send(core, {"type": "input_audio_buffer.append", "audio": b64(PCM_20MS)})
    ids = [item.id for item in core.conversation.items]
    assert core.live[start.response_id].item_id in ids
    assert len(ids) == len(set(ids)) == 6


def test_the_id_speech_started_announced_stays_the_turns() -> None:
    core = _core()
    started = core.vad(VadSpeechStarted(audio_start_ms=0))
    (announced,) = [o for o in started.events if isinstance(o, se.InputAudioBufferSpeechStarted)]
    (error,) = _errors(_send(core, _user(id=announced.item_id)))
    assert error.code == "item_create_duplicate_item_id"
    _send(core, {"type": "input_audio_buffer.append", "audio": b64(PCM_20MS)})
    committed = _send(core, {"type": "input_audio_buffer.commit"})
    assert [o.item_id for o in committed.events if isinstance(o, se.InputAudioBufferCommitted)] == [
        announced.item_id
    ]


def test_a_reply_slot_deleted_and_its_id_reused_is_left_alone_when_the_reply_ends() -> None:
    # Was: ValueError ("not an assistant reply") when history was written into the client's
    # new user item, and the session closed with 1011.
    core = _core()
    _send(core, _user())
    start = _start(core, output_modalities=["text"])
    slot = core.live[start.response_id].item_id
    assert not _errors(_send(core, {"type": "conversation.item.delete", "item_id": slot}))
    assert not _errors(_send(core, _user("mine", id=slot)))
    core.backend(BackendText(start.response_id, start.seq, "hello"))
    out = core.backend(BackendDone(start.response_id, start.seq, output_tokens=1))
    assert [o.response.status for o in out.events if isinstance(o, se.ResponseDone)] == [
        "completed"
    ]
    assert core.conversation.get(slot) == conv.Item(slot, "user", (conv.InputText("mine"),))


def _truncate_while_generating(core: SessionCore, start: StartBackend, how: str) -> Step:
    rid = start.response_id
    if how == "truncate":
        item_id = core.live[rid].item_id
        event = {"type": "conversation.item.truncate", "item_id": item_id, "content_index": 0}
        return _send(core, {**event, "audio_end_ms": 0})
    return _send(
        core, {"type": "playback.ack", "response_id": rid, "played_ms": 0, "truncate": True}
    )


def test_a_reply_truncated_while_generating_frees_the_session_for_the_next_one() -> None:
    # Was: the reply ended (response.done cancelled) but the session chart stayed
    # `generating`: every response.create was refused as concurrent and a clear got no answer.
    for how in ("truncate", "ack"):
        core = _core()
        _send(core, _user())
        start = _start(core)
        out = _truncate_while_generating(core, start, how)
        assert [o.response.status for o in out.events if isinstance(o, se.ResponseDone)] == [
            "cancelled"
        ]
        cleared = _send(core, {"type": "output_audio_buffer.clear"})
        assert [type(o) for o in cleared.events] == [se.OutputAudioBufferCleared], how
        _start(core)


def test_a_binary_message_that_is_not_utf8_is_invalid_json() -> None:
    # Was: accepted, since the parser skips unknown fields unread.
    raw = b'{"type": "input_audio_buffer.clear", "event_id": "e", "junk": "\xff"}'
    err = reject(raw)
    assert (err.code, err.event_id) == ("invalid_json", "e")
    assert "UTF-8" in err.message
    ok = decode_client_event('{"type": "input_audio_buffer.clear", "x": "é"}'.encode())
    assert not isinstance(ok, ProtocolError)


def test_malformed_json_names_the_top_level_event_id_not_a_nested_one() -> None:
    # Was: the first "event_id" in the text, wherever it sat.
    head = '{"type": "session.update", "session": {"event_id": "nested"}, "event_id": "top", '
    assert reject(head + '"x": ').event_id == "top"
    assert reject('{"session": {"event_id": "nested"}, "x": [1,').event_id is None
    assert reject('[{"event_id": "in_a_list"}').event_id is None
    # A string running past the window hides whatever follows it.
    assert reject('{"audio": "' + "A" * 5000 + '", "event_id": "late"').event_id is None
    assert reject('{"event_id": "evt\\"q", "x": tru').event_id == 'evt"q'

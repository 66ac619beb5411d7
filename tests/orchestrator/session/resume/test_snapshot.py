"""SessionSnapshot (orchestrator/session/resume/snapshot.py): a session taken out of one core
and into another goes on with the same conversation, settings and ids."""

from __future__ import annotations

import base64
import json
from typing import Any

import msgspec
import pytest

from orchestrator.protocol.codec import ServerEventEncoder, decode_client_event
from orchestrator.protocol.errors import ProtocolError
from orchestrator.session.actions import StartBackend
from orchestrator.session.core import CoreConfig, SessionCore, Step
from orchestrator.session.history import conversation as conv
from orchestrator.session.inputs import BackendAudio, BackendDone, BackendText, BackendToolCall
from orchestrator.session.resume import snapshot as snap

WEATHER: dict[str, Any] = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}
IMAGE = "data:image/png;base64," + base64.b64encode(b"\x89PNG" + bytes(200)).decode()
TOKEN = "a-resume-token"


class Session:
    """A core driven through the codec, as the session actor drives it."""

    def __init__(self, core: SessionCore) -> None:
        self.core = core
        self.encoder = ServerEventEncoder()
        self.wire: list[dict[str, Any]] = []

    def step(self, step: Step) -> Step:
        self.wire += [json.loads(self.encoder.encode(e)) for e in step.events]
        return step

    def send(self, kind: str, **fields: Any) -> Step:
        event = decode_client_event(json.dumps({"type": kind, **fields}))
        assert not isinstance(event, ProtocolError), event
        return self.step(self.core.handle(event))

    def context(self) -> dict[str, Any]:
        self.send("conversation.context.retrieve")
        return self.wire[-1]

    def respond(self) -> StartBackend:
        step = self.send("response.create")
        [start] = [a for a in step.actions if isinstance(a, StartBackend)]
        return start


def user(*content: dict[str, Any]) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": list(content)}


def a_conversation() -> Session:
    s = Session(SessionCore("sess_a", CoreConfig()))
    s.step(s.core.open(0))
    s.send(
        "session.update",
        session={
            "instructions": "Be brief.",
            "tools": [WEATHER],
            "audio": {"input": {"turn_detection": None}, "output": {"voice": "ash"}},
        },
    )
    s.send("conversation.item.create", item=user({"type": "input_text", "text": "Paris?"}))
    audio = base64.b64encode(bytes(4800)).decode()
    said = {"type": "input_audio", "audio": audio, "transcript": "And what about Rome?"}
    s.send("conversation.item.create", item=user(said))
    s.send("conversation.item.create", item=user({"type": "input_audio", "audio": audio}))
    s.send("conversation.item.create", item=user({"type": "input_image", "image_url": IMAGE}))
    start = s.respond()
    rid, seq = start.response_id, start.seq
    s.step(s.core.handle(BackendText(rid, seq, "Sunny in Rome.")))
    s.step(s.core.handle(BackendAudio(rid, seq, bytes(9600), "Sunny in Rome.")))
    s.step(s.core.handle(BackendDone(rid, seq, 3)))
    call = s.respond()
    s.step(s.core.handle(BackendToolCall(call.response_id, call.seq, "get_weather", "{}")))
    s.step(s.core.handle(BackendDone(call.response_id, call.seq, 1)))
    done = "response.function_call_arguments.done"
    [call_id] = [e["call_id"] for e in s.wire if e["type"] == done]
    s.send(
        "conversation.item.create",
        item={"type": "function_call_output", "call_id": call_id, "output": '{"sky": "clear"}'},
    )
    return s


def snapshot_of(
    core: SessionCore, *, max_image_bytes: int = 1 << 20, **fields: Any
) -> snap.SessionSnapshot:
    """The snapshot of `core` as the session's checkpoints take it (the link's parts given)."""
    snapshot = snap.take(
        core.state(),
        session_id=core.session_id,
        version=1,
        identity="key",
        token=TOKEN,
        last_seq=0,
        journal=(),
        max_image_bytes=max_image_bytes,
        max_journal_bytes=1 << 20,
    )
    return msgspec.structs.replace(snapshot, **fields) if fields else snapshot


def taken_over(s: Session, *, max_image_bytes: int = 1 << 20) -> Session:
    snapshot = snapshot_of(s.core, max_image_bytes=max_image_bytes, last_seq=len(s.wire))
    back = snap.decode(snap.encode(snapshot, max_bytes=1 << 20))
    state = snap.core_state(back)
    return Session(SessionCore.restore(back.session_id, state, CoreConfig()))


def as_text(item: dict[str, Any]) -> dict[str, Any]:
    """Rule 2: what a taken-over session holds of a user's audio is its transcript."""
    if item.get("type") != "message":
        return item
    parts = []
    for part in item["content"]:
        if part["type"] == "input_audio":
            if part["transcript"]:
                parts.append({"type": "input_text", "text": part["transcript"]})
        else:
            parts.append(part)
    return {**item, "content": parts}


def test_rule1_a_session_taken_over_holds_the_same_conversation_and_settings() -> None:
    before = a_conversation()
    after = taken_over(before)
    old, new = before.context(), after.context()
    assert new["items"] == [as_text(item) for item in old["items"]]
    kinds = [i["type"] for i in new["items"]]
    assert "function_call" in kinds and "function_call_output" in kinds
    assert after.core.settings == before.core.settings
    assert after.core.settings.instructions == "Be brief." and after.core.settings.voice == "ash"


def test_rule1_new_ids_never_repeat_the_old_sessions() -> None:
    before = a_conversation()
    after = taken_over(before)
    old = {item.id for item in before.core.conversation.items}
    after.send("conversation.item.create", item=user({"type": "input_text", "text": "Thanks."}))
    start = after.respond()
    new = {item.id for item in after.core.conversation.items} - old
    assert len(new) == 2 and not new & old
    assert start.response_id not in {i.response_id for i in before.core.conversation.items}


def test_rule1_the_token_is_kept_only_as_its_digest() -> None:
    snapshot = snapshot_of(SessionCore("s"))
    assert TOKEN.encode() not in snap.encode(snapshot, 1 << 20)
    assert snap.token_matches(snapshot, TOKEN) and not snap.token_matches(snapshot, TOKEN + "x")


def test_rule2_user_audio_is_never_stored() -> None:
    before = a_conversation()
    state = before.core.state()
    data = snap.encode(snapshot_of(before.core), 1 << 20)
    audio = [p for i in state.items for p in i.content if isinstance(p, conv.InputAudio)]
    assert audio and all(len(p.audio) == 4800 for p in audio)
    assert len(data) < 4800 and base64.b64encode(bytes(4800)) not in data


def test_rule3_images_are_kept_newest_first_within_their_budget() -> None:
    one = conv.Item("u1", "user", (conv.InputImage(IMAGE), conv.InputText("first")))
    two = conv.Item("u2", "user", (conv.InputImage(IMAGE), conv.InputText("second")))
    kept = snap.items_from_snapshot(snap.items_to_snapshot((one, two), len(IMAGE) + 10))
    assert [len(item.content) for item in kept] == [1, 2]  # the older image dropped
    assert kept[0].content == (conv.InputText("first"),) and kept[1] == two


def test_rule4_a_snapshot_over_its_bound_is_refused() -> None:
    before = a_conversation()
    snapshot = snapshot_of(before.core)
    with pytest.raises(snap.SnapshotTooLarge):
        snap.encode(snapshot, 500)


@pytest.mark.parametrize(
    "data",
    [b"", b"{", b'{"format": 1}', b"[1, 2]"],
    ids=["empty", "truncated", "fields missing", "not an object"],
)
def test_rule5_bytes_that_are_no_snapshot_are_refused(data: bytes) -> None:
    with pytest.raises(snap.SnapshotUnreadable):
        snap.decode(data)


def test_rule5_a_format_this_server_does_not_know_is_refused() -> None:
    snapshot = snapshot_of(SessionCore("s"), format=snap.FORMAT + 1)
    with pytest.raises(snap.SnapshotUnreadable, match="format"):
        snap.decode(snap.encode(snapshot, 1 << 20))


def test_rule4_a_full_journal_keeps_its_newest_events_within_its_bound() -> None:
    # Was: a client that never acknowledges filled the journal (8 MiB) past the whole
    # snapshot's bound (8 MiB too), and from then on its session was never checkpointed.
    from orchestrator.session.resume.journal import JournalEntry

    entries = [JournalEntry(seq, "x" * 100) for seq in range(1, 101)]
    kept = snap.journal_to_snapshot(entries, 1000)
    assert [e.seq for e in kept] == list(range(91, 101))  # the newest, contiguous
    assert snap.journal_to_snapshot(entries, 10_000) == tuple(
        snap.JournaledEvent(e.seq, e.text) for e in entries
    )
    assert snap.journal_to_snapshot(entries, 50) == ()


def test_rule6_event_ids_go_on_after_the_snapshots_count() -> None:
    kept = snap.decode(
        snap.encode(snapshot_of(SessionCore("s"), events_named=41, last_seq=30), 1 << 20)
    )
    assert kept.events_named == 41
    # After a drain's last snapshot the client has seen exactly its events.
    assert snap.events_named(kept, client_seq=30) == 41
    # After a lost worker it may have seen more: each took one id.
    assert snap.events_named(kept, client_seq=35) == 46
    # A snapshot written before the count was kept reads as none named.
    old = msgspec.json.decode(snap.encode(snapshot_of(SessionCore("s")), 1 << 20))
    del old["events_named"]
    assert snap.decode(msgspec.json.encode(old)).events_named == 0

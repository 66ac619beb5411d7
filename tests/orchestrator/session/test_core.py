"""SessionCore scenarios, one per rule of docs/protocol.md, in memory (no sockets, no model)."""

from __future__ import annotations

from typing import Any

from orchestrator.protocol import client as ce
from orchestrator.protocol import items as wire
from orchestrator.protocol import server as se
from orchestrator.protocol.response import StatusDetails
from orchestrator.protocol.session_config import SessionPatch
from orchestrator.session.actions import CancelBackend, StartBackend
from orchestrator.session.core import CoreConfig, SessionCore, Step
from orchestrator.session.history import conversation as conv
from orchestrator.session.inputs import (
    BackendAudio,
    BackendDone,
    BackendFailed,
    VadSpeechStarted,
    VadSpeechStopped,
)

MS = 48  # bytes of pcm16 24 kHz audio per ms


def flat(out: Step) -> list[object]:
    """Actions first: the actor carries them out before it queues the step's events."""
    return [*out.actions, *out.events]


def kinds(out: Step) -> list[str]:
    return [
        str(type(o).__struct_config__.tag)
        if hasattr(type(o), "__struct_config__")
        else type(o).__name__
        for o in flat(out)
    ]


def of(out: Step, cls: type[Any]) -> list[Any]:
    return [o for o in flat(out) if isinstance(o, cls)]


class Harness:
    def __init__(self, **config: Any) -> None:
        self.core = SessionCore("t", CoreConfig(**config))
        self.core.open()
        self.clock = 0

    def speak(self, ms: int = 500) -> Step:
        out = self.core.client(ce.InputAudioBufferAppend(audio=b"\x01\x00" * 24 * ms))
        out += self.core.vad(VadSpeechStarted(self.clock))
        self.clock += ms
        out += self.core.vad(VadSpeechStopped(self.clock))
        return out

    def turn(self, audio_ms: int = 200, text: str = "Hello. ") -> tuple[str, int, str]:
        """A spoken turn answered in full: returns (response_id, seq, item_id)."""
        start = of(self.speak(), StartBackend)[0]
        rid, seq = start.response_id, start.seq
        self.core.backend(BackendAudio(rid, seq, b"\0\0" * 24 * audio_ms, text))
        self.core.backend(BackendDone(rid, seq))
        return rid, seq, self.core.ledger.item_id(rid)

    def context(self) -> se.ConversationContext:
        [event] = self.core.client(ce.ConversationContextRetrieve()).events
        assert isinstance(event, se.ConversationContext)
        return event


def test_rule1_barge_in_while_generating_cancels_clears_and_keeps_the_speech() -> None:
    h = Harness()
    start = of(h.speak(), StartBackend)[0]
    h.core.backend(BackendAudio(start.response_id, start.seq, b"\0" * 40 * MS, "Hi"))
    h.core.client(ce.InputAudioBufferAppend(audio=b"\x01\x00" * 24 * 300))
    out = h.core.vad(VadSpeechStarted(2000))
    names = kinds(out)
    assert names.index("CancelBackend") < names.index("output_audio_buffer.cleared")
    [done] = of(out, se.ResponseDone)
    assert done.response.status == "cancelled"
    assert done.response.status_details is not None
    assert done.response.status_details.reason == "turn_detected"
    # The interrupting speech becomes the next user turn and is answered.
    out = h.core.vad(VadSpeechStopped(2400))
    assert "input_audio_buffer.committed" in kinds(out) and of(out, StartBackend)


def test_rule1_barge_in_after_generation_with_unacknowledged_audio() -> None:
    h = Harness()
    rid, _, _ = h.turn()
    out = h.core.vad(VadSpeechStarted(5000))
    assert [c.response_id for c in of(out, se.OutputAudioBufferCleared)] == [rid]
    assert not of(out, se.ResponseDone) and not of(out, CancelBackend)


def test_rule1_no_barge_in_once_audio_was_fully_played() -> None:
    h = Harness()
    rid, _, _ = h.turn(audio_ms=200)
    h.core.client(ce.PlaybackAck(response_id=rid, played_ms=200))
    assert "output_audio_buffer.cleared" not in kinds(h.core.vad(VadSpeechStarted(9000)))


def test_rule2_late_output_of_interrupted_response_never_reaches_client() -> None:
    h = Harness()
    old = of(h.speak(), StartBackend)[0]
    h.core.vad(VadSpeechStarted(1000))
    new = of(h.core.vad(VadSpeechStopped(1500)), StartBackend)[0]
    assert h.core.backend(BackendAudio(old.response_id, old.seq, b"\0" * MS * 20)) == Step()
    assert h.core.backend(BackendDone(old.response_id, old.seq)) == Step()
    first = h.core.backend(BackendAudio(new.response_id, new.seq, b"\0" * MS * 20, "a"))
    second = h.core.backend(BackendAudio(new.response_id, new.seq, b"\1" * MS * 20, "b"))
    deltas = of(first + second, se.ResponseOutputAudioDelta)
    assert [d.delta[:1] for d in deltas] == [b"\0", b"\1"]  # newer output kept, in order


def test_rule3_cancel_with_nothing_active_is_harmless_error_with_event_id() -> None:
    h = Harness()
    [err] = h.core.client(ce.ResponseCancel(event_id="evt_9")).events
    assert isinstance(err, se.ErrorEvent)
    assert err.error.code == "response_cancel_not_active" and err.error.event_id == "evt_9"


def test_rule3_cancel_of_running_response_yields_one_cancelled_terminal() -> None:
    h = Harness()
    start = of(h.speak(), StartBackend)[0]
    out = h.core.client(ce.ResponseCancel())
    out += h.core.client(ce.ResponseCancel())
    out += h.core.backend(BackendDone(start.response_id, start.seq))
    assert [d.response.status for d in of(out, se.ResponseDone)] == ["cancelled"]


def test_rule3_a_reply_the_pipeline_cut_short_ends_incomplete_with_its_reason() -> None:
    # Was: `completed`, whatever cut it (the pipeline's END_REASON: max_output_tokens, or the
    # Talker's slot out of room). Now as OpenAI: `incomplete`, status_details with the reason,
    # the item `incomplete`, and its content closed (what it said is all it says).
    h = Harness()
    start = of(h.speak(), StartBackend)[0]
    rid, seq = start.response_id, start.seq
    h.core.backend(BackendAudio(rid, seq, b"\0\0" * 24 * 200, "Once upon a"))
    out = h.core.backend(BackendDone(rid, seq, 3, "max_output_tokens"))
    [done] = of(out, se.ResponseDone)
    assert done.response.status == "incomplete"
    assert done.response.status_details == StatusDetails(
        type="incomplete", reason="max_output_tokens"
    )
    [item] = done.response.output
    assert isinstance(item, wire.MessageItem) and item.status == "incomplete"
    assert [e.item.status for e in of(out, se.ResponseOutputItemDone)] == ["incomplete"]
    [transcript] = of(out, se.ResponseOutputAudioTranscriptDone)
    assert transcript.transcript == "Once upon a"
    assert of(out, se.ResponseContentPartDone) and of(out, se.ResponseOutputAudioDone)


def test_rule5_a_reply_cut_short_by_the_pipeline_is_heard_as_it_was_played() -> None:
    h = Harness()
    start = of(h.speak(), StartBackend)[0]
    rid, seq = start.response_id, start.seq
    h.core.backend(BackendAudio(rid, seq, b"\0\0" * 24 * 200, "Once upon a"))
    h.core.backend(BackendDone(rid, seq, 3, "max_output_tokens"))
    item_id = h.core.ledger.item_id(rid)
    [ack] = h.core.client(ce.PlaybackAck(response_id=rid, item_id=item_id, played_ms=200)).events
    assert isinstance(ack, se.PlaybackAcknowledged) and ack.history_committed
    assert h.core.conversation.get(item_id).content == (conv.OutputAudio("Once upon a", 200),)


def test_rule4_clear_of_older_response_never_interrupts_newer() -> None:
    h = Harness()
    old, _, _ = h.turn()
    h.core.client(ce.SessionUpdate(session=SessionPatch(turn_detection=None)))
    h.core.client(ce.InputAudioBufferAppend(audio=b"\x01\x00" * 24 * 300))
    new = of(h.core.client(ce.InputAudioBufferCommit(create_response=True)), StartBackend)[0]
    out = h.core.client(ce.OutputAudioBufferClear(response_id=old))
    assert [c.response_id for c in of(out, se.OutputAudioBufferCleared)] == [old]
    assert not of(out, CancelBackend) and not of(out, se.ResponseDone)
    assert of(
        h.core.backend(BackendAudio(new.response_id, new.seq, b"\0" * MS)),
        se.ResponseOutputAudioDelta,
    )


def test_rule4_clear_of_latest_generating_interrupts_it() -> None:
    h = Harness()
    start = of(h.speak(), StartBackend)[0]
    out = h.core.client(ce.OutputAudioBufferClear())
    assert of(out, CancelBackend) == [CancelBackend(start.response_id, start.seq)]
    assert [d.response.status for d in of(out, se.ResponseDone)] == ["cancelled"]


def test_rule5_reply_enters_history_only_after_full_ack() -> None:
    h = Harness()
    rid, _, item_id = h.turn(audio_ms=200, text="Hello there.")
    [ack] = h.core.client(ce.PlaybackAck(response_id=rid, played_ms=120)).events
    assert isinstance(ack, se.PlaybackAcknowledged) and not ack.history_committed
    assert h.core.conversation.get(item_id).is_empty_boundary
    [ack] = h.core.client(ce.PlaybackAck(response_id=rid, item_id=item_id, played_ms=200)).events
    assert isinstance(ack, se.PlaybackAcknowledged) and ack.history_committed
    assert h.core.conversation.get(item_id).content == (conv.OutputAudio("Hello there.", 200),)


def test_rule5_late_full_ack_fills_the_slot_in_its_original_position() -> None:
    h = Harness()
    h.core.client(ce.SessionUpdate(session=SessionPatch(turn_detection=None)))
    h.core.client(ce.InputAudioBufferAppend(audio=b"\x01\x00" * 24 * 300))
    start = of(h.core.client(ce.InputAudioBufferCommit(create_response=True)), StartBackend)[0]
    rid = start.response_id
    h.core.client(ce.PlaybackAck(response_id=rid, played_ms=0))  # a client that acknowledges
    h.core.backend(BackendAudio(rid, start.seq, b"\0" * MS * 100, "One."))
    h.core.backend(BackendDone(rid, start.seq))
    h.core.client(ce.InputAudioBufferAppend(audio=b"\x01\x00" * 24 * 300))
    h.core.client(ce.InputAudioBufferCommit())
    roles = [i.role for i in h.context().items]
    assert roles == ["user", "assistant", "user"]  # empty boundary keeps the turns apart
    assert h.context().items[1].content == ()
    h.core.client(ce.PlaybackAck(response_id=rid, played_ms=100))
    items = h.context().items
    assert [i.role for i in items] == ["user", "assistant", "user"]
    assert items[1].content == (wire.OutputAudio(transcript="One."),)


def test_rule5_truncate_is_never_undone_by_a_later_ack() -> None:
    h = Harness()
    rid, _, item_id = h.turn(audio_ms=200)
    out = h.core.client(
        ce.ConversationItemTruncate(item_id=item_id, content_index=0, audio_end_ms=80)
    )
    assert kinds(out) == ["Checkpoint", "conversation.item.truncated"]  # rule 9
    h.core.client(ce.PlaybackAck(response_id=rid, played_ms=200))
    [part] = h.core.conversation.get(item_id).content
    assert isinstance(part, conv.OutputAudio) and part.audio_ms == 80


def test_rule5_a_truncate_within_the_last_partial_ms_takes_all_the_audio() -> None:
    """The ledger counts whole ms of a reply (688 of 688.5); a client that rounds what it
    played up (the OpenAI Agents SDK: 689) means all of it, and is not refused; a ms more is."""
    h = Harness()
    start = of(h.speak(), StartBackend)[0]
    rid, seq = start.response_id, start.seq
    h.core.backend(BackendAudio(rid, seq, b"\0\0" * (24 * 688 + 12), "Hello. "))
    h.core.backend(BackendDone(rid, seq))
    item_id = h.core.ledger.item_id(rid)
    over = h.core.client(
        ce.ConversationItemTruncate(item_id=item_id, content_index=0, audio_end_ms=690)
    )
    assert kinds(over) == ["error"], "a whole ms past the audio"
    out = h.core.client(
        ce.ConversationItemTruncate(item_id=item_id, content_index=0, audio_end_ms=689)
    )
    assert kinds(out) == ["Checkpoint", "conversation.item.truncated"]
    [part] = h.core.conversation.get(item_id).content
    assert isinstance(part, conv.OutputAudio) and part.audio_ms == 688


def test_rule5_clear_is_never_undone_by_an_ack_after_its_grace() -> None:
    h = Harness()
    rid, _, item_id = h.turn(audio_ms=200)
    h.core.client(ce.PlaybackAck(response_id=rid, played_ms=0))  # a client that acknowledges
    cleared_at = h.core._now_ms
    h.core.client(ce.OutputAudioBufferClear(response_id=rid))
    late = cleared_at + h.core.config.ack_grace_ms
    h.core.handle(ce.PlaybackAck(response_id=rid, played_ms=200), late)
    assert h.core.conversation.get(item_id).is_empty_boundary


def test_rule6_six_turns_prune_whole_turns_and_keep_current_input_last() -> None:
    h = Harness()
    rids = []
    for _ in range(6):
        rid, _, _ = h.turn(audio_ms=100)
        h.core.client(ce.PlaybackAck(response_id=rid, played_ms=100))
        rids.append(rid)
    h.speak()  # the current input, its response now generating
    ctx = h.context()
    assert ctx.audio_inputs == 4
    users = [i for i in ctx.items if i.role == "user"]
    assert len(users) == 4 and ctx.items[-2].role == "user"
    assert ctx.items[-1].role == "assistant" and ctx.items[-1].content == ()


def test_rule7_unknown_item_ids_get_openais_codes_and_session_goes_on() -> None:
    h = Harness()
    for event, code, doing in (
        (ce.ConversationItemDelete(item_id="nope", event_id="e1"), "delete", "deleting"),
        (ce.ConversationItemRetrieve(item_id="nope", event_id="e1"), "retrieve", "retrieving"),
        (
            ce.ConversationItemTruncate(
                item_id="nope", content_index=0, audio_end_ms=0, event_id="e1"
            ),
            "truncate",
            "truncating",
        ),
    ):
        [err] = h.core.client(event).events
        assert isinstance(err, se.ErrorEvent)
        assert (err.error.code, err.error.event_id) == (f"item_{code}_invalid_item_id", "e1")
        assert err.error.message == f"Error {doing} item: the item with id 'nope' does not exist."
    assert of(h.speak(), StartBackend)


def test_rule7_playback_ack_errors() -> None:
    h = Harness()
    rid, _, _ = h.turn()
    [err] = h.core.client(ce.PlaybackAck(response_id="resp_x", played_ms=1)).events
    assert isinstance(err, se.ErrorEvent) and err.error.code == "playback_item_not_found"
    [err] = h.core.client(ce.PlaybackAck(response_id=rid, item_id="item_x", played_ms=1)).events
    assert isinstance(err, se.ErrorEvent) and err.error.code == "playback_item_mismatch"
    [ack] = h.core.client(ce.PlaybackAck(response_id=rid, played_ms=150)).events
    [back] = h.core.client(ce.PlaybackAck(response_id=rid, played_ms=50)).events
    assert isinstance(back, se.PlaybackAcknowledged) and isinstance(ack, se.PlaybackAcknowledged)
    assert back.played_ms == ack.played_ms == 150  # backwards cursor ignored, not an error


def test_rule7_empty_commit_is_an_error() -> None:
    h = Harness()
    [err] = h.core.client(ce.InputAudioBufferCommit(event_id="c1")).events
    assert isinstance(err, se.ErrorEvent)
    assert (err.error.code, err.error.event_id) == ("input_audio_buffer_commit_empty", "c1")


def test_rule8_backend_failure_reports_failed_and_next_response_works() -> None:
    h = Harness()
    start = of(h.speak(), StartBackend)[0]
    out = h.core.backend(BackendFailed(start.response_id, start.seq, "triton unreachable"))
    [done] = of(out, se.ResponseDone)
    assert done.response.status == "failed"
    assert done.response.status_details is not None
    assert done.response.status_details.error is not None
    assert done.response.status_details.error.message == "triton unreachable"
    rid, _, _ = h.turn()
    assert rid != start.response_id


def test_manual_commit_bridge_non_final_commit_keeps_buffering() -> None:
    h = Harness()
    h.core.client(ce.SessionUpdate(session=SessionPatch(turn_detection=None)))
    h.core.client(ce.InputAudioBufferAppend(audio=b"\x01\x00" * 24 * 100))
    assert h.core.client(ce.InputAudioBufferCommit(final=False)) == Step()
    h.core.client(ce.InputAudioBufferAppend(audio=b"\x01\x00" * 24 * 100))
    out = h.core.client(ce.InputAudioBufferCommit(final=True, create_response=True))
    assert len(of(out, StartBackend)) == 1
    [user] = [i for i in h.core.conversation.items if i.role == "user"]
    [audio] = user.content
    assert isinstance(audio, conv.InputAudio) and len(audio.audio) == 200 * MS


def test_rule4_every_clear_is_answered_exactly_once() -> None:
    h = Harness()
    for target in (None, "resp_unknown"):  # nothing live at all
        out = h.core.client(ce.OutputAudioBufferClear(response_id=target))
        assert len(of(out, se.OutputAudioBufferCleared)) == 1
    rid, _, _ = h.turn()  # draining: generated, not yet played
    out = h.core.client(ce.OutputAudioBufferClear())
    assert [c.response_id for c in of(out, se.OutputAudioBufferCleared)] == [rid]
    out = h.core.client(ce.OutputAudioBufferClear(response_id=rid))  # already cleared
    assert [c.response_id for c in of(out, se.OutputAudioBufferCleared)] == [rid]


def test_speech_started_names_the_item_its_commit_creates() -> None:
    h = Harness()
    h.core.client(ce.InputAudioBufferAppend(audio=b"\x01\x00" * 24 * 300))
    [started] = of(h.core.vad(VadSpeechStarted(0)), se.InputAudioBufferSpeechStarted)
    assert not of(h.core.vad(VadSpeechStarted(100)), se.InputAudioBufferSpeechStarted)
    [committed] = of(h.core.vad(VadSpeechStopped(300)), se.InputAudioBufferCommitted)
    assert committed.item_id == started.item_id

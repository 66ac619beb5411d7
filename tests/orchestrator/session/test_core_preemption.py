"""SessionCore with preemptive responses (docs/protocol.md "Semantic end of turn and
preemptive responses"), driven in memory: the backend's stream, VAD answers, transcripts and
the turn model with the caller's clock."""

from __future__ import annotations

from typing import Any

from orchestrator.protocol import client as ce
from orchestrator.protocol import items as wire
from orchestrator.protocol import server as se
from orchestrator.protocol.codec import ServerEventEncoder
from orchestrator.protocol.session_config import SemanticVad, ServerVad, SessionPatch
from orchestrator.session.actions import CancelBackend, PredictTurn, StartBackend, Transcribe
from orchestrator.session.core import CoreConfig, SessionCore, Step
from orchestrator.session.core_types import PreemptNoted
from orchestrator.session.inputs import (
    BackendAudio,
    BackendDone,
    BackendFailed,
    TranscriptReady,
    TurnPrediction,
)
from tests.orchestrator.session.core_driver import CoreDriver, of, types

MS = 48  # pcm16 24 kHz bytes per ms


class Session(CoreDriver):
    def __init__(
        self, vad: ServerVad | SemanticVad | None = None, *, cascade: bool = False, **cfg: Any
    ) -> None:
        config = CoreConfig(
            turn_model=True, transcriber=cascade, transcripts_for_pipeline=cascade, **cfg
        )
        self.sent: list[str] = []
        self.wire: list[bytes] = []
        self.encoder = ServerEventEncoder()
        super().__init__(SessionCore("t", config))
        vad = vad or ServerVad(preemptive_response=True)
        self.handle(ce.SessionUpdate(session=SessionPatch(turn_detection=vad)))

    def handle(self, event: Any) -> Step:
        step = super().handle(event)
        self.sent.extend(types(step))
        self.wire.extend(self.encoder.encode(e) for e in step.events)
        return step

    def silence_until(self, cls: type[Any], max_ms: int = 640) -> tuple[Step, Any]:
        out = Step()
        for _ in range(max_ms // 32):
            step = self.speak(32, 0.0)
            out = out + step
            found = of(step, cls)
            if found:
                return out, found[0]
        raise AssertionError(f"no {cls.__name__} within {max_ms} ms of silence")


def preempted(s: Session) -> tuple[Step, StartBackend]:
    s.speak(640, 1.0)
    return s.silence_until(StartBackend)


def test_preemptive_response_starts_at_the_candidate_pause_and_sends_nothing() -> None:
    s = Session()
    out, start = preempted(s)
    assert not types(out)  # no event at all: the turn is not over
    assert PreemptNoted("started") in out.notes
    # It hears the conversation and the turn so far, under the id its commit will take.
    [turn] = start.request.items
    assert turn.role == "user" and turn.content
    speech_started = next(e for e in s.sent if e == "input_audio_buffer.speech_started")
    assert speech_started
    # Its stream's output is held, not sent.
    assert not types(s.handle(BackendAudio(start.response_id, start.seq, b"\0\0" * 24 * 200)))


def test_adopted_at_the_commit_after_committed_with_its_output_replayed_in_order() -> None:
    s = Session()
    _, start = preempted(s)
    rid, seq = start.response_id, start.seq
    s.handle(BackendAudio(rid, seq, b"\x01\x00" * 24 * 100, "Hello"))
    s.handle(BackendAudio(rid, seq, b"\x02\x00" * 24 * 100, " there."))
    s.handle(BackendDone(rid, seq, 3))
    out, _ = s.silence_until(se.InputAudioBufferCommitted)
    seen = types(out)
    assert seen.index("input_audio_buffer.committed") < seen.index("response.created")
    assert not of(out, StartBackend)  # its stream runs already: not asked twice
    deltas = of(out, se.ResponseOutputAudioDelta)
    assert [d.delta for d in deltas] == [b"\x01\x00" * 24 * 100, b"\x02\x00" * 24 * 100]
    [done] = of(out, se.ResponseDone)
    assert done.response.id == rid and done.response.status == "completed"
    assert PreemptNoted("used") in out.notes
    # The committed user item is the one the response heard.
    [committed] = of(out, se.InputAudioBufferCommitted)
    assert committed.item_id == start.request.items[-1].id


def test_adopted_stream_goes_on_as_the_response() -> None:
    s = Session()
    _, start = preempted(s)
    s.silence_until(se.InputAudioBufferCommitted)
    out = s.handle(BackendAudio(start.response_id, start.seq, b"\0\0" * 24 * 50))
    assert types(out) == ["response.output_audio.delta"]


def test_dropped_when_the_user_speaks_on_and_nothing_of_it_is_ever_sent() -> None:
    s = Session()
    _, start = preempted(s)
    rid, seq = start.response_id, start.seq
    s.handle(BackendAudio(rid, seq, b"\0\0" * 24 * 100))
    out = s.speak(96, 1.0)
    assert CancelBackend(rid, seq) in of(out, CancelBackend)
    assert PreemptNoted("dropped", "speech_resumed") in out.notes
    # Its late output never reaches the wire; the turn goes on and ends as usual.
    assert not types(s.handle(BackendAudio(rid, seq, b"\0\0" * 24 * 100)))
    assert not types(s.handle(BackendDone(rid, seq)))
    out, again = s.silence_until(StartBackend)  # a fresh preemption at the next pause
    assert again.response_id != rid
    out, _ = s.silence_until(se.InputAudioBufferCommitted)
    [created] = of(out, se.ResponseCreated)
    assert created.response.id == again.response_id
    assert not [e for e in s.wire if rid.encode() in e]  # never named on the wire


def test_a_client_item_drops_it_and_the_commit_starts_a_fresh_response() -> None:
    """What it was given changed: a fresh response hears the new context."""
    s = Session()
    _, start = preempted(s)
    item = wire.MessageItem(role="user", content=(wire.InputText(text="By the way..."),))
    out = s.handle(ce.ConversationItemCreate(item=item))
    assert PreemptNoted("dropped", "context_changed") in out.notes
    assert of(out, CancelBackend)
    out, _ = s.silence_until(se.InputAudioBufferCommitted)
    [fresh] = of(out, StartBackend)
    assert fresh.response_id != start.response_id
    assert len(fresh.request.items) == 2


def test_a_failed_stream_drops_it_and_the_commit_starts_a_fresh_response() -> None:
    s = Session()
    _, start = preempted(s)
    out = s.handle(BackendFailed(start.response_id, start.seq, "backend_error"))
    assert PreemptNoted("dropped", "failed") in out.notes and not types(out)
    out, _ = s.silence_until(se.InputAudioBufferCommitted)
    assert of(out, StartBackend)
    assert "response.created" in types(out)


def test_held_output_is_bounded_over_it_it_is_dropped() -> None:
    s = Session(preempt_max_bytes=24 * MS * 100)
    _, start = preempted(s)
    rid, seq = start.response_id, start.seq
    out = Step()
    for _ in range(30):
        out = out + s.handle(BackendAudio(rid, seq, b"\0\0" * 24 * 100))
    assert PreemptNoted("dropped", "overflow") in out.notes
    assert not types(out)


def test_a_commit_without_a_response_drops_it() -> None:
    """A client's own commit does not answer (create_response unset): nothing to adopt."""
    s = Session()
    preempted(s)
    out = s.handle(ce.InputAudioBufferCommit())
    assert "input_audio_buffer.committed" in types(out) and "response.created" not in types(out)
    assert PreemptNoted("dropped", "not_answered") in out.notes


def test_no_preemption_while_a_response_is_generating() -> None:
    """Rule 3: one response at a time (interrupt_response off keeps the reply going)."""
    s = Session(ServerVad(preemptive_response=True, interrupt_response=False))
    s.handle(ce.ResponseCreate())
    s.speak(640, 1.0)
    out = s.speak(320, 0.0)
    assert [a for a in of(out, StartBackend)] == []


def test_without_preemptive_response_nothing_starts_before_the_commit() -> None:
    s = Session(ServerVad())
    s.speak(640, 1.0)
    out = s.speak(320, 0.0)
    assert not of(out, StartBackend)


def test_semantic_vad_adopts_when_the_model_ends_the_turn() -> None:
    s = Session(SemanticVad(preemptive_response=True))
    s.speak(640, 1.0)
    out, start = s.silence_until(StartBackend)
    [ask] = of(out, PredictTurn)
    s.speak(480, 0.0)  # past medium's sure wait (600 ms)
    out = s.handle(TurnPrediction(ask.token, 0.9))
    [created] = of(out, se.ResponseCreated)
    assert created.response.id == start.response_id


def test_cascade_transcribes_the_turn_first_and_the_commit_reuses_its_transcript() -> None:
    """The cascade hears the turn through its transcript: asked once, at the pause; the
    stream starts with it, and it becomes the committed turn's transcript."""
    s = Session(cascade=True)
    s.speak(640, 1.0)
    out, ask = s.silence_until(Transcribe)
    assert ask.purpose == "preempt" and not of(out, StartBackend)
    out = s.handle(TranscriptReady(ask.item_id, "Book a table.", None, 0.8, "preempt", ask.token))
    [start] = of(out, StartBackend)
    assert start.transcripts == {ask.item_id: "Book a table."}
    out, _ = s.silence_until(se.InputAudioBufferCommitted)
    assert not of(out, Transcribe)  # not transcribed twice
    [created] = of(out, se.ResponseCreated)
    assert created.response.id == start.response_id
    assert s.core.conversation.get(ask.item_id).content[0].transcript == "Book a table."  # type: ignore[union-attr]


def test_cascade_adopted_before_its_transcript_starts_once_it_arrives() -> None:
    s = Session(cascade=True)
    s.speak(640, 1.0)
    _, ask = s.silence_until(Transcribe)
    out, _ = s.silence_until(se.InputAudioBufferCommitted)
    assert "response.created" in types(out) and not of(out, StartBackend)
    out = s.handle(TranscriptReady(ask.item_id, "Book a table.", None, 0.8, "preempt", ask.token))
    [start] = of(out, StartBackend)
    assert start.transcripts[ask.item_id] == "Book a table."

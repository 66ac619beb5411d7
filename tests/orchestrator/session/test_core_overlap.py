"""SessionCore in pause mode (docs/protocol.md "Interruption policy"), driven in memory: VAD
probabilities, partial transcripts and timer expiries with the caller's clock (`now_ms`)."""

from __future__ import annotations

from typing import Any

from orchestrator.protocol import client as ce
from orchestrator.protocol import server as se
from orchestrator.protocol.session_config import Interruption, ServerVad, SessionPatch
from orchestrator.session.actions import ArmTimer, CancelBackend, Transcribe
from orchestrator.session.core import CoreConfig, SessionCore, Step
from orchestrator.session.inputs import (
    BackendAudio,
    BackendDone,
    TimerFired,
    TranscriptReady,
)
from tests.orchestrator.session.core_driver import CoreDriver, of, types

MS = 48


class Session(CoreDriver):
    """A pause-mode session with one generating response; the clock is advanced by hand."""

    def __init__(self, *, transcriber: bool = True, mode: str = "pause", **policy: Any) -> None:
        super().__init__(SessionCore("t", CoreConfig(transcriber=transcriber)))
        interruption = Interruption(mode=mode, **policy)  # type: ignore[arg-type]
        vad = ServerVad(silence_duration_ms=300, prefix_padding_ms=100, interruption=interruption)
        self.handle(ce.SessionUpdate(session=SessionPatch(turn_detection=vad)))
        self.handle(ce.ResponseCreate())
        self.last = Step()

    def audio(self, ms: int) -> Step:
        rid, seq = self.rid_seq
        return self.handle(BackendAudio(rid, seq, b"\0\0" * 24 * ms))

    @property
    def rid_seq(self) -> tuple[str, int]:
        live = self.core.live
        rid = next(iter(live))
        return rid, live[rid].seq


def start(**policy: Any) -> tuple[Session, list[Any]]:
    s = Session(**policy)
    s.audio(500)
    out = s.speak(96, 1.0)
    return s, types(out)


def test_pause_onset_sends_speech_started_then_paused_and_cancels_nothing() -> None:
    s, seen = start()
    assert seen[:2] == ["input_audio_buffer.speech_started", "output_audio_buffer.paused"]
    assert not of(s.last, CancelBackend)
    # The backend goes on: its deltas still reach the client (it queues them).
    assert types(s.audio(100)) == ["response.output_audio.delta"]


def test_pause_asks_partials_at_most_one_in_flight() -> None:
    s, _ = start()
    asks = of(s.speak(320, 1.0), Transcribe)
    assert [a.purpose for a in asks] == ["overlap"]  # the first still in flight
    [ask] = asks
    # The overlap's audio from its onset with prefix padding (16 kHz samples).
    assert ask.audio16k.shape[0] >= 16 * 100
    out = s.handle(TranscriptReady(ask.item_id, "Yeah.", None, 0.1, "overlap", ask.token))
    # An answer that is not a backchannel would decide; this one keeps the pause.
    assert not of(out, se.OverlapDecision)


def test_pause_backchannel_resumes_and_commits_nothing() -> None:
    s, _ = start()
    [ask] = of(s.speak(320, 1.0), Transcribe)
    s.handle(TranscriptReady(ask.item_id, "Yeah.", None, 0.1, "overlap", ask.token))
    stopped = s.speak(416, 0.0)
    assert "input_audio_buffer.speech_stopped" in types(stopped)
    assert "input_audio_buffer.committed" not in types(stopped)
    [resume] = [
        a for a in stopped.actions if isinstance(a, ArmTimer) and a.kind == "overlap_resume"
    ]
    s.now = resume.deadline_ms
    out = s.handle(TimerFired("overlap_resume", resume.token))
    [decision] = of(out, se.OverlapDecision)
    assert (decision.decision, decision.reason, decision.transcript) == (
        "resume",
        "backchannel",
        "Yeah.",
    )
    assert types(out) == ["overlap.decision", "output_audio_buffer.resumed"]
    assert s.core.buffered_ms == 0  # dropped from the input buffer
    # Nothing of the response was lost or stopped.
    assert s.core.chart.is_generating and not of(out, CancelBackend)


def test_pause_resume_counts_from_the_end_of_speech() -> None:
    s, _ = start(resume_after_ms=1500)
    stopped = s.speak(416, 0.0)
    [resume] = of(stopped, ArmTimer)
    # The VAD's 300 ms of silence already count towards resume_after_ms.
    assert resume.deadline_ms - s.now <= 1500 - 300 + 32


def test_pause_words_at_min_speech_interrupt_as_rule1() -> None:
    s, _ = start(min_speech_ms=400)
    [ask] = of(s.speak(192, 1.0), Transcribe)
    pending = of(
        s.handle(TranscriptReady(ask.item_id, "Tell", None, 0.1, "overlap", ask.token)), Transcribe
    )
    # Words heard before min_speech_ms wait for the partial asked there (its grace).
    out = s.speak(256, 1.0)
    assert not of(out, se.OverlapDecision)
    for _ in range(3):  # answer each partial in flight until the one asked at min_speech_ms
        [fresh] = pending + of(out, Transcribe)
        pending = []
        out = s.handle(TranscriptReady(fresh.item_id, "Tell me", None, 0.1, "overlap", fresh.token))
        if of(out, se.OverlapDecision):
            break
    [decision] = of(out, se.OverlapDecision)
    assert (decision.decision, decision.reason) == ("interrupt", "speech")
    assert decision.speech_ms >= 400
    assert of(out, CancelBackend)
    seen = types(out)
    assert seen.index("overlap.decision") < seen.index("output_audio_buffer.cleared")
    [done] = of(out, se.ResponseDone)
    assert done.response.status_details is not None
    assert done.response.status_details.reason == "turn_detected"
    # The speech is the next user turn: committed at its end, with all its audio.
    ended = s.speak(384, 0.0)
    assert "input_audio_buffer.committed" in types(ended)


def test_pause_grace_timer_then_interrupt_without_transcript() -> None:
    s = Session()
    s.audio(500)
    out = s.speak(448, 1.0)
    graces = [a for a in out.actions if isinstance(a, ArmTimer) and a.kind == "overlap_grace"]
    assert len(graces) == 1 and graces[0].deadline_ms <= s.now + 150
    assert not of(out, se.OverlapDecision)
    s.now = graces[0].deadline_ms
    fired = s.handle(TimerFired("overlap_grace", graces[0].token))
    [decision] = of(fired, se.OverlapDecision)
    assert (decision.decision, decision.reason, decision.transcript) == (
        "interrupt",
        "speech",
        None,
    )


def test_pause_without_transcriber_decides_on_duration_at_min_speech() -> None:
    s = Session(transcriber=False)
    s.audio(500)
    out = s.speak(448, 1.0)
    assert not of(out, Transcribe)
    [decision] = of(out, se.OverlapDecision)
    assert decision.decision == "interrupt" and decision.transcript is None


def test_pause_short_speech_resumes_with_reason_short() -> None:
    s = Session()
    s.audio(500)
    s.speak(160, 1.0)
    stopped = s.speak(416, 0.0)
    [resume] = [a for a in stopped.actions if isinstance(a, ArmTimer)]
    s.now = resume.deadline_ms
    [decision] = of(s.handle(TimerFired("overlap_resume", resume.token)), se.OverlapDecision)
    assert (decision.decision, decision.reason) == ("resume", "short")


def test_pause_noise_past_min_speech_is_not_an_interruption() -> None:
    s = Session()
    s.audio(500)
    [ask] = of(s.speak(288, 1.0), Transcribe)
    s.handle(TranscriptReady(ask.item_id, "", None, 0.1, "overlap", ask.token))
    out = s.speak(320, 1.0)
    assert not of(out, se.OverlapDecision)
    for a in of(out, Transcribe):
        s.handle(TranscriptReady(a.item_id, " ", None, 0.1, "overlap", a.token))
    stopped = s.speak(416, 0.0)
    [resume] = [
        a for a in stopped.actions if isinstance(a, ArmTimer) and a.kind == "overlap_resume"
    ]
    s.now = resume.deadline_ms
    [decision] = of(s.handle(TimerFired("overlap_resume", resume.token)), se.OverlapDecision)
    assert (decision.decision, decision.reason) == ("resume", "noise")


def test_pause_late_partial_of_an_old_overlap_is_ignored() -> None:
    s = Session()
    s.audio(500)
    [ask] = of(s.speak(288, 1.0), Transcribe)
    s.handle(ce.OutputAudioBufferClear())  # ends the pause (interrupt, client)
    late = s.handle(TranscriptReady(ask.item_id, "Stop now", None, 0.1, "overlap", ask.token))
    assert late.events == () and late.actions == ()


def test_pause_rule4_clear_while_paused_decides_client_then_v1() -> None:
    s = Session()
    s.audio(500)
    s.speak(96, 1.0)
    out = s.handle(ce.OutputAudioBufferClear())
    assert types(out)[:3] == [
        "overlap.decision",
        "output_audio_buffer.cleared",
        "response.output_item.done",
    ]
    [decision] = of(out, se.OverlapDecision)
    assert (decision.decision, decision.reason) == ("interrupt", "client")
    assert of(out, CancelBackend)


def test_pause_finish_while_paused_drains_after_resume_nothing_lost() -> None:
    s = Session()
    s.audio(500)
    s.speak(96, 1.0)
    rid, seq = s.rid_seq
    assert types(s.audio(200)) == ["response.output_audio.delta"]
    done = s.handle(BackendDone(rid, seq))
    assert [e.response.status for e in of(done, se.ResponseDone)] == ["completed"]
    assert "paused_draining" in s.core.chart.active
    stopped = s.speak(416, 0.0)
    [resume] = [
        a for a in stopped.actions if isinstance(a, ArmTimer) and a.kind == "overlap_resume"
    ]
    s.now = resume.deadline_ms
    s.handle(TimerFired("overlap_resume", resume.token))
    assert "draining" in s.core.chart.active
    acked = s.handle(ce.PlaybackAck(response_id=rid, played_ms=700))
    [ack] = of(acked, se.PlaybackAcknowledged)
    assert ack.history_committed


def test_immediate_mode_is_v1() -> None:
    s = Session(mode="immediate")
    s.audio(500)
    seen = types(s.speak(96, 1.0))
    assert seen[:2] == ["input_audio_buffer.speech_started", "output_audio_buffer.cleared"]
    assert "output_audio_buffer.paused" not in seen and "overlap.decision" not in seen

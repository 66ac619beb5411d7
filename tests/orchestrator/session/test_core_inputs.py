"""SessionCore's own inputs and actions (besides client events): turn detection, the idle
timer, transcripts, the cascade's transcript wait, the session's end, input formats.

Driven in memory with the caller's clock (`now_ms`); each test names the rule it guards.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from orchestrator.protocol import client as ce
from orchestrator.protocol import server as se
from orchestrator.protocol.session_config import PCM16, PCMU, ServerVad, SessionPatch, Transcription
from orchestrator.session.actions import (
    ArmTimer,
    CancelBackend,
    CancelTimer,
    DetectSpeech,
    SessionEnd,
    StartBackend,
    Transcribe,
)
from orchestrator.session.audio import decode_input, ulaw_encode
from orchestrator.session.core import CoreConfig, SessionCore, Step
from orchestrator.session.history import conversation as conv
from orchestrator.session.inputs import (
    BackendAudio,
    BackendDone,
    BackendText,
    CloseRequested,
    SpeechProbabilities,
    TimerFired,
    TranscriptReady,
    VadDown,
)

MS = 48  # bytes of pcm16 24 kHz audio per ms


def of(step: Step, cls: type[Any]) -> list[Any]:
    return [o for o in (*step.actions, *step.events) if isinstance(o, cls)]


def _tone(ms: int, rate: int = 24000) -> np.ndarray:
    t = np.arange(rate * ms // 1000) / rate
    return (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)


def _pcm16(x: np.ndarray) -> bytes:
    return (np.clip(x, -1, 1) * 32767).astype("<i2").tobytes()


def _vad(**fields: Any) -> ce.SessionUpdate:
    return ce.SessionUpdate(session=SessionPatch(turn_detection=ServerVad(**fields)))


def _speak(core: SessionCore, ms: int, prob: float, now_ms: int = 0) -> Step:
    """Append `ms` of audio and answer its DetectSpeech with one probability for every chunk."""
    step = core.handle(ce.InputAudioBufferAppend(audio=b"\x01\x00" * 24 * ms), now_ms)
    out = step
    for detect in of(step, DetectSpeech):
        answer = SpeechProbabilities((prob,) * len(detect.chunks), detect.chunk_end_ms)
        out = out + core.handle(answer, now_ms)
    return out


def _answered_turn(core: SessionCore, audio_ms: int = 200, now_ms: int = 0) -> Step:
    out = _speak(core, 300, 1.0, now_ms) + _speak(core, 700, 0.0, now_ms)
    [start] = of(out, StartBackend)
    core.handle(BackendAudio(start.response_id, start.seq, b"\0\0" * 24 * audio_ms), now_ms)
    return out + core.handle(BackendDone(start.response_id, start.seq), now_ms)


def test_turn_detection_runs_in_the_core_on_vad_probabilities() -> None:
    core = SessionCore("t")
    core.open()
    out = _speak(core, 300, 1.0)
    [detect] = of(core.handle(ce.InputAudioBufferAppend(audio=b"\0\0" * 24 * 100)), DetectSpeech)
    # 100 ms at 16 kHz is 3 whole 512-sample chunks (the rest waits), ends on the input clock.
    assert all(c.shape == (512,) for c in detect.chunks)
    assert list(detect.chunk_end_ms) == sorted(detect.chunk_end_ms)
    assert of(out, se.InputAudioBufferSpeechStarted)
    out = core.handle(SpeechProbabilities((0.0,) * 20, tuple(range(400, 400 + 32 * 20, 32))))
    assert of(out, se.InputAudioBufferSpeechStopped) and of(out, StartBackend)


def test_a_manual_commit_resets_the_detector_so_the_next_turn_is_heard() -> None:
    # Was: TurnDetector.reset() was never called; after a commit during speech the detector
    # still thought the user was speaking and the next turn's speech_started never came.
    core = SessionCore("t")
    core.open()
    core.handle(_vad(create_response=False))
    assert of(_speak(core, 300, 1.0), se.InputAudioBufferSpeechStarted)
    assert of(core.handle(ce.InputAudioBufferCommit()), se.InputAudioBufferCommitted)
    assert of(_speak(core, 300, 1.0), se.InputAudioBufferSpeechStarted)


def test_a_vad_outage_is_told_once_per_outage() -> None:
    core = SessionCore("t")
    core.open()
    first = core.handle(VadDown("no endpoint"))
    assert [e.error.code for e in of(first, se.ErrorEvent)] == ["vad_unavailable"]
    assert not core.handle(VadDown("no endpoint")).events
    _speak(core, 100, 0.0)  # recovered
    assert of(core.handle(VadDown("again")), se.ErrorEvent)


def test_idle_timeout_is_the_detectors_timer_and_names_the_item_the_commit_creates() -> None:
    # Was: Trio timers with an arming counter in the actor, and timeout_triggered named an
    # item id made by hand that the following commit never created.
    core = SessionCore("t")
    core.open()
    core.handle(_vad(idle_timeout_ms=1000))
    out = _answered_turn(core, audio_ms=200, now_ms=5000)
    [arm] = [a for a in of(out, ArmTimer) if a.kind == "idle"]
    assert arm.kind == "idle" and arm.deadline_ms == 5000 + 200 + 1000
    core.handle(
        ce.InputAudioBufferAppend(audio=b"\0\0" * 24 * 50), 5500
    )  # no VAD answer: no speech
    assert not core.handle(TimerFired("idle", arm.token - 1), 6200).events  # stale arming
    fired = core.handle(TimerFired("idle", arm.token), arm.deadline_ms)
    [triggered] = of(fired, se.InputAudioBufferTimeoutTriggered)
    [committed] = of(fired, se.InputAudioBufferCommitted)
    assert committed.item_id == triggered.item_id
    assert of(fired, StartBackend) and of(fired, se.ResponseCreated)


def test_idle_timeout_counts_from_the_estimated_end_of_playout() -> None:
    # Was: armed at now + the reply's duration when the reply finished generating: for audio
    # streamed at real time (the pipelines' way), late by nearly the whole reply.
    core = SessionCore("t")
    core.open()
    core.handle(_vad(idle_timeout_ms=1000))
    out = _speak(core, 300, 1.0, 5000) + _speak(core, 700, 0.0, 5000)
    [start] = of(out, StartBackend)
    for n in range(10):  # 10 chunks of 100 ms, each sent as the last one has played
        core.handle(BackendAudio(start.response_id, start.seq, b"\0\0" * 24 * 100), 5000 + 100 * n)
    done = core.handle(BackendDone(start.response_id, start.seq), 5000 + 990)
    [arm] = [a for a in of(done, ArmTimer) if a.kind == "idle"]
    assert arm.deadline_ms == 5000 + 1000 + 1000, "from where the playout ends, not from now"


def test_speech_disarms_the_idle_timer() -> None:
    core = SessionCore("t")
    core.open()
    core.handle(_vad(idle_timeout_ms=1000))
    [arm] = [a for a in of(_answered_turn(core, now_ms=0), ArmTimer) if a.kind == "idle"]
    assert of(_speak(core, 300, 1.0, 100), CancelTimer)
    assert not core.handle(TimerFired("idle", arm.token), arm.deadline_ms).events


def test_each_committed_turn_is_transcribed_once_and_the_transcript_is_told() -> None:
    core = SessionCore("t", CoreConfig(transcriber=True))
    core.open()
    core.handle(ce.SessionUpdate(session=SessionPatch(transcription=Transcription())))
    out = _speak(core, 300, 1.0) + _speak(core, 700, 0.0)
    [job] = of(out, Transcribe)
    [committed] = of(out, se.InputAudioBufferCommitted)
    assert job.item_id == committed.item_id and job.audio16k.shape[0] == 16 * 1000
    done = core.handle(TranscriptReady(job.item_id, "hello", None, 1.0))
    [told] = of(done, se.ConversationItemInputAudioTranscriptionCompleted)
    assert told.transcript == "hello"
    [part] = core.conversation.get(job.item_id).content
    assert isinstance(part, conv.InputAudio) and part.transcript == "hello"
    failed = core.handle(TranscriptReady("item_gone", None, "model down", 1.0))
    assert of(failed, se.ConversationItemInputAudioTranscriptionFailed)


def test_the_cascade_starts_its_backend_once_the_turns_transcript_is_in() -> None:
    core = SessionCore("t", CoreConfig(transcriber=True, transcripts_for_pipeline=True))
    core.open()
    out = _speak(core, 300, 1.0, 0) + _speak(core, 700, 0.0, 0)
    [job] = of(out, Transcribe)
    assert of(out, se.ResponseCreated) and not of(out, StartBackend)
    [wait] = of(out, ArmTimer)
    assert wait.kind == "transcripts" and wait.deadline_ms == 30_000
    released = core.handle(TranscriptReady(job.item_id, "what time is it", None, 1.0), 900)
    [start] = of(released, StartBackend)
    assert start.transcripts == {job.item_id: "what time is it"}
    assert of(released, CancelTimer)


def test_the_cascade_wait_is_bounded_and_a_cancel_while_waiting_starts_nothing() -> None:
    core = SessionCore("t", CoreConfig(transcriber=True, transcripts_for_pipeline=True))
    core.open()
    [wait] = of(_speak(core, 300, 1.0) + _speak(core, 700, 0.0), ArmTimer)
    [start] = of(core.handle(TimerFired("transcripts", wait.token), wait.deadline_ms), StartBackend)
    assert start.transcripts == {}
    core.handle(BackendDone(start.response_id, start.seq))
    out = _speak(core, 300, 1.0) + _speak(core, 700, 0.0)
    [rid] = [e.response.id for e in of(out, se.ResponseCreated)]
    cancelled = core.handle(ce.ResponseCancel())
    # The backend never started: nothing to cancel there, only the wait.
    assert not of(cancelled, CancelBackend) and of(cancelled, CancelTimer)
    [done] = of(cancelled, se.ResponseDone)
    assert done.response.id == rid and done.response.status == "cancelled"
    assert not of(core.handle(TranscriptReady("x", "late", None, 1.0)), StartBackend)


def test_close_ends_the_generating_response_then_says_why_then_ends_the_session() -> None:
    core = SessionCore("t")
    core.open()
    [start] = of(_speak(core, 300, 1.0) + _speak(core, 700, 0.0), StartBackend)
    out = core.handle(CloseRequested("server_shutting_down"))
    assert of(out, CancelBackend) == [CancelBackend(start.response_id, start.seq)]
    kinds = [type(e).__name__ for e in out.events]
    assert kinds.index("ResponseDone") < kinds.index("ErrorEvent")
    [error] = of(out, se.ErrorEvent)
    assert error.error.code == "server_shutting_down" and error.error.type == "server_error"
    assert of(out, SessionEnd) == [
        SessionEnd(1001, "server is shutting down", "server_shutting_down")
    ]


def test_a_cancel_with_nothing_live_is_the_charts_rejection() -> None:
    core = SessionCore("t")
    core.open()
    [error] = of(core.handle(ce.ResponseCancel(event_id="c1")), se.ErrorEvent)
    assert error.error.code == "response_cancel_not_active" and error.error.event_id == "c1"


def test_input_audio_keeps_its_format_across_a_switch() -> None:
    # Was: every response decoded all history audio with the session's current format, so a
    # pcmu turn became noise after a switch to pcm.
    core = SessionCore("t", CoreConfig(transcriber=True))
    core.open()
    core.handle(ce.SessionUpdate(session=SessionPatch(turn_detection=None, input_format=PCMU)))
    core.handle(ce.SessionUpdate(session=SessionPatch(transcription=Transcription())))
    tone8k = _tone(500, 8000)
    pcmu = ulaw_encode((tone8k * 32767).astype(np.int16))
    core.handle(ce.InputAudioBufferAppend(audio=pcmu))
    [first] = of(core.handle(ce.InputAudioBufferCommit()), Transcribe)
    core.handle(ce.SessionUpdate(session=SessionPatch(input_format=PCM16)))
    core.handle(ce.InputAudioBufferAppend(audio=_pcm16(_tone(500))))
    core.handle(ce.InputAudioBufferCommit())
    [start] = of(core.handle(ce.ResponseCreate()), StartBackend)
    parts = [p for item in start.request.items for p in item.content]
    assert [p.format for p in parts if isinstance(p, conv.InputAudio)] == [PCMU, PCM16]
    for part in parts:
        assert isinstance(part, conv.InputAudio)
        heard = decode_input(part.audio, part.format)
        # Both turns decode to the same 220 Hz tone at 16 kHz, not to noise.
        assert abs(len(heard) - 8000) < 50
        spectrum = np.abs(np.fft.rfft(heard))
        assert abs(np.argmax(spectrum) * 16000 / len(heard) - 220) < 5
    assert abs(first.audio16k.shape[0] - 8000) < 50


def test_two_turns_in_one_vad_answer_never_commit_an_empty_turn() -> None:
    # Found by the in-memory fuzzer: the first commit takes the whole buffer; the second turn
    # heard in the same answer lies in audio already committed and must not be a new turn
    # (it was an empty user item, and with transcription a crash).
    core = SessionCore("t", CoreConfig(transcriber=True))
    core.open()
    core.handle(ce.SessionUpdate(session=SessionPatch(transcription=Transcription())))
    step = core.handle(ce.InputAudioBufferAppend(audio=b"\x01\x00" * 24 * 3000))
    [detect] = of(step, DetectSpeech)
    pattern = ([0.9] * 16 + [0.1] * 22) * 3
    probs = tuple(pattern[: len(detect.chunks)])
    out = core.handle(SpeechProbabilities(probs, detect.chunk_end_ms))
    [committed] = of(out, se.InputAudioBufferCommitted)
    [job] = of(out, Transcribe)
    assert job.item_id == committed.item_id and job.audio16k.size
    users = [i for i in core.conversation.items if i.role == "user"]
    assert all(i.content for i in users)


def _reply_with_unaligned_text(core: SessionCore) -> tuple[str, str]:
    core.handle(ce.SessionUpdate(session=SessionPatch(turn_detection=None)))
    core.handle(ce.InputAudioBufferAppend(audio=b"\x01\x00" * 24 * 300))
    [start] = of(core.handle(ce.InputAudioBufferCommit(create_response=True)), StartBackend)
    rid, seq = start.response_id, start.seq
    # Qwen3-Omni's Thinker text runs ahead of the Talker's audio: text, then audio, unaligned.
    core.handle(BackendText(rid, seq, "One sentence. Two sentences."))
    core.handle(BackendAudio(rid, seq, b"\0\0" * 24 * 1000))
    core.handle(BackendDone(rid, seq))
    return rid, core.ledger.item_id(rid)


def test_rule5_unaligned_text_is_heard_only_with_the_whole_reply() -> None:
    core = SessionCore("t")
    core.open()
    rid, item_id = _reply_with_unaligned_text(core)
    core.handle(ce.PlaybackAck(response_id=rid, played_ms=1000))
    assert core.conversation.get(item_id).content == (
        conv.OutputAudio("One sentence. Two sentences.", 1000),
    )


def test_rule5_a_cut_drops_unaligned_text() -> None:
    # Where the pipeline cannot say where words end, the cut sentence's text is dropped: a
    # cut reply keeps its heard audio's length and none of the text it cannot place.
    core = SessionCore("t")
    core.open()
    rid, item_id = _reply_with_unaligned_text(core)
    core.handle(ce.PlaybackAck(response_id=rid, played_ms=400, truncate=True))
    assert core.conversation.get(item_id).content == (conv.OutputAudio(None, 400),)

"""Pause mode end to end (docs/protocol.md "Interruption policy"): the real server on the `null`
pipeline (a long steady reply), the real `vad` and `asr` models in Triton, flite speech.

- A backchannel ("yeah") pauses the reply and resumes it: one `overlap.decision` `resume`, no
  `input_audio_buffer.committed` for it, nothing cancelled or cleared.
- A short noise burst never interrupts: at most a pause that resumes.
- A sentence interrupts as rule 1: `overlap.decision` `interrupt`, `output_audio_buffer.cleared`,
  `response.done` cancelled / `turn_detected`, and the speech committed as the next turn.
- Real voices (bench/human_speech.py, the packages `make test` installs): a man's laugh over
  the reply never stops it (hedgewars' `Mobster/Laugh.ogg`, which Whisper writes "hahaha");
  a woman's "no" (asterisk's `vm-no.wav`, 0.4 s) interrupts by its interrupt word, before
  `min_speech_ms` of speech.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from scipy.signal import butter, sosfilt

from bench import human_speech
from orchestrator.protocol.session_config import DEFAULT_BACKCHANNELS, DEFAULT_INTERRUPT_WORDS
from orchestrator.service.config import ServiceConfig
from orchestrator.service.serve import BackgroundServer
from orchestrator.session.turns.overlap import classify
from orchestrator.triton import TritonServer
from tests.conftest import free_port
from tests.e2e.realtime_client import RATE, RawSession, flite_speech, raw_session, silence


@pytest.fixture(scope="module")
def null_server(triton_server: TritonServer) -> Iterator[BackgroundServer]:
    config = ServiceConfig(port=free_port(), triton_urls=(triton_server.grpc_url,), pipeline="null")
    with BackgroundServer(config) as server:
        yield server


def _pause_mode(session: RawSession, max_output_tokens: int = 300) -> None:
    session.send(
        {
            "type": "session.update",
            "session": {
                "type": "realtime",
                "output_modalities": ["audio"],
                # The null pipeline sends one 80 ms chunk per token: 24 s of reply by default.
                "max_output_tokens": max_output_tokens,
                "audio": {
                    "input": {
                        "turn_detection": {
                            "type": "server_vad",
                            "silence_duration_ms": 400,
                            "prefix_padding_ms": 200,
                            "interruption": {"mode": "pause", "resume_after_ms": 1200},
                        }
                    }
                },
            },
        }
    )
    updated = session.until("session.updated", timeout_s=10)
    detection = updated["session"]["audio"]["input"]["turn_detection"]
    assert detection["interruption"]["mode"] == "pause"


def _speaking(session: RawSession) -> str:
    session.send({"type": "response.create"})
    rid: str = session.until("response.created")["response"]["id"]
    session.until("response.output_audio.delta", response_id=rid, timeout_s=30)
    return rid


def _after(events: list[dict[str, Any]], since: int, kind: str) -> list[dict[str, Any]]:
    return [e for e in events[since:] if e["type"] == kind]


def _noise_burst(seconds: float) -> np.ndarray:
    rng = np.random.default_rng(7)
    sos = butter(4, [300, 3000], btype="bandpass", fs=RATE, output="sos")
    burst = sosfilt(sos, rng.standard_normal(int(seconds * RATE)))
    return (0.3 * burst / np.max(np.abs(burst))).astype(np.float32)


def test_backchannel_pauses_then_resumes_and_is_never_a_turn(
    null_server: BackgroundServer,
) -> None:
    with raw_session(null_server.url) as session:
        _pause_mode(session)
        rid = _speaking(session)
        since = len(session.events)
        session.append(
            np.concatenate([silence(0.3), flite_speech("yeah"), silence(2.0)]), realtime=True
        )
        decision = session.first("overlap.decision", since, timeout_s=15)
        resumed = session.first("output_audio_buffer.resumed", since, timeout_s=5)
        session.send({"type": "response.cancel"})
        session.first("response.done", since, timeout_s=10)
        events = session.events
    started = _after(events, since, "input_audio_buffer.speech_started")
    paused = _after(events, since, "output_audio_buffer.paused")
    assert started and paused and paused[0]["response_id"] == rid
    assert events.index(started[0]) < events.index(paused[0])
    assert (decision["response_id"], decision["decision"]) == (rid, "resume")
    # Recognised from what was said; only a partial that did not come back before the resume
    # (a starved CPU) leaves the duration's word for it.
    assert decision["reason"] == "backchannel" or (
        decision["reason"] == "short" and decision["transcript"] is None
    ), decision
    assert resumed["response_id"] == rid
    assert len(_after(events, since, "overlap.decision")) == 1
    # Never a user turn, and nothing of the reply stopped before the client's own cancel.
    assert not _after(events, since, "input_audio_buffer.committed")
    cut = events.index(resumed)
    assert not _after(events[:cut], since, "output_audio_buffer.cleared")
    assert _after(events[:cut], events.index(paused[0]), "response.output_audio.delta")


def test_short_noise_burst_never_interrupts(null_server: BackgroundServer) -> None:
    with raw_session(null_server.url) as session:
        # This test waits for the reply's end, which the null pipeline reaches in real time:
        # 10 s (125 tokens) still outlasts the 2.75 s of input and the decision after it by
        # seconds, where the default 24 s only made the test wait 14 s more.
        _pause_mode(session, max_output_tokens=125)
        rid = _speaking(session)
        since = len(session.events)
        session.append(
            np.concatenate([silence(0.3), _noise_burst(0.25), silence(2.2)]), realtime=True
        )
        # The reply plays on to its end (10 s of audio), untouched by the burst.
        session.first(
            "response.done", since, timeout_s=60, where=lambda e: e["response"]["id"] == rid
        )
        events = list(session.events)
    assert not _after(events, since, "output_audio_buffer.cleared")
    done = [e for e in _after(events, since, "response.done") if e["response"]["id"] == rid]
    assert [e["response"]["status"] for e in done] == ["completed"]
    assert not _after(events, since, "input_audio_buffer.committed")
    decisions = _after(events, since, "overlap.decision")
    assert len(decisions) == len(_after(events, since, "output_audio_buffer.paused"))
    for decision in decisions:
        assert decision["decision"] == "resume" and decision["reason"] in ("short", "noise")


def test_sentence_interrupts_as_rule1_and_becomes_the_next_turn(
    null_server: BackgroundServer,
) -> None:
    # No interrupt word: the words decide at min_speech_ms.
    sentence = flite_speech("I have a different question about the weather tomorrow.")
    with raw_session(null_server.url) as session:
        _pause_mode(session)
        rid = _speaking(session)
        since = len(session.events)
        session.append(np.concatenate([silence(0.3), sentence, silence(1.0)]), realtime=True)
        decision = session.first("overlap.decision", since, timeout_s=15)
        cleared = session.first("output_audio_buffer.cleared", since, timeout_s=10)
        done = session.first(
            "response.done", since, timeout_s=10, where=lambda e: e["response"]["id"] == rid
        )
        committed = session.first("input_audio_buffer.committed", since, timeout_s=15)
        events = session.events
    assert (decision["response_id"], decision["decision"], decision["reason"]) == (
        rid,
        "interrupt",
        "speech",
    )
    assert decision["speech_ms"] >= 400
    assert cleared["response_id"] == rid
    assert events.index(decision) < events.index(cleared)
    assert done["response"]["status"] == "cancelled"
    assert done["response"]["status_details"]["reason"] == "turn_detected"
    # Rule 2: no delta of the interrupted reply after its clear.
    late = [
        e
        for e in events[events.index(cleared) + 1 :]
        if e.get("response_id") == rid and e["type"].endswith(".delta")
    ]
    assert not late
    # The speech is the next user turn: the item speech_started promised is committed.
    [started] = _after(events, since, "input_audio_buffer.speech_started")[:1]
    assert committed["item_id"] == started["item_id"]


def _human(recording: human_speech.Recording, peak: float = 0.5) -> np.ndarray:
    audio = human_speech.spoken(recording.audio, RATE)
    return (peak * audio / max(float(np.max(np.abs(audio))), 1e-9)).astype(np.float32)


def test_a_human_laugh_over_the_reply_never_stops_it(null_server: BackgroundServer) -> None:
    # A laugh the VAD hears as a second of speech, and Whisper writes "hahahahaha": before the
    # laugh rule, those were words and the reply was cut.
    laugh = human_speech.hedgewars("Mobster", "Laugh", RATE)
    with raw_session(null_server.url) as session:
        _pause_mode(session)
        rid = _speaking(session)
        since = len(session.events)
        session.append(np.concatenate([silence(0.3), _human(laugh), silence(2.5)]), realtime=True)
        # Loud enough for the VAD: it pauses the reply, and the one decision resumes it.
        decision = session.first("overlap.decision", since, timeout_s=15)
        resumed = session.first("output_audio_buffer.resumed", since, timeout_s=5)
        events = list(session.events)
        session.send({"type": "response.cancel"})
        session.first("response.done", since, timeout_s=10)
    assert (decision["response_id"], decision["decision"]) == (rid, "resume"), decision
    assert decision["reason"] in ("noise", "short", "backchannel"), decision
    assert decision["speech_ms"] >= 400, "long enough that only what was heard can resume it"
    assert resumed["response_id"] == rid
    assert not _after(events, since, "output_audio_buffer.cleared"), "a laugh cleared the reply"
    assert not _after(events, since, "input_audio_buffer.committed"), "a laugh became a turn"


def test_a_human_no_interrupts_by_its_word_before_min_speech(
    null_server: BackgroundServer,
) -> None:
    no = human_speech.asterisk("vm-no", RATE)
    with raw_session(null_server.url) as session:
        _pause_mode(session)
        rid = _speaking(session)
        since = len(session.events)
        session.append(np.concatenate([silence(0.3), _human(no), silence(1.2)]), realtime=True)
        decision = session.first("overlap.decision", since, timeout_s=15)
        cleared = session.first("output_audio_buffer.cleared", since, timeout_s=10)
    assert (decision["response_id"], decision["decision"], decision["reason"]) == (
        rid,
        "interrupt",
        "speech",
    ), decision
    assert cleared["response_id"] == rid
    heard = decision["transcript"]
    assert isinstance(heard, str), "decided by what was heard, not by duration"
    assert classify(heard, DEFAULT_BACKCHANNELS, DEFAULT_INTERRUPT_WORDS) == "urgent", heard
    # Under the 400 ms a sentence needs: before this rule, "no" resumed as `short`.
    assert decision["speech_ms"] < 400, decision

"""The whole service against the real thing: tritonserver, the cascade, hypercorn, sockets.

Driven with the official `openai` SDK where it can express the case, raw WebSocket JSON where
it cannot (playback ACKs are a Turntaker extension).
"""

from __future__ import annotations

import base64
import re

import httpx
import numpy as np
import soxr

from orchestrator.service.serve import BackgroundServer
from orchestrator.session.audio import float_to_pcm16, pcm16_to_float, ulaw_decode, ulaw_encode
from orchestrator.triton import TritonServer
from tests.e2e.realtime_client import (
    ENDED,
    b64,
    flite_speech,
    pcm16,
    raw_session,
    sdk_events_until_done,
    sdk_realtime,
    silence,
    transcribe,
)

QUESTION = "What is the capital of France?"


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z']+", text.lower())


def test_a_spoken_question_gets_one_spoken_answer_through_the_openai_sdk(
    realtime_server: BackgroundServer, triton_server: TritonServer
) -> None:
    audio = pcm16(np.concatenate([silence(0.5), flite_speech(QUESTION), silence(1.2)]))
    with sdk_realtime(realtime_server.http_url) as conn:
        conn.session.update(
            session={
                "type": "realtime",
                "output_modalities": ["audio"],
                "audio": {
                    "input": {
                        "format": {"type": "audio/pcm", "rate": 24000},
                        "turn_detection": {"type": "server_vad", "silence_duration_ms": 500},
                    },
                    "output": {"format": {"type": "audio/pcm", "rate": 24000}},
                },
            }
        )
        step = 4800  # 100 ms of pcm16 at 24 kHz
        for start in range(0, len(audio), step):
            conn.input_audio_buffer.append(audio=b64(audio[start : start + step]))
        events = sdk_events_until_done(conn)
    kinds = [e.type for e in events]
    done = [e for e in events if e.type == "response.done"]
    assert len(done) == 1 and done[0].response.status == "completed", done[
        0
    ].response.status_details
    for expected in (
        "input_audio_buffer.speech_started",
        "input_audio_buffer.speech_stopped",
        "input_audio_buffer.committed",
        "response.created",
        "response.output_audio.delta",
        "response.output_audio_transcript.delta",
    ):
        assert expected in kinds, f"{expected} missing; got {sorted(set(kinds))}"
    assert (
        kinds.index("input_audio_buffer.speech_started")
        < kinds.index("input_audio_buffer.speech_stopped")
        < kinds.index("input_audio_buffer.committed")
        < kinds.index("response.created")
    )
    done = [e for e in events if e.type == "response.done"]
    assert len(done) == 1 and done[0].response.status == "completed", done[
        0
    ].response.status_details
    started = next(e for e in events if e.type == "input_audio_buffer.speech_started")
    stopped = next(e for e in events if e.type == "input_audio_buffer.speech_stopped")
    speech_ms = len(flite_speech(QUESTION)) * 1000 // 24000
    # The question starts at 500 ms; start includes the 300 ms prefix padding.
    assert 100 <= started.audio_start_ms <= 500, started
    assert stopped.audio_end_ms >= 500 + speech_ms - 100, (stopped, speech_ms)
    answer = b"".join(
        base64.b64decode(e.delta) for e in events if e.type == "response.output_audio.delta"
    )
    transcript = "".join(
        e.delta for e in events if e.type == "response.output_audio_transcript.delta"
    )
    assert len(answer) > 24000 * 2 // 2, "less than half a second of answer audio"
    heard = _words(transcribe(triton_server.grpc_url, answer))
    said = _words(transcript)
    assert heard, "Whisper heard no words in the answer audio"
    overlap = len(set(heard) & set(said)) / max(1, len(set(said)))
    assert overlap >= 0.5, (heard, said)


def test_health_readiness_and_metrics_endpoints(realtime_server: BackgroundServer) -> None:
    base = realtime_server.http_url
    assert httpx.get(f"{base}/healthz").json() == {"status": "ok"}
    ready = httpx.get(f"{base}/readyz")
    assert ready.status_code == 200 and ready.json()["ready"] is True
    metrics = httpx.get(f"{base}/metrics").text
    for name in (
        "turntaker_sessions_active",
        "turntaker_responses_total",
        "turntaker_time_to_first_audio_seconds",
        "turntaker_barge_in_latency_seconds",
    ):
        assert name in metrics


def test_bad_json_gets_a_clear_error_and_the_session_goes_on(
    realtime_server: BackgroundServer,
) -> None:
    with raw_session(realtime_server.url) as session:
        session.ws.send("{not json")
        error = session.until("error", timeout_s=10)
        assert error["error"]["code"] == "invalid_json"
        session.send({"type": "conversation.context.retrieve", "event_id": "ctx1"})
        session.until("conversation.context", timeout_s=10)


def test_g711_mu_law_in_and_out_is_heard_and_answered(
    realtime_server: BackgroundServer, triton_server: TritonServer
) -> None:
    speech8k = np.concatenate(
        [silence(0.4, 8000), flite_speech(QUESTION, rate=8000), silence(1.0, 8000)]
    )
    mulaw = ulaw_encode((np.clip(speech8k, -1, 1) * 32767).astype(np.int16))
    with raw_session(realtime_server.url) as session:
        session.send(
            {
                "type": "session.update",
                "session": {
                    "type": "realtime",
                    "max_output_tokens": 24,
                    "audio": {
                        "input": {
                            "format": {"type": "audio/pcmu"},
                            "transcription": {"model": "whisper-base"},
                        },
                        "output": {"format": {"type": "audio/pcmu"}},
                    },
                },
            }
        )
        session.until("session.updated", timeout_s=10)
        for start in range(0, len(mulaw), 800):  # 100 ms of 8 kHz mu-law
            session.send(
                {"type": "input_audio_buffer.append", "audio": b64(mulaw[start : start + 800])}
            )
        stopped = session.until("input_audio_buffer.speech_stopped", timeout_s=30)
        transcript = session.until(
            "conversation.item.input_audio_transcription.completed", timeout_s=60
        )
        done = session.until("response.done", timeout_s=90)
    assert transcript["item_id"] == stopped["item_id"]
    assert {"capital", "france"} <= set(_words(transcript["transcript"])), transcript
    assert done["response"]["status"] in ENDED, done["response"]
    rid = done["response"]["id"]
    answer = b"".join(
        base64.b64decode(e["delta"])
        for e in session.of("response.output_audio.delta")
        if e["response_id"] == rid
    )
    said = "".join(
        e["delta"]
        for e in session.of("response.output_audio_transcript.delta")
        if e["response_id"] == rid
    )
    # One byte per 8 kHz sample: mu-law as asked, and Whisper still hears the words in it.
    as_pcm16 = float_to_pcm16(
        np.asarray(soxr.resample(pcm16_to_float(ulaw_decode(answer)), 8000, 24000))
    ).tobytes()
    heard = set(_words(transcribe(triton_server.grpc_url, as_pcm16)))
    assert heard and len(heard & set(_words(said))) / max(1, len(set(_words(said)))) >= 0.5


def test_idle_timeout_prompts_a_response_after_the_reply_has_played(
    realtime_server: BackgroundServer,
) -> None:
    with raw_session(realtime_server.url) as session:
        session.send(
            {
                "type": "session.update",
                "session": {
                    "type": "realtime",
                    "max_output_tokens": 12,
                    "audio": {
                        "input": {"turn_detection": {"type": "server_vad", "idle_timeout_ms": 700}}
                    },
                },
            }
        )
        session.until("session.updated", timeout_s=10)
        session.append(np.concatenate([silence(0.3), flite_speech(QUESTION), silence(0.8)]))
        done = session.until("response.done", timeout_s=90)
        assert done["response"]["status"] in ENDED, done["response"]
        finished = session.times[-1]
        reply_ms = sum(
            len(base64.b64decode(e["delta"])) // 48
            for e in session.of("response.output_audio.delta")
        )
        session.until("input_audio_buffer.timeout_triggered", timeout_s=reply_ms / 1000 + 10)
        fired = session.times[-1]
        again = session.until("response.created", timeout_s=10)
    # Not before the reply could have been heard in full plus the idle time.
    assert fired - finished >= (reply_ms + 700) / 1000 - 0.05, (fired - finished, reply_ms)
    assert again["response"]["id"] != done["response"]["id"]

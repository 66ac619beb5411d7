"""A speakerphone end to end (docs/protocol.md "Echo cancellation and noise reduction"): the
real server on the cascade (Triton's `vad`, `asr`, `llm`, `tts`), and a client that plays each
answer at real time and hears it back through a room (bench/rooms.py) in its microphone: the
speakerphone client the echo bench measures with (bench/speakerphone.py).

- Echo cancellation off: the answer's own echo is speech to the VAD, and it barges in.
- Echo cancellation on (the client acknowledging playback as docs/protocol.md asks of a
  speakerphone): the same echo never starts speech; the answer plays to its end.
- On, and the user really speaks over the echo: that interrupts at once.
- On, the server's /metrics counts the chunks heard over the echo by the echo rule that held
  each (`turntaker_echo_chunks_total`): an operator sees which rule keeps the echo out.
"""

from __future__ import annotations

from typing import Any

import httpx
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from bench.rooms import EchoPath, Room
from bench.speakerphone import Speakerphone
from orchestrator.service.serve import BackgroundServer
from tests.e2e.realtime_client import (
    ENDED,
    RATE,
    RawSession,
    flite_speech,
    raw_session,
    silence,
)

ROOM = Room(delay_ms=120, rt60_s=0.3, level_db=-3.0)


def _phone(session: RawSession) -> Speakerphone:
    """The shared speakerphone client (bench/speakerphone.py), logging into `session`."""

    def log(event: dict[str, Any], at: float) -> None:
        session.events.append(event)
        session.times.append(at)

    # It acknowledges playback every 0.1 s with the input it had captured (`input_ms`), as
    # docs/protocol.md asks of a client on a speaker: the reference then follows its player.
    return Speakerphone(session.ws, EchoPath(ROOM, RATE), ack_every_s=0.1, on_event=log)


def _configure(session: RawSession, echo: bool) -> None:
    session.send(
        {
            "type": "session.update",
            "session": {
                "type": "realtime",
                "instructions": "Answer with three or four full sentences.",
                "output_modalities": ["audio"],
                "max_output_tokens": 60,
                "audio": {
                    "input": {
                        "echo_cancellation": {"type": "server"} if echo else None,
                        "turn_detection": {
                            "type": "server_vad",
                            "silence_duration_ms": 500,
                            "prefix_padding_ms": 200,
                        },
                    }
                },
            },
        }
    )
    updated = session.until("session.updated", timeout_s=10)
    shown = updated["session"]["audio"]["input"].get("echo_cancellation")
    assert shown == ({"type": "server"} if echo else None), shown


def _answer_playing(session: RawSession, phone: Speakerphone) -> str:
    """Ask a question; return the answer's id once its audio plays."""
    question = flite_speech("Tell me something about the weather in Paris.")
    phone.say(np.concatenate([question, silence(0.8)]))
    phone.run(30, until="response.output_audio.delta")
    created = session.of("response.created")
    assert created, "no answer started"
    return str(created[-1]["response"]["id"])


def _timeline(session: RawSession) -> list[str]:
    """What happened when, for a failure's message (seconds since the first event)."""
    t0 = session.times[0] if session.times else 0.0
    kinds = (
        "response.created",
        "response.done",
        "input_audio_buffer.speech_started",
        "input_audio_buffer.speech_stopped",
        "output_audio_buffer.cleared",
    )
    out = []
    for event, at in zip(session.events, session.times, strict=True):
        if event["type"] in kinds:
            extra = event.get("audio_start_ms", event.get("audio_end_ms", ""))
            out.append(f"{at - t0:.2f} {event['type']} {extra}")
    return out


def _echo_chunks(server: BackgroundServer) -> dict[str, float]:
    """`turntaker_echo_chunks_total` by its `held_by` label."""
    text = httpx.get(f"{server.http_url}/metrics", timeout=10).text
    return {
        sample.labels["held_by"]: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "turntaker_echo_chunks_total"
    }


def _speech_starts_after(session: RawSession, index: int) -> list[dict[str, Any]]:
    return [e for e in session.events[index:] if e["type"] == "input_audio_buffer.speech_started"]


@pytest.mark.parametrize("echo", [False, True], ids=["cancellation-off", "cancellation-on"])
def test_the_answer_s_own_echo_barges_in_only_without_cancellation(
    realtime_server: BackgroundServer, echo: bool
) -> None:
    counted = _echo_chunks(realtime_server)
    with raw_session(realtime_server.url) as session:
        _configure(session, echo)
        phone = _phone(session)
        rid = _answer_playing(session, phone)
        since = len(session.events)
        phone.run(12, until="response.done")
        if echo:
            phone.run(4)  # the rest of the answer plays out of the loudspeaker
        else:
            # Without cancellation what is checked below (the echo's speech and the barge-in)
            # is all the rest could show: once both have come, it need not play out.
            phone.run(
                4,
                until=lambda: (
                    bool(_speech_starts_after(session, since))
                    and bool(session.of("output_audio_buffer.cleared"))
                ),
            )
        started = _speech_starts_after(session, since)
        done = [e for e in session.of("response.done") if e["response"]["id"] == rid]
        if not echo:
            assert started, "the echo of the answer should have sounded like speech"
            assert session.of("output_audio_buffer.cleared"), "and barged in"
        else:
            assert not started, (
                f"echo started speech with cancellation on: {started}; {_timeline(session)}; "
                f"played {phone.played_samples / RATE:.2f} s"
            )
            assert done and done[0]["response"]["status"] in ENDED, done
            assert not [e for e in session.of("output_audio_buffer.cleared")]
            assert phone.played_samples > RATE, "the answer played (more than a second)"
            now = _echo_chunks(realtime_server)
            held = {rule: now.get(rule, 0.0) - counted.get(rule, 0.0) for rule in ("7", "8", "10")}
            # A second of echo is 31 chunks: each held by some rule, or under the threshold.
            assert max(held.values()) >= 10, f"the echo rules held {held}"


def test_a_real_interruption_over_the_echo_still_interrupts(
    realtime_server: BackgroundServer,
) -> None:
    with raw_session(realtime_server.url) as session:
        _configure(session, echo=True)
        phone = _phone(session)
        rid = _answer_playing(session, phone)
        phone.run(0.5)  # half a second into the answer: no blind window
        since = len(session.events)
        phone.say(flite_speech("Wait, stop, I have another question.", voice="kal"))
        phone.run(6, until="output_audio_buffer.cleared")
        cleared = [e for e in session.events[since:] if e["type"] == "output_audio_buffer.cleared"]
        assert cleared and cleared[0]["response_id"] == rid, "the user's speech interrupted"
        assert _speech_starts_after(session, since)

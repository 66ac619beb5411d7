"""A speakerphone end to end (docs/protocol.md "Echo cancellation and noise reduction"): the
real server on the cascade (Triton's `vad`, `asr`, `llm`, `tts`), and a client that plays each
answer at real time and hears it back through a room (bench/rooms.py) in its microphone.

- Echo cancellation off: the answer's own echo is speech to the VAD, and it barges in.
- Echo cancellation on: the same echo never starts speech; the answer plays to its end.
- On, and the user really speaks over the echo: that interrupts at once.
"""

from __future__ import annotations

import base64
import json
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from bench.rooms import EchoPath, Room
from orchestrator.service.serve import BackgroundServer
from tests.e2e.realtime_client import RATE, RawSession, flite_speech, pcm16, raw_session, silence

TICK_MS = 20
TICK = RATE * TICK_MS // 1000
ROOM = Room(delay_ms=120, rt60_s=0.3, level_db=-3.0)


@dataclass
class Speakerphone:
    """Plays what the server sends at real time; its microphone hears the room's echo of that,
    plus whatever the user says (`say`)."""

    session: RawSession
    path: EchoPath = field(default_factory=lambda: EchoPath(ROOM, RATE))
    queued: list[np.ndarray] = field(default_factory=list)
    user: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    played_samples: int = 0

    def say(self, audio: np.ndarray) -> None:
        self.user = np.concatenate([self.user, audio.astype(np.float32)])

    def _receive(self) -> None:
        while True:
            try:
                raw = self.session.ws.recv(timeout=0)
            except TimeoutError:
                return
            event: dict[str, Any] = json.loads(raw)
            self.session.events.append(event)
            self.session.times.append(time.monotonic())
            kind = event["type"]
            if kind == "response.output_audio.delta":
                pcm = np.frombuffer(base64.b64decode(event["delta"]), "<i2")
                self.queued.append(pcm.astype(np.float32) / 32768)
            elif kind == "output_audio_buffer.cleared":
                self.queued.clear()  # the client stops playing at once

    def _played(self) -> np.ndarray:
        out = np.zeros(TICK, np.float32)
        at = 0
        while at < TICK and self.queued:
            head = self.queued[0]
            n = min(TICK - at, head.size)
            out[at : at + n] = head[:n]
            at += n
            if n == head.size:
                self.queued.pop(0)
            else:
                self.queued[0] = head[n:]
        self.played_samples += at
        return out

    def run(self, seconds: float, until: str | None = None) -> None:
        """Tick at real time for `seconds` (or until an event of type `until` came)."""
        began = time.monotonic()
        for tick in range(int(seconds * 1000 / TICK_MS)):
            time.sleep(max(0.0, began + tick * TICK_MS / 1000 - time.monotonic()))
            self._receive()
            mic = self.path(self._played())
            if self.user.size:
                n = min(TICK, self.user.size)
                mic[:n] += self.user[:n]
                self.user = self.user[n:]
            self.session.send(
                {
                    "type": "input_audio_buffer.append",
                    "audio": base64.b64encode(pcm16(mic)).decode(),
                }
            )
            if until is not None and self.session.of(until):
                return


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


def _answer_playing(phone: Speakerphone) -> str:
    """Ask a question; return the answer's id once its audio plays."""
    question = flite_speech("Tell me something about the weather in Paris.")
    phone.say(np.concatenate([question, silence(0.8)]))
    phone.run(30, until="response.output_audio.delta")
    created = phone.session.of("response.created")
    assert created, "no answer started"
    return str(created[-1]["response"]["id"])


def _speech_starts_after(session: RawSession, index: int) -> list[dict[str, Any]]:
    return [
        e for e in session.events[index:] if e["type"] == "input_audio_buffer.speech_started"
    ]


@pytest.mark.parametrize("echo", [False, True], ids=["cancellation-off", "cancellation-on"])
def test_the_answer_s_own_echo_barges_in_only_without_cancellation(
    realtime_server: BackgroundServer, echo: bool
) -> None:
    with raw_session(realtime_server.url) as session:
        _configure(session, echo)
        phone = Speakerphone(session)
        rid = _answer_playing(phone)
        since = len(session.events)
        phone.run(12, until="response.done")
        phone.run(4)  # the rest of the answer plays out of the loudspeaker
        started = _speech_starts_after(session, since)
        done = [e for e in session.of("response.done") if e["response"]["id"] == rid]
        if not echo:
            assert started, "the echo of the answer should have sounded like speech"
            assert session.of("output_audio_buffer.cleared"), "and barged in"
        else:
            assert not started, f"echo started speech with cancellation on: {started}"
            assert done and done[0]["response"]["status"] == "completed", done
            assert not [e for e in session.of("output_audio_buffer.cleared")]
            assert phone.played_samples > RATE, "the answer played (more than a second)"


def test_a_real_interruption_over_the_echo_still_interrupts(
    realtime_server: BackgroundServer,
) -> None:
    with raw_session(realtime_server.url) as session:
        _configure(session, echo=True)
        phone = Speakerphone(session)
        rid = _answer_playing(phone)
        phone.run(0.5)  # half a second into the answer: no blind window
        since = len(session.events)
        phone.say(flite_speech("Wait, stop, I have another question.", voice="kal"))
        phone.run(6, until="output_audio_buffer.cleared")
        cleared = [e for e in session.events[since:] if e["type"] == "output_audio_buffer.cleared"]
        assert cleared and cleared[0]["response_id"] == rid, "the user's speech interrupted"
        assert _speech_starts_after(session, since)

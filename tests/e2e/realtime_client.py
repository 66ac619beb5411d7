"""Helpers for driving the real server: raw WebSocket sessions and ASR of what it said.

The speech comes from `bench.speech` (flite at 24 kHz unless told, silence, pcm16), re-exported
here under the names the e2e tests use.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import soxr
import tritonclient.grpc as grpcclient
from openai import OpenAI
from openai.resources.realtime.realtime import RealtimeConnection
from websockets.exceptions import ConnectionClosed
from websockets.protocol import State
from websockets.sync.client import ClientConnection, connect

from bench.speech import RATE, Audio, pcm16, silence
from bench.speech import flite as flite_speech

__all__ = [
    "ENDED",
    "RATE",
    "WIRE_SAMPLES",
    "Audio",
    "RawSession",
    "b64",
    "flite_speech",
    "pcm16",
    "raw_session",
    "sdk_events_until_done",
    "sdk_realtime",
    "silence",
    "transcribe",
    "wire_shape",
]

# How a reply that ended on its own ends (neither cancelled nor failed): `completed`, or
# `incomplete` when the pipeline's own limit cut it short (a test's small max_output_tokens
# often does, and the tiny random Qwen3-Omni always: status_details names the reason).
ENDED = ("completed", "incomplete")

# Every server event that the tests' RawSessions receive, one sample per shape (`wire_shape`):
# tests/e2e/test_wire_parity_e2e.py runs them through the client SDKs' own schemas. Bounded:
# shapes repeat (an audio delta is one shape however many come).
WIRE_SAMPLES: dict[Any, dict[str, Any]] = {}
_MAX_WIRE_SAMPLES = 5000
# Keys whose string values are part of a shape (enums, mostly): a `status` of "failed" is
# checked apart from one of "completed".
_SHAPE_VALUES = frozenset({"type", "status", "role", "object", "reason", "decision", "code"})


def wire_shape(value: Any, key: str = "") -> Any:
    """What a schema sees of a JSON value: its keys, the types of its leaves, and the values
    of the enum-like keys."""
    if isinstance(value, dict):
        return tuple(sorted((k, wire_shape(v, k)) for k, v in value.items()))
    if isinstance(value, list):
        return ("[]", tuple(sorted({wire_shape(v, key) for v in value}, key=repr)))
    if isinstance(value, str):
        return value if key in _SHAPE_VALUES else "str"
    return type(value).__name__


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def transcribe(grpc_url: str, pcm16_24k: bytes) -> str:
    """What Whisper (the `asr` model) hears in 24 kHz pcm16 audio."""
    audio = np.frombuffer(pcm16_24k, "<i2").astype(np.float32) / 32768.0
    audio16 = np.asarray(soxr.resample(audio, RATE, 16000), np.float32)
    client = grpcclient.InferenceServerClient(grpc_url)
    samples = grpcclient.InferInput("AUDIO", [audio16.shape[0]], "FP32")
    samples.set_data_from_numpy(audio16)
    lengths = grpcclient.InferInput("AUDIO_LENGTHS", [1], "INT32")
    lengths.set_data_from_numpy(np.array([audio16.shape[0]], np.int32))
    result = client.infer("asr", [samples, lengths])
    value = result.as_numpy("TEXT").reshape(-1)[0]
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass
class RawSession:
    """A raw JSON WebSocket session with a log of every server event and when it came."""

    ws: ClientConnection
    events: list[dict[str, Any]] = field(default_factory=list)
    times: list[float] = field(default_factory=list)

    def send(self, event: dict[str, Any]) -> None:
        self.ws.send(json.dumps(event))

    def append(self, audio: Audio, chunk_ms: int = 100, *, realtime: bool = False) -> None:
        """Append in `chunk_ms` pieces; `realtime` paces them like a microphone (the server's
        timers run on the wall clock, its VAD on the audio's)."""
        data = pcm16(audio)
        step = RATE * 2 * chunk_ms // 1000
        began = time.monotonic()
        for n, start in enumerate(range(0, len(data), step)):
            if realtime:
                time.sleep(max(began + n * chunk_ms / 1000 - time.monotonic(), 0.0))
            self.send(
                {"type": "input_audio_buffer.append", "audio": b64(data[start : start + step])}
            )

    def recv(self, timeout_s: float = 30.0) -> dict[str, Any]:
        event: dict[str, Any] = json.loads(self.ws.recv(timeout=timeout_s))
        self.events.append(event)
        self.times.append(time.monotonic())
        if len(WIRE_SAMPLES) < _MAX_WIRE_SAMPLES:
            WIRE_SAMPLES.setdefault(wire_shape(event), event)
        return event

    def until(self, kind: str, timeout_s: float = 60.0, **match: Any) -> dict[str, Any]:
        """Read events until one of type `kind` (with the given fields) arrives."""
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                seen = [e["type"] for e in self.events[-30:]]
                raise TimeoutError(f"no {kind} within {timeout_s} s; last events: {seen}")
            event = self.recv(left)
            if event["type"] == kind and all(event.get(k) == v for k, v in match.items()):
                return event

    def first(
        self,
        kind: str,
        since: int = 0,
        timeout_s: float = 60.0,
        where: Callable[[dict[str, Any]], bool] = lambda _: True,
    ) -> dict[str, Any]:
        """The first event of type `kind` (and `where`) from `events[since:]` on, reading more
        as needed. Unlike `until`, an event that already arrived while the caller waited for
        something else is found, so waits can come in any order."""
        index = since
        deadline = time.monotonic() + timeout_s
        while True:
            for event in self.events[index:]:
                if event["type"] == kind and where(event):
                    return event
            index = len(self.events)
            left = deadline - time.monotonic()
            if left <= 0:
                seen = [e["type"] for e in self.events[-30:]]
                raise TimeoutError(f"no {kind} within {timeout_s} s; last events: {seen}")
            try:
                self.recv(left)
            except TimeoutError:
                continue  # the deadline check above says what was awaited and what came

    def drain(self, quiet_s: float = 0.5) -> list[dict[str, Any]]:
        """Everything that arrives until nothing has come for `quiet_s`."""
        got = []
        while True:
            try:
                got.append(self.recv(quiet_s))
            except TimeoutError:
                return got

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == kind]


@contextmanager
def raw_session(url: str) -> Iterator[RawSession]:
    with connect(url, max_size=None, open_timeout=10) as ws:
        session = RawSession(ws)
        created = session.recv()
        assert created["type"] == "session.created", created
        try:
            yield session
        finally:
            close_reading(ws)


def close_reading(ws: ClientConnection) -> None:
    """The closing handshake, reading (and dropping) what the server still sends meanwhile.

    A plain `ws.close()` on a session that still streams (a reply's audio deltas the test no
    longer reads) waits out websockets' close_timeout, 10 s, and then aborts the TCP
    connection: the receive queue (16 frames) is full, so websockets stops reading the socket
    and never sees the server's close frame. Reading on until the connection is closed lets the
    handshake complete as soon as the server answers it, as a client that reads does. A
    connection already closed or dropped (`_drop` in test_resume_e2e) is left as it is.
    """
    if ws.state is not State.OPEN:
        return
    closer = threading.Thread(target=ws.close, daemon=True)
    closer.start()
    while closer.is_alive():
        try:
            ws.recv(timeout=0.1)
        except TimeoutError:
            continue
        except ConnectionClosed:
            break
    closer.join()


@contextmanager
def sdk_realtime(http_url: str, timeout_s: float = 120) -> Iterator[RealtimeConnection]:
    """The openai SDK's own realtime client on the server at `http_url`. A stuck server must
    fail the test, not hang it: the socket is closed after `timeout_s`."""
    client = OpenAI(api_key="sk-local", base_url=http_url + "/v1")
    with client.realtime.connect(model="turntaker") as conn:
        watchdog = threading.Timer(timeout_s, conn.close)
        watchdog.start()
        try:
            yield conn
        finally:
            watchdog.cancel()


def sdk_events_until_done(conn: RealtimeConnection) -> list[Any]:
    """The SDK's parsed server events up to and including the first `response.done`."""
    events: list[Any] = []
    for event in conn:
        events.append(event)
        if event.type == "response.done":
            break
    return events

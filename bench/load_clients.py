"""The load generator's clients: realtime sessions over real WebSockets, driven by a script.

Each session is a live microphone: it streams audio in real time (`APPEND_MS` appends paced
by the wall clock), speaks a question (flite speech with its leading silence cut,
`bench.speech.flite_from_onset`, so the first append holds the speech onset), listens to the
answer while streaming silence and sending playback ACKs, and `barge_after_s` into the
answer speaks again: a barge-in. Every turn after the first measures both time to first audio
and a barge-in.

Times are `loop.time()` on the client; what is measured:
- barge-in: the append holding the onset of the interrupting speech sent -> cleared received;
- TTFA from end of speech: the last speech append sent -> first audio delta received (it
  includes the server VAD's silence window);
- TTFA from commit: `input_audio_buffer.committed` received -> first audio delta received,
  the orchestrator's own path from its turn decision to audio (compared with direct Triton);
- detection: onset sent -> `speech_started` received.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import msgspec
import numpy as np
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import WebSocketException

from bench.realtime_wire import append_pcm16
from bench.speech import RATE, Audio, pcm16

APPEND_MS = 100


@dataclass(frozen=True)
class Script:
    """The session's audio as ready-made append messages (encoded once for every session)."""

    speech: tuple[str, ...]
    silence: str
    speech_pcm: bytes

    @classmethod
    def from_audio(cls, audio: Audio) -> Script:
        step = RATE * APPEND_MS // 1000
        pcm = pcm16(np.concatenate([audio, np.zeros(-len(audio) % step, np.float32)]))
        speech = tuple(append_pcm16(pcm[i : i + 2 * step]) for i in range(0, len(pcm), 2 * step))
        return cls(speech, append_pcm16(bytes(2 * step)), pcm)


def session_update(max_tokens: int, *, server_vad: bool = True, echo: bool = False) -> str:
    """`echo`: with the server's echo cancellation on (WebRTC AEC3 on every append, its
    reference the answers' audio)."""
    turn_detection: dict[str, object] | None = (
        {"type": "server_vad", "silence_duration_ms": 500, "prefix_padding_ms": 300}
        if server_vad
        else None
    )
    audio_input: dict[str, object] = {"turn_detection": turn_detection}
    if echo:
        audio_input["echo_cancellation"] = {"type": "server"}
    return json.dumps(
        {
            "type": "session.update",
            "session": {
                "type": "realtime",
                "output_modalities": ["audio"],
                "max_output_tokens": max_tokens,
                "audio": {"input": audio_input},
            },
        }
    )


class _Response(msgspec.Struct):
    id: str
    status: str | None = None


class _Error(msgspec.Struct):
    message: str = ""
    code: str | None = None


class Event(msgspec.Struct):
    """The fields the load generator reads; audio payloads are skipped by the decoder."""

    type: str
    response: _Response | None = None
    response_id: str | None = None
    error: _Error | None = None


_decode = msgspec.json.Decoder(Event).decode


@dataclass
class Figures:
    """Everything the sessions of one run measured (seconds)."""

    barge_in: list[float] = field(default_factory=list)
    ttfa_end: list[float] = field(default_factory=list)
    ttfa_commit: list[float] = field(default_factory=list)
    detection: list[float] = field(default_factory=list)
    # How late an append left compared with its real-time schedule (client overload shows).
    send_slip: list[float] = field(default_factory=list)
    turns: int = 0
    missed_clears: int = 0
    missed_answers: int = 0
    errors: list[str] = field(default_factory=list)
    statuses: dict[str, int] = field(default_factory=dict)
    failed_sessions: int = 0
    measuring: bool = False


@dataclass
class _State:
    """What the reader saw, for the writer's script (one session)."""

    speech_end: float | None = None
    onset: float | None = None
    barge_onset: float | None = None
    committed_at: float | None = None
    current: str | None = None
    first_audio: dict[str, float] = field(default_factory=dict)
    new_audio: asyncio.Event = field(default_factory=asyncio.Event)
    cleared: asyncio.Event = field(default_factory=asyncio.Event)


async def _read(ws: ClientConnection, state: _State, figures: Figures) -> None:
    loop = asyncio.get_running_loop()
    async for raw in ws:
        at = loop.time()
        event = _decode(raw)
        kind = event.type
        if kind == "response.output_audio.delta":
            rid = event.response_id or ""
            if rid not in state.first_audio:
                state.first_audio[rid] = at
                state.current = rid
                if figures.measuring:
                    if state.speech_end is not None:
                        figures.ttfa_end.append(at - state.speech_end)
                    if state.committed_at is not None:
                        figures.ttfa_commit.append(at - state.committed_at)
                state.new_audio.set()
        elif kind == "input_audio_buffer.speech_started":
            if state.onset is not None and figures.measuring:
                figures.detection.append(at - state.onset)
            state.onset = None
        elif kind == "input_audio_buffer.committed":
            state.committed_at = at
        elif kind == "output_audio_buffer.cleared":
            if state.barge_onset is not None:
                if figures.measuring:
                    figures.barge_in.append(at - state.barge_onset)
                state.barge_onset = None
                state.cleared.set()
        elif kind == "response.done" and event.response is not None:
            if figures.measuring:
                status = event.response.status or "?"
                figures.statuses[status] = figures.statuses.get(status, 0) + 1
            if len(state.first_audio) > 64:  # bounded: only the latest responses matter
                for rid in list(state.first_audio)[:-8]:
                    del state.first_audio[rid]
        elif kind == "error" and event.error is not None and len(figures.errors) < 20:
            figures.errors.append(f"{event.error.code}: {event.error.message}")


class _Pacer:
    """Real-time sends: one append per APPEND_MS on the wall clock, slip recorded."""

    def __init__(self, ws: ClientConnection, figures: Figures) -> None:
        self.ws = ws
        self.figures = figures
        self.loop = asyncio.get_running_loop()
        self.due = self.loop.time()

    async def send(self, message: str) -> float:
        delay = self.due - self.loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        await self.ws.send(message)
        sent = self.loop.time()
        if self.figures.measuring:
            self.figures.send_slip.append(max(0.0, sent - self.due))
        self.due += APPEND_MS / 1000
        if sent - self.due > 1.0:
            self.due = sent  # far behind: do not burst to catch up, that is not a microphone
        return sent


async def run_session(
    url: str,
    script: Script,
    figures: Figures,
    *,
    start_delay: float,
    stop_at: float,
    barge_after_s: float = 1.0,
    max_tokens: int = 50,
    answer_timeout_s: float = 10.0,
    echo: bool = False,
) -> None:
    loop = asyncio.get_running_loop()
    await asyncio.sleep(start_delay)
    try:
        async with connect(url, max_size=None, compression=None, open_timeout=60) as ws:
            await ws.send(session_update(max_tokens, echo=echo))
            state = _State()
            reader = asyncio.create_task(_read(ws, state, figures))
            try:
                await _converse(
                    ws, script, state, figures, loop, stop_at, barge_after_s, answer_timeout_s
                )
            finally:
                reader.cancel()
    except (OSError, TimeoutError, WebSocketException) as error:
        figures.failed_sessions += 1
        if len(figures.errors) < 20:
            figures.errors.append(f"session failed: {error!r}")


async def _converse(
    ws: ClientConnection,
    script: Script,
    state: _State,
    figures: Figures,
    loop: asyncio.AbstractEventLoop,
    stop_at: float,
    barge_after_s: float,
    answer_timeout_s: float,
) -> None:
    pacer = _Pacer(ws, figures)
    playing = False
    while loop.time() < stop_at:
        state.cleared.clear()
        for i, message in enumerate(script.speech):
            sent = await pacer.send(message)
            if i == 0:
                state.onset = sent
                # Speech while the answer plays: the server must clear it.
                state.barge_onset = sent if playing else None
        state.speech_end = pacer.due - APPEND_MS / 1000
        if playing and figures.measuring and not state.cleared.is_set():
            # The interrupting speech has been sent whole; the clear may still be on its way.
            try:
                await asyncio.wait_for(state.cleared.wait(), 2.0)
            except TimeoutError:
                figures.missed_clears += 1
                state.barge_onset = None
        state.new_audio.clear()
        asked_at = loop.time()
        playing = False
        while loop.time() < stop_at:
            await pacer.send(script.silence)
            if state.new_audio.is_set():
                break
            if loop.time() - asked_at > answer_timeout_s:
                if figures.measuring:
                    figures.missed_answers += 1
                break
        if not state.new_audio.is_set():
            continue
        figures.turns += 1 if figures.measuring else 0
        playing = True
        rid, began = state.current, loop.time()
        acked = began
        while loop.time() - began < barge_after_s and loop.time() < stop_at:
            await pacer.send(script.silence)
            if loop.time() - acked >= 0.5 and rid is not None:
                acked = loop.time()
                played = int((acked - began) * 1000)
                await ws.send(
                    json.dumps({"type": "playback.ack", "response_id": rid, "played_ms": played})
                )


async def run_sessions(
    url: str,
    script: Script,
    sessions: int,
    warmup_s: float,
    measure_s: float,
    figures: Figures,
    on_measure: Callable[[], Awaitable[None]] | None = None,
    echo: bool = False,
) -> None:
    """`sessions` sessions started over the first two seconds; measured after the warm-up
    (`on_measure` runs as measuring begins); `echo`: with the server's echo cancellation."""
    loop = asyncio.get_running_loop()
    stop_at = loop.time() + warmup_s + measure_s
    rng = np.random.default_rng(sessions)
    delays = rng.uniform(0, min(2.0, warmup_s / 2), sessions)

    async def measure() -> None:
        await asyncio.sleep(warmup_s)
        if on_measure is not None:
            await on_measure()
        figures.measuring = True

    tasks = [asyncio.create_task(measure())] + [
        asyncio.create_task(
            run_session(url, script, figures, start_delay=d, stop_at=stop_at, echo=echo)
        )
        for d in delays
    ]
    await asyncio.gather(*tasks)


async def loop_lag(samples: list[float], stop: asyncio.Event, interval_s: float = 0.01) -> None:
    """The client process's own event-loop lag: it bounds how far client timings can be off."""
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        due = loop.time() + interval_s
        await asyncio.sleep(interval_s)
        samples.append(max(0.0, loop.time() - due))


class _Session:
    """One session driven step by step (the interruption loop): events read in order."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws

    async def until(self, *kinds: str, timeout_s: float = 30.0) -> Event:
        async with asyncio.timeout(timeout_s):
            while True:
                event = _decode(await self.ws.recv())
                if event.type in kinds:
                    return event
                if event.type == "error" and event.error is not None:
                    raise RuntimeError(f"server error: {event.error.code}: {event.error.message}")


Progress = Callable[[int], Awaitable[None]]


async def interruptions(
    url: str, script: Script, count: int, progress: Progress, every: int = 1000
) -> dict[str, int]:
    """`count` interruptions in one session, as a client with its own VAD makes them: a short
    user turn, `response.create`, and at the answer's first audio a partial playback ACK and
    `output_audio_buffer.clear`. Each must end in `cleared` and one `response.done`."""
    statuses: dict[str, int] = {}
    commit = json.dumps({"type": "input_audio_buffer.commit"})
    create = json.dumps({"type": "response.create"})
    clear = json.dumps({"type": "output_audio_buffer.clear"})
    async with connect(url, max_size=None, compression=None, open_timeout=60) as ws:
        session = _Session(ws)
        await ws.send(session_update(max_tokens=5, server_vad=False))
        await session.until("session.updated")
        for n in range(1, count + 1):
            await ws.send(script.speech[0])
            await ws.send(commit)
            await ws.send(create)
            delta = await session.until("response.output_audio.delta")
            rid = delta.response_id
            ack = {"type": "playback.ack", "response_id": rid, "played_ms": 20}
            await ws.send(json.dumps(ack))
            await ws.send(clear)
            seen_done = seen_clear = False
            while not (seen_done and seen_clear):
                event = await session.until("response.done", "output_audio_buffer.cleared")
                if event.type == "response.done" and event.response is not None:
                    if event.response.id == rid:
                        seen_done = True
                        status = event.response.status or "?"
                        statuses[status] = statuses.get(status, 0) + 1
                else:
                    seen_clear = True
            if n % every == 0:
                await progress(n)
    return statuses


async def open_close(url: str, count: int, progress: Progress, every: int = 100) -> None:
    """`count` sessions opened, configured and closed one after another."""
    for n in range(1, count + 1):
        async with connect(url, max_size=None, compression=None, open_timeout=60) as ws:
            await ws.send(session_update(max_tokens=5))
            await _Session(ws).until("session.updated")
        if n % every == 0:
            await progress(n)

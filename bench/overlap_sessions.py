"""One realtime session per overlap item: an answer plays, the microphone carries the overlap.

What a session does (`run_item`), as a live client:
- configures server VAD with the interruption policy under test (`Policy`), then asks for an
  answer (a user text item and `response.create`; the `null` pipeline answers with a quiet
  tone at real-time pace, `max_output_tokens` chunks of 80 ms, long enough to still be
  generating when any decision is due);
- streams room tone from the start in 20 ms appends paced by the wall clock (a microphone),
  and at the first append due `offset_s` after the answer's first audio delta arrived, mixes
  the overlap in; that append's send time is the overlap's onset (its first sample is the
  append's first sample);
- plays the answer as a client would: the cursor runs with the wall clock from the first
  audio, stands still between `output_audio_buffer.paused` and `.resumed`, never passes what
  has arrived, and is ACKed (`playback.ack`) every 0.5 s;
- stops once the answer was interrupted (`output_audio_buffer.cleared` or a cancelled
  `response.done` for it) and 0.3 s have passed, or once it completed and, if it was paused,
  its one `overlap.decision` arrived; or at a deadline.
Every event time is the client's `loop.time()` at receipt.
"""

from __future__ import annotations

import asyncio
import json
import math
from dataclasses import dataclass, field
from typing import Any, Literal

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import WebSocketException

from bench.overlap_corpus import OverlapItem
from bench.realtime_wire import append_message, event_kind
from bench.speech import Audio

Mode = Literal["immediate", "pause"]
APPEND_S = 0.02
CHUNK_S = 0.08  # the null pipeline's chunk
ACK_EVERY_S = 0.5
SETTLE_S = 0.3  # after an interruption: late events of it (the decision, a new turn) arrive
ASK = json.dumps(
    {
        "type": "conversation.item.create",
        "item": {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "Tell me a long story."}],
        },
    }
)


@dataclass(frozen=True)
class Policy:
    """The session's turn detection: server VAD and `interruption` (contract v2)."""

    mode: Mode
    min_speech_ms: int = 400
    resume_after_ms: int = 1500
    silence_duration_ms: int = 500

    def answer_s(self, item: OverlapItem) -> float:
        """An answer that is still generating when the latest decision is due."""
        return item.offset_s + item.duration_s + self.resume_after_ms / 1000 + 2.0

    def session_update(self, item: OverlapItem) -> str:
        interruption: dict[str, object] = {"mode": self.mode}
        if self.mode == "pause":
            interruption["min_speech_ms"] = self.min_speech_ms
            interruption["resume_after_ms"] = self.resume_after_ms
        chunks = math.ceil(self.answer_s(item) / CHUNK_S)
        turn_detection = {
            "type": "server_vad",
            "silence_duration_ms": self.silence_duration_ms,
            "interruption": interruption,
        }
        session = {
            "type": "realtime",
            "output_modalities": ["audio"],
            "max_output_tokens": chunks,
            "audio": {"input": {"turn_detection": turn_detection}},
        }
        return json.dumps({"type": "session.update", "session": session})


@dataclass
class Outcome:
    """What one session saw (client seconds); None: never seen."""

    item: OverlapItem
    mode: Mode
    answer_id: str | None = None
    policy_echoed: bool = False  # session.updated carried turn_detection.interruption
    first_audio: float | None = None
    onset: float | None = None
    overlap_end: float | None = None
    speech_started: float | None = None
    paused: float | None = None
    resumed: float | None = None
    cleared: float | None = None
    decision_at: float | None = None
    decision: dict[str, Any] | None = None
    decisions: int = 0
    done_status: str | None = None
    committed_after_onset: int = 0
    early_speech: int = 0  # speech_started before the overlap began (room tone heard as speech)
    errors: list[str] = field(default_factory=list)
    timed_out: bool = False

    @property
    def interrupted(self) -> bool:
        return self.cleared is not None or self.done_status == "cancelled"

    @property
    def completed(self) -> bool:
        return self.done_status == "completed" and not self.interrupted

    @property
    def interrupted_at(self) -> float | None:
        """When the client learnt the answer was cut: the interrupt decision in pause mode,
        the clear (or the cancelled `response.done`) in immediate mode."""
        if self.decision is not None and self.decision.get("decision") == "interrupt":
            return self.decision_at
        return self.cleared

    def settled(self, now: float) -> bool:
        if self.interrupted:
            end = self.cleared if self.cleared is not None else now
            return now - end >= SETTLE_S and (self.paused is None or self.decisions > 0)
        if self.done_status is None or self.overlap_end is None:
            return False
        return self.paused is None or self.decisions > 0


async def _read(ws: ClientConnection, out: Outcome, arrived: dict[str, float]) -> None:
    loop = asyncio.get_running_loop()
    async for raw in ws:
        at = loop.time()
        kind = event_kind(raw)
        if kind.type == "response.output_audio.delta":
            if out.answer_id is None or kind.response_id != out.answer_id:
                continue
            if out.first_audio is None:
                out.first_audio = at
            arrived["audio_s"] = arrived.get("audio_s", 0.0) + CHUNK_S
            continue
        event: dict[str, Any] = json.loads(raw)
        _on_event(event, at, out)


def _on_event(event: dict[str, Any], at: float, out: Outcome) -> None:
    kind = event["type"]
    response = event.get("response") if isinstance(event.get("response"), dict) else None
    rid = response.get("id") if response else event.get("response_id")
    if kind == "session.updated":
        detection = event["session"]["audio"]["input"].get("turn_detection") or {}
        out.policy_echoed = "interruption" in detection
    elif kind == "response.created" and out.answer_id is None and response:
        out.answer_id = str(response["id"])
    elif kind == "input_audio_buffer.speech_started":
        if out.onset is None:
            out.early_speech += 1
        elif out.speech_started is None:
            out.speech_started = at
    elif kind == "input_audio_buffer.committed" and out.onset is not None:
        out.committed_after_onset += 1
    elif rid != out.answer_id or out.answer_id is None:
        if kind == "error":
            out.errors.append(str(event.get("error")))
    elif kind == "output_audio_buffer.paused" and out.paused is None:
        out.paused = at
    elif kind == "output_audio_buffer.resumed" and out.resumed is None:
        out.resumed = at
    elif kind == "output_audio_buffer.cleared" and out.cleared is None:
        out.cleared = at
    elif kind == "overlap.decision":
        out.decisions += 1
        if out.decision is None:
            out.decision, out.decision_at = event, at
    elif kind == "response.done" and response:
        out.done_status = str(response.get("status"))


async def _microphone(
    ws: ClientConnection, item: OverlapItem, tone: Audio, out: Outcome, deadline: float
) -> None:
    """Room tone in real time, the overlap mixed in at its offset; ACKs the played cursor."""
    loop = asyncio.get_running_loop()
    step = round(APPEND_S * item.rate)
    began = loop.time()
    n = 0
    overlap_at: int | None = None  # the append index holding the overlap's first sample
    played_s, last_tick, last_ack = 0.0, began, began
    arrived: dict[str, float] = {}
    reader = asyncio.create_task(_read(ws, out, arrived))
    try:
        while loop.time() < deadline and not out.settled(loop.time()):
            due = began + n * APPEND_S
            delay = due - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            if reader.done():
                reader.result()  # the socket closed: raise what the reader met
                break
            start = (n * step) % (len(tone) - step)
            chunk = tone[start : start + step].copy()
            if overlap_at is None and out.first_audio is not None:
                if due >= out.first_audio + item.offset_s:
                    overlap_at = n
            if overlap_at is not None:
                part = item.audio[(n - overlap_at) * step : (n - overlap_at + 1) * step]
                chunk[: len(part)] += part
            await ws.send(append_message(chunk))
            now = loop.time()
            if overlap_at == n:
                out.onset = now
            if overlap_at is not None and out.overlap_end is None:
                if (n - overlap_at + 1) * step >= len(item.audio):
                    out.overlap_end = now
            # The client's playback: runs from the first audio, stands still while paused.
            playing = out.first_audio is not None and not out.interrupted
            if playing and (out.paused is None or out.resumed is not None):
                played_s = min(played_s + now - last_tick, arrived.get("audio_s", 0.0))
            last_tick = now
            if playing and now - last_ack >= ACK_EVERY_S and out.answer_id is not None:
                last_ack = now
                ack = {"type": "playback.ack", "response_id": out.answer_id}
                await ws.send(json.dumps(ack | {"played_ms": int(played_s * 1000)}))
            n += 1
        out.timed_out = not out.settled(loop.time())
    finally:
        reader.cancel()


async def run_item(url: str, item: OverlapItem, policy: Policy, tone: Audio) -> Outcome:
    """One session for `item` under `policy`; failures are kept on the outcome, not raised."""
    out = Outcome(item=item, mode=policy.mode)
    loop = asyncio.get_running_loop()
    try:
        async with connect(url, max_size=None, compression=None, open_timeout=60) as ws:
            await ws.send(policy.session_update(item))
            while True:
                event = json.loads(await asyncio.wait_for(ws.recv(), 30))
                _on_event(event, loop.time(), out)
                if event["type"] == "session.updated":
                    break
                if event["type"] == "error":
                    raise RuntimeError(f"session.update refused: {event.get('error')}")
            await ws.send(ASK)
            await ws.send(json.dumps({"type": "response.create"}))
            deadline = loop.time() + policy.answer_s(item) + 6.0
            await _microphone(ws, item, tone, out, deadline)
    except (OSError, TimeoutError, WebSocketException, RuntimeError, KeyError) as error:
        out.errors.append(f"session failed: {error!r}")
    return out


async def run_items(
    url: str, items: tuple[OverlapItem, ...], policy: Policy, tone: Audio, parallel: int
) -> list[Outcome]:
    """Every item in its own session, `parallel` at a time, starts spread by 0.1 s."""
    gate = asyncio.Semaphore(parallel)

    async def one(i: int, item: OverlapItem) -> Outcome:
        await asyncio.sleep(0.1 * (i % parallel))
        async with gate:
            return await run_item(url, item, policy, tone)

    return list(await asyncio.gather(*(one(i, it) for i, it in enumerate(items))))

"""One realtime session per end-of-turn item: the user speaks one turn, the server decides when
it ended.

What a session does (`run_item`), as a live client:
- configures the turn detection under test (`Config`: `server_vad` with its silence, or
  `semantic_vad` with its eagerness; either with `preemptive_response`), always with
  `create_response` and `interrupt_response`, output audio, and a short answer
  (`max_output_tokens`);
- streams room tone from the start in 20 ms appends paced by the wall clock (a microphone),
  the item mixed in from the first append due `LEAD_S` after the start (its sample 0 is that
  append's first sample), then room tone again;
- keeps streaming until a `committed` arrives after the end of speech and the answer to it is
  `response.done`; or until the end of speech plus the mode's longest wait plus 1 s passes
  with no such commit, or the answer's deadline (`ANSWER_S` after that commit): timed out.
Times are the client's `loop.time()`: event receipt times; for the item, the send times of
the appends that hold its sample 0 (onset), the first sample of its (longest) pause, and its last
speech sample (`TurnItem.speech_end`, the "end of speech").

What an outcome says:
- premature end: a `committed` received before the end of speech was sent, i.e. a commit of
  audio before the final speech segment ended: the turn was cut off (at a mid-turn pause of a
  held item, synthetic `paused` or human `held`; any such commit counts, on every class);
- commits: how many `committed` events the item's turn produced (a turn cut off once gives 2;
  a human held turn cut at several of its pauses more);
- commit latency: end of speech -> the first `committed` after it;
- first audio: end of speech -> the first audio delta (`response.output_audio.delta`, or the
  beta `response.audio.delta`) of the response created after that commit.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any, Literal

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import WebSocketException

from bench.end_of_turn_corpus import TurnItem
from bench.realtime_wire import append_message, event_kind
from bench.speech import Audio

TurnType = Literal["server_vad", "semantic_vad"]
Eagerness = Literal["low", "medium", "high", "auto"]
# OpenAI's semantic_vad: the longest wait after speech stopped, per eagerness (auto = medium).
LONGEST_WAIT_S: dict[str, float] = {"low": 8.0, "medium": 4.0, "high": 2.0, "auto": 4.0}
APPEND_S = 0.02
LEAD_S = 0.6  # room tone before the item
GRACE_S = 1.0  # past the longest wait, before a turn with no commit counts as timed out
ANSWER_S = 20.0  # from the final commit to the answer's `response.done`
AUDIO_DELTAS = ("response.output_audio.delta", "response.audio.delta")


@dataclass(frozen=True)
class Config:
    """The turn detection under test; every mode of the bench is one value of this type."""

    type: TurnType = "server_vad"
    silence_duration_ms: int = 500  # server_vad only
    eagerness: Eagerness = "medium"  # semantic_vad only
    preemptive: bool = False

    def __post_init__(self) -> None:
        if self.type not in ("server_vad", "semantic_vad"):
            raise ValueError(f"unknown turn detection {self.type!r}")
        if self.eagerness not in LONGEST_WAIT_S:
            raise ValueError(f"unknown eagerness {self.eagerness!r}")
        if self.silence_duration_ms <= 0:
            raise ValueError("silence_duration_ms must be > 0")

    @property
    def key(self) -> str:
        """The name on the command line: server_vad_500, semantic_vad_medium, ..._preemptive."""
        base = (
            f"server_vad_{self.silence_duration_ms}"
            if self.type == "server_vad"
            else f"semantic_vad_{self.eagerness}"
        )
        return base + ("_preemptive" if self.preemptive else "")

    @property
    def label(self) -> str:
        """The name in a table: "server_vad 500 ms", "semantic_vad medium, preemptive"."""
        base = (
            f"server_vad {self.silence_duration_ms} ms"
            if self.type == "server_vad"
            else f"semantic_vad {self.eagerness}"
        )
        return base + (", preemptive" if self.preemptive else "")

    @property
    def longest_wait_s(self) -> float:
        """The longest the server waits after speech stops before it commits."""
        if self.type == "server_vad":
            return self.silence_duration_ms / 1000
        return LONGEST_WAIT_S[self.eagerness]

    def turn_detection(self) -> dict[str, object]:
        detection: dict[str, object] = {
            "type": self.type,
            "create_response": True,
            "interrupt_response": True,
        }
        if self.type == "server_vad":
            detection["silence_duration_ms"] = self.silence_duration_ms
        else:
            detection["eagerness"] = self.eagerness
        if self.preemptive:
            # Sent only when on: a server that does not know the field must not see it.
            detection["preemptive_response"] = True
        return detection

    def session_update(self, max_output_tokens: int) -> str:
        session = {
            "type": "realtime",
            "output_modalities": ["audio"],
            "max_output_tokens": max_output_tokens,
            "audio": {"input": {"turn_detection": self.turn_detection()}},
        }
        return json.dumps({"type": "session.update", "session": session})

    def honoured_by(self, session: dict[str, Any]) -> str | None:
        """Why a `session.updated` session shows the server did not take this config (it
        echoes another type, or drops `preemptive_response`); None when it took it."""
        audio = session.get("audio") if isinstance(session.get("audio"), dict) else {}
        given = audio.get("input", {}) if isinstance(audio, dict) else {}
        echoed = given.get("turn_detection") or session.get("turn_detection") or {}
        if echoed.get("type") != self.type:
            return f"echoed turn_detection.type {echoed.get('type')!r}"
        if self.preemptive and echoed.get("preemptive_response") is not True:
            return "preemptive_response not echoed (unknown to the server)"
        return None


@dataclass
class Outcome:
    """What one session saw (client seconds); None: never seen."""

    item: TurnItem
    config: Config
    onset: float | None = None
    pause_start: float | None = None
    speech_end: float | None = None
    speech_started: list[float] = field(default_factory=list)
    speech_stopped: list[float] = field(default_factory=list)
    committed: list[float] = field(default_factory=list)
    created: list[tuple[str, float]] = field(default_factory=list)
    first_audio: dict[str, float] = field(default_factory=dict)
    done: dict[str, tuple[float, str]] = field(default_factory=dict)
    refused: str | None = None  # why the server did not take the config
    errors: list[str] = field(default_factory=list)
    timed_out: bool = False

    @property
    def commits(self) -> int:
        """`committed` events from the item's onset on (a cut-off turn gives 2)."""
        if self.onset is None:
            return 0
        return sum(at >= self.onset for at in self.committed)

    @property
    def early_commits(self) -> int:
        """Commits before the item began: room tone heard as a turn."""
        return sum(self.onset is None or at < self.onset for at in self.committed)

    @property
    def premature(self) -> bool:
        """A commit while the turn's final speech segment was still to come: cut off."""
        if self.onset is None:
            return False
        end = self.speech_end if self.speech_end is not None else float("inf")
        return any(self.onset <= at < end for at in self.committed)

    @property
    def final_commit(self) -> float | None:
        if self.speech_end is None:
            return None
        return next((at for at in self.committed if at >= self.speech_end), None)

    @property
    def commit_latency(self) -> float | None:
        final = self.final_commit
        return None if final is None or self.speech_end is None else final - self.speech_end

    @property
    def answer(self) -> str | None:
        """The response created for the final commit."""
        final = self.final_commit
        if final is None:
            return None
        return next((rid for rid, at in self.created if at >= final), None)

    @property
    def first_audio_latency(self) -> float | None:
        answer = self.answer
        if answer is None or self.speech_end is None or answer not in self.first_audio:
            return None
        return self.first_audio[answer] - self.speech_end

    def settled(self, now: float) -> bool:
        if self.speech_end is None:
            return False
        answer = self.answer
        if answer is not None and answer in self.done:
            return True
        if self.final_commit is None:
            return now >= self.speech_end + self.config.longest_wait_s + GRACE_S
        return now >= self.final_commit + ANSWER_S


def _on_event(event: dict[str, Any], at: float, out: Outcome) -> None:
    kind = event["type"]
    response = event.get("response") if isinstance(event.get("response"), dict) else None
    if kind == "input_audio_buffer.speech_started":
        out.speech_started.append(at)
    elif kind == "input_audio_buffer.speech_stopped":
        out.speech_stopped.append(at)
    elif kind == "input_audio_buffer.committed":
        out.committed.append(at)
    elif kind == "response.created" and response:
        out.created.append((str(response["id"]), at))
    elif kind == "response.done" and response:
        out.done.setdefault(str(response["id"]), (at, str(response.get("status"))))
    elif kind == "error":
        out.errors.append(str(event.get("error")))


async def _read(ws: ClientConnection, out: Outcome) -> None:
    loop = asyncio.get_running_loop()
    async for raw in ws:
        at = loop.time()
        kind = event_kind(raw)
        if kind.type in AUDIO_DELTAS:
            if kind.response_id is not None:
                out.first_audio.setdefault(kind.response_id, at)
            continue
        _on_event(json.loads(raw), at, out)


async def _microphone(ws: ClientConnection, item: TurnItem, tone: Audio, out: Outcome) -> None:
    """Room tone in real time with the item mixed in from append `LEAD_S / APPEND_S`."""
    loop = asyncio.get_running_loop()
    step = round(APPEND_S * item.rate)
    lead = round(LEAD_S / APPEND_S)
    marks = {lead: "onset", lead + (item.speech_end - 1) // step: "speech_end"}
    if item.pause_at is not None:
        marks[lead + item.pause_at // step] = "pause_start"
    began = loop.time()
    wait = out.config.longest_wait_s + GRACE_S
    hard_stop = began + LEAD_S + item.duration_s + wait + ANSWER_S
    n = 0
    reader = asyncio.create_task(_read(ws, out))
    try:
        while not out.settled(loop.time()) and loop.time() < hard_stop:
            delay = began + n * APPEND_S - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            if reader.done():
                reader.result()  # the socket closed: raise what the reader met
                break
            start = (n * step) % (len(tone) - step)
            chunk = tone[start : start + step].copy()
            if n >= lead:
                part = item.audio[(n - lead) * step : (n - lead + 1) * step]
                chunk[: len(part)] += part
            await ws.send(append_message(chunk))
            if n in marks:
                setattr(out, marks[n], loop.time())
            n += 1
        answer = out.answer
        out.timed_out = answer is None or answer not in out.done
    finally:
        reader.cancel()


async def _configure(ws: ClientConnection, config: Config, max_output_tokens: int) -> str | None:
    """Send the session.update; why the server did not take it, or None."""
    await ws.send(config.session_update(max_output_tokens))
    while True:
        event = json.loads(await asyncio.wait_for(ws.recv(), 30))
        if event["type"] == "session.updated":
            return config.honoured_by(event["session"])
        if event["type"] == "error":
            error = event.get("error") or {}
            message = str(error.get("message") or "").rstrip(".")
            return f"refused: {error.get('code')}: {message}"


async def probe(url: str, config: Config, max_output_tokens: int = 4) -> str | None:
    """Whether the server takes `config`: None, or why not (an `error`, or no echo)."""
    async with connect(url, max_size=None, compression=None, open_timeout=60) as ws:
        return await _configure(ws, config, max_output_tokens)


async def run_item(
    url: str, item: TurnItem, config: Config, tone: Audio, max_output_tokens: int
) -> Outcome:
    """One session for `item` under `config`; failures are kept on the outcome, not raised."""
    out = Outcome(item=item, config=config)
    try:
        async with connect(url, max_size=None, compression=None, open_timeout=60) as ws:
            out.refused = await _configure(ws, config, max_output_tokens)
            if out.refused is None:
                await _microphone(ws, item, tone, out)
    except (OSError, TimeoutError, WebSocketException, RuntimeError, KeyError) as error:
        out.errors.append(f"session failed: {error!r}")
    return out


async def run_items(
    url: str,
    items: tuple[TurnItem, ...],
    config: Config,
    tone: Audio,
    parallel: int,
    max_output_tokens: int,
) -> list[Outcome]:
    """Every item in its own session, `parallel` at a time, starts spread by 0.1 s."""
    gate = asyncio.Semaphore(parallel)

    async def one(i: int, item: TurnItem) -> Outcome:
        await asyncio.sleep(0.1 * (i % parallel))
        async with gate:
            return await run_item(url, item, config, tone, max_output_tokens)

    return list(await asyncio.gather(*(one(i, it) for i, it in enumerate(items))))

"""A speakerphone client: it plays what the server sends out of a loudspeaker at real time, and
its microphone hears that back through a room (bench/rooms.py), plus whatever the user says.

Shared by the echo bench (bench/echo.py) and the end-to-end echo test
(tests/e2e/test_echo_e2e.py): one client, so the test checks what the bench measures.

Rules:
1. Real time: `run` ticks every `TICK_MS` by the wall clock; each tick it reads what the server
   sent so far, plays one tick of output and sends one `input_audio_buffer.append` of what its
   microphone heard during that tick (the echo of what played, plus the user).
2. Playback follows the server's output events as a client's player does: audio deltas queue
   in order; `output_audio_buffer.paused` holds the player (silence) until `.resumed`;
   `output_audio_buffer.cleared` drops what is queued at once.
3. Playout jitter (`Playout`): a response starts playing a seeded random 0..`jitter_ms` after
   its first delta came (the jitter buffer filling), and the player stalls for one tick at
   random (`stall_every_s` on average: an underrun, a scheduling hiccup), so the echo's delay
   against the server's reference moves during an answer, as on a real device. Zero jitter:
   it plays each delta on the tick it arrived. The room's `delay_ms` is the rest of the
   playout and capture latency, constant.
4. The user's speech (`say`) starts on the next tick's first sample; `onset` is the time that
   tick's append was sent (the client's clock, `time.monotonic`), so onset -> event latencies
   count from when the server could first have heard it.
5. With `ack_every_s` the client acknowledges playback (`playback.ack`: the response, how
   much of it has played, and how much input it had captured then, `input_ms`), as a client
   that knows its player's position does.
6. The microphone also hears the room itself (`tone`, looped: a quiet noise floor), so it never
   sends digital silence.
7. Every event received goes to `on_event(event, receipt time)`; `run` returns early once
   `until` (an event type, seen during this run, or a predicate) holds.
Here, not under tests/: bench/ must not import from tests/, and tests may import from bench/.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from websockets.sync.client import ClientConnection

from bench.realtime_wire import append_message
from bench.rooms import EchoPath
from bench.speech import RATE, Audio

TICK_MS = 20
TICK = RATE * TICK_MS // 1000

Event = dict[str, Any]


@dataclass(frozen=True)
class Playout:
    """Rule 3: the player's jitter."""

    jitter_ms: float = 0.0
    stall_every_s: float = 2.0
    seed: int = 0


@dataclass
class _Queued:
    response_id: str
    samples: Audio


@dataclass
class Player:
    """The loudspeaker's player (rules 2, 3), without a socket: the bench's offline echo
    measurement plays the same way."""

    playout: Playout = field(default_factory=Playout)
    queued: list[_Queued] = field(default_factory=list)
    played_samples: int = 0
    paused: bool = False
    # Samples of each response played so far (rule 5's ACK).
    played: dict[str, int] = field(default_factory=dict)
    _hold_ticks: int = 0  # rule 3: ticks left before the player starts
    _started: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self._rng = np.random.default_rng(self.playout.seed)

    def queue(self, response_id: str, samples: Audio) -> None:
        self.queued.append(_Queued(response_id, samples))
        if response_id not in self._started:
            self._started.add(response_id)
            jitter = self.playout.jitter_ms
            if jitter > 0:
                self._hold_ticks += int(self._rng.uniform(0, jitter) // TICK_MS)

    def heard(self, event: Event) -> None:
        kind = event["type"]
        if kind == "response.output_audio.delta":
            pcm = np.frombuffer(base64.b64decode(event["delta"]), "<i2")
            self.queue(str(event.get("response_id")), pcm.astype(np.float32) / 32768)
        elif kind == "output_audio_buffer.cleared":
            self.queued.clear()  # the client stops playing at once
        elif kind == "output_audio_buffer.paused":
            self.paused = True
        elif kind == "output_audio_buffer.resumed":
            self.paused = False

    def tick(self) -> Audio:
        """One tick of the loudspeaker (rules 2, 3)."""
        out = np.zeros(TICK, np.float32)
        if self.paused or not self.queued:
            return out
        if self._hold_ticks > 0:
            self._hold_ticks -= 1
            return out
        stall = TICK_MS / 1000 / self.playout.stall_every_s
        if self.playout.jitter_ms > 0 and self._rng.random() < stall:
            return out  # a stall: this tick plays nothing, what follows plays one tick later
        at = 0
        while at < TICK and self.queued:
            head = self.queued[0]
            n = min(TICK - at, head.samples.size)
            out[at : at + n] = head.samples[:n]
            at += n
            self.played[head.response_id] = self.played.get(head.response_id, 0) + n
            if n == head.samples.size:
                self.queued.pop(0)
            else:
                head.samples = head.samples[n:]
        self.played_samples += at
        return out


def played(audio: Audio, playout: Playout) -> Audio:
    """What the loudspeaker plays of `audio`, all of it sent at once (rule 3's jitter)."""
    player = Player(playout)
    player.queue("answer", audio)
    ticks = []
    while player.queued:
        ticks.append(player.tick())
    return np.concatenate(ticks) if ticks else np.zeros(0, np.float32)


@dataclass
class Speakerphone:
    ws: ClientConnection
    path: EchoPath | None  # None: no echo reaches the microphone (a headset)
    playout: Playout = field(default_factory=Playout)
    ack_every_s: float | None = None
    on_event: Callable[[Event, float], None] | None = None
    tone: Audio | None = None  # rule 6
    user: Audio = field(default_factory=lambda: np.zeros(0, np.float32))
    onset: float | None = None  # rule 4: when the last `say` began to be sent
    _new_user: bool = False
    _last_ack: float = 0.0
    _captured: int = 0  # rule 5: input samples sent
    _tone_at: int = 0
    _seen: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.player = Player(self.playout)

    @property
    def played_samples(self) -> int:
        return self.player.played_samples

    def say(self, audio: Audio) -> None:
        """The user speaks `audio`, from the next tick on (rule 4)."""
        if not self.user.size:
            self._new_user = True
        self.user = np.concatenate([self.user, audio.astype(np.float32)])

    def _receive(self) -> None:
        while True:
            try:
                raw = self.ws.recv(timeout=0)
            except TimeoutError:
                return
            event: Event = json.loads(raw)
            self.player.heard(event)
            if self.on_event is not None:
                self.on_event(event, time.monotonic())
            self._seen.add(event["type"])

    def _ack(self, now: float) -> None:
        if self.ack_every_s is None or now - self._last_ack < self.ack_every_s:
            return
        self._last_ack = now
        player = self.player
        if player.queued and not player.paused:
            rid = player.queued[0].response_id
            played_ms = 1000 * player.played.get(rid, 0) // RATE
            ack = {
                "type": "playback.ack",
                "response_id": rid,
                "played_ms": played_ms,
                "input_ms": 1000 * self._captured / RATE,
            }
            self.ws.send(json.dumps(ack))

    def run(self, seconds: float, until: str | Callable[[], bool] | None = None) -> None:
        """Tick at real time for `seconds`, or until `until` holds (rules 1, 6)."""
        self._seen = set()
        began = time.monotonic()
        for tick in range(int(seconds * 1000 / TICK_MS)):
            time.sleep(max(0.0, began + tick * TICK_MS / 1000 - time.monotonic()))
            self._receive()
            played = self.player.tick()
            mic = self.path(played) if self.path is not None else np.zeros(TICK, np.float32)
            if self.tone is not None and self.tone.size > TICK:
                start = self._tone_at % (self.tone.size - TICK)
                mic += self.tone[start : start + TICK]
                self._tone_at += TICK
            if self.user.size:
                n = min(TICK, self.user.size)
                mic[:n] += self.user[:n]
                self.user = self.user[n:]
            self.ws.send(append_message(mic))
            self._captured += TICK
            now = time.monotonic()
            if self._new_user:
                self._new_user = False
                self.onset = now
            self._ack(now)
            if isinstance(until, str) and until in self._seen:
                return
            if callable(until) and until():
                return

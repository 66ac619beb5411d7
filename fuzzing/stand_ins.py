"""Stand-ins for the session actor's I/O in memory: backend streams, the VAD, the transcriber,
the timers and the clock, played from one seeded random generator.

Rules:
- Each stand-in answers only what the core asked for, the way its real counterpart can:
  a backend stream per `StartBackend` (a few audio or text chunks, then done, failed, or
  nothing at all: a hung stream; a preemptive response's too, whose output the core holds;
  given tools it may call one as the pipeline contract says: after any speech, pieces of a
  call of one of its tools, a call alone where the choice asks for one),
  one `SpeechProbabilities` (or `VadDown`) per `DetectSpeech` in the order asked, one
  `TranscriptReady` per `Transcribe` in any order, one `TurnPrediction` per `PredictTurn` in
  any order (the turn complete, not complete, in between, or the model's error), one
  `TimerFired` per `ArmTimer` once the clock passes its deadline.
- What a real actor may still deliver after the core changed its mind is delivered too: up to
  two chunks of a cancelled stream (already in flight, rule 2 must drop them) and, now and
  then, a timer that fired just before it was cancelled or re-armed (stale tokens).
- Between two client messages `gap()` moves the clock on and hands the core a few of the
  answers due, chosen at random, so that they interleave with the client's messages.
- A backend asked to start twice for one response is a broken invariant (`problems`).
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Iterator, Sequence
from typing import Final

from orchestrator.protocol.tools import ToolChoiceFunction
from orchestrator.session.actions import (
    Action,
    ArmTimer,
    CancelBackend,
    CancelTimer,
    DetectSpeech,
    PredictTurn,
    SessionEnd,
    StartBackend,
    Transcribe,
)
from orchestrator.session.inputs import (
    BackendAudio,
    BackendDone,
    BackendEvent,
    BackendFailed,
    BackendText,
    BackendToolCall,
    SpeechProbabilities,
    TimerFired,
    TimerKind,
    TranscriptReady,
    TurnPrediction,
    VadDown,
)

# What the core takes from these stand-ins.
WorldInput = (
    BackendEvent | SpeechProbabilities | VadDown | TranscriptReady | TurnPrediction | TimerFired
)

_CLOCK_STEPS_MS: Final = (0, 0, 0, 5, 20, 100, 500, 2_000, 12_000, 40_000)
_CHUNK_BYTES: Final = (0, 2, 480, 960, 4_800)  # pcm16 24 kHz: 0, 1 sample, 10, 20, 100 ms
_TEXTS: Final = ("", "word ", "é ", "😀", "Hello there. ")
_ARGUMENTS: Final = ('{"city": ', '"Paris"', "}", "", '"é😀"')


class StandIns:
    """The backend, VAD, transcriber and timers of one in-memory session."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.now_ms = 0
        self.ended: SessionEnd | None = None
        self.problems: list[str] = []
        self.started: set[str] = set()
        self._streams: dict[str, deque[BackendEvent]] = {}
        self._late: deque[BackendEvent] = deque()
        self._vad: deque[SpeechProbabilities | VadDown] = deque()
        self._speaking = False
        self._run_left = 0
        self._transcripts: list[TranscriptReady] = []
        self._turns: list[TurnPrediction] = []
        self._timers: dict[TimerKind, ArmTimer] = {}
        self._stale: list[TimerFired] = []

    # What the core asked for ------------------------------------------------------------
    def carry_out(self, actions: Sequence[Action]) -> None:
        for action in actions:
            if isinstance(action, StartBackend):
                self._start(action)
            elif isinstance(action, CancelBackend):
                self._cancel(action)
            elif isinstance(action, DetectSpeech):
                self._vad.append(self._detect(action))
            elif isinstance(action, Transcribe):
                self._transcripts.append(self._transcribe(action))
            elif isinstance(action, PredictTurn):
                self._turns.append(self._predict(action))
            elif isinstance(action, ArmTimer):
                self._drop_timer(action.kind)
                self._timers[action.kind] = action
            elif isinstance(action, CancelTimer):
                self._drop_timer(action.kind)
            elif isinstance(action, SessionEnd):
                self.ended = action

    def _start(self, start: StartBackend) -> None:
        rid = start.response_id
        if rid in self.started:
            self.problems.append(f"the backend of {rid} was started twice")
        self.started.add(rid)
        rng = self.rng
        request = start.request
        audio = "audio" in request.output_modalities
        stream: deque[BackendEvent] = deque()
        for _ in range(0 if request.call_only else rng.choice((0, 1, 2, 3, 4, 8))):
            text = rng.choice(_TEXTS)
            if audio:
                chunk = bytes(rng.choice(_CHUNK_BYTES))
                stream.append(BackendAudio(rid, start.seq, chunk, text))
            else:
                stream.append(BackendText(rid, start.seq, text))
        calls = request.tools and request.tool_choice != "none"
        if calls and (request.call_only or rng.random() < 0.5):
            choice = request.tool_choice
            if isinstance(choice, ToolChoiceFunction):
                name = choice.name
            else:
                name = rng.choice(request.tools).name
            for index in range(rng.choice((1, 2, 3, 5))):
                piece = rng.choice(_ARGUMENTS)
                stream.append(BackendToolCall(rid, start.seq, name if index == 0 else "", piece))
        end = rng.random()
        if end < 0.8:
            stream.append(BackendDone(rid, start.seq, output_tokens=len(stream)))
        elif end < 0.92:
            stream.append(BackendFailed(rid, start.seq, "fuzz: the backend failed"))
        # else: a hung stream, which only a cancel ends.
        self._streams[rid] = stream

    def _cancel(self, cancel: CancelBackend) -> None:
        stream = self._streams.pop(cancel.response_id, deque())
        # What the stream had already sent is still on its way (rule 2: the fence drops it).
        for _ in range(min(len(stream), self.rng.choice((0, 0, 1, 2)))):
            self._late.append(stream.popleft())

    def _detect(self, ask: DetectSpeech) -> SpeechProbabilities | VadDown:
        rng = self.rng
        if rng.random() < 0.05:
            return VadDown("fuzz: the VAD is down")
        probabilities = []
        for _ in ask.chunk_end_ms:
            # Runs of speech (64 ms to 1 s) and of silence (32 ms to 2 s), 32 ms a chunk.
            if self._run_left <= 0:
                self._speaking = not self._speaking
                self._run_left = rng.randint(2, 30) if self._speaking else rng.randint(1, 60)
            self._run_left -= 1
            probabilities.append(rng.uniform(0.6, 1.0) if self._speaking else rng.uniform(0, 0.4))
        return SpeechProbabilities(tuple(probabilities), ask.chunk_end_ms)

    def _transcribe(self, ask: Transcribe) -> TranscriptReady:
        seconds = len(ask.audio16k) / 16000
        if self.rng.random() < 0.1:
            return TranscriptReady(ask.item_id, None, "fuzz: the ASR failed", seconds)
        return TranscriptReady(ask.item_id, self.rng.choice(_TEXTS), None, seconds)

    def _predict(self, ask: PredictTurn) -> TurnPrediction:
        # Every eagerness's threshold (0.25, 0.5, 0.75) is crossed by some answers.
        roll = self.rng.random()
        if roll < 0.4:
            return TurnPrediction(ask.token, self.rng.uniform(0.75, 1.0))  # complete
        if roll < 0.75:
            return TurnPrediction(ask.token, self.rng.uniform(0.0, 0.2))  # not yet
        if roll < 0.9:
            return TurnPrediction(ask.token, self.rng.uniform(0.2, 0.75))  # in between
        return TurnPrediction(ask.token, None, "fuzz: the turn model failed")

    def _drop_timer(self, kind: TimerKind) -> None:
        old = self._timers.pop(kind, None)
        if old is not None and self.rng.random() < 0.2:
            # It fired a moment before the core cancelled it: already in the mailbox.
            self._stale.append(TimerFired(old.kind, old.token))

    # What comes back --------------------------------------------------------------------
    def gap(self) -> Iterator[WorldInput]:
        """The answers that reach the core before the client's next message."""
        self.now_ms += self.rng.choice(_CLOCK_STEPS_MS)
        yield from self._due_timers()
        for _ in range(self.rng.choice((0, 1, 1, 2, 3, 6))):
            answer = self._next()
            if answer is None:
                return
            yield answer

    def drain(self, limit: int = 200) -> Iterator[WorldInput]:
        """The answers still to come (at most `limit`), the clock run past the timers a few
        times (an idle timer that answers with a response re-arms itself after it)."""
        clock_runs = 3
        for _ in range(limit):
            answer = self._next()
            if answer is None:
                if not self._timers or clock_runs == 0:
                    return
                clock_runs -= 1
                self.now_ms = max(self.now_ms, *(t.deadline_ms for t in self._timers.values()))
                yield from self._due_timers()
                continue
            yield answer

    def _due_timers(self) -> Iterator[TimerFired]:
        for kind, timer in list(self._timers.items()):
            if timer.deadline_ms <= self.now_ms:
                del self._timers[kind]
                yield TimerFired(timer.kind, timer.token)

    def _next(self) -> WorldInput | None:
        sources: list[deque[BackendEvent] | deque[SpeechProbabilities | VadDown] | str] = [
            s for s in self._streams.values() if s
        ]
        if self._late:
            sources.append(self._late)
        if self._vad:
            sources.append(self._vad)
        if self._transcripts:
            sources.append("transcripts")
        if self._turns:
            sources.append("turns")
        if self._stale:
            sources.append("stale")
        if not sources:
            return None
        source = self.rng.choice(sources)
        if source == "transcripts":
            return self._transcripts.pop(self.rng.randrange(len(self._transcripts)))
        if source == "turns":
            return self._turns.pop(self.rng.randrange(len(self._turns)))
        if source == "stale":
            return self._stale.pop(0)
        assert not isinstance(source, str)
        return source.popleft()

"""Typed inputs that `SessionCore` takes besides client events (docs/protocol.md).

Each is parsed once, where it enters (the VAD, a response's Triton stream, the transcriber, a
timer, the service), and the core alone decides what it means. Backend output is tagged with
the response's fence number, so late output of an older response is recognised without
remembering it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from statecharts.vocabulary import IncompleteReason


@dataclass(frozen=True, slots=True)
class VadSpeechStarted:
    audio_start_ms: int


@dataclass(frozen=True, slots=True)
class VadSpeechStopped:
    audio_end_ms: int


@dataclass(frozen=True, slots=True)
class VadPaused:
    """A candidate end of turn: speech has been silent `pause_ms` since `speech_end_ms`
    (semantic_vad asks its model; a preemptive response starts). Never on the wire."""

    speech_end_ms: int
    at_ms: int


@dataclass(frozen=True, slots=True)
class VadResumed:
    """Speech came back after a candidate pause: the user spoke on. Never on the wire."""

    at_ms: int


VadEvent = VadSpeechStarted | VadSpeechStopped | VadPaused | VadResumed


@dataclass(frozen=True, slots=True)
class SpeechProbabilities:
    """The VAD's answer to one `DetectSpeech`: a probability per chunk, with the chunk ends
    (ms on the session's input clock) that the request carried."""

    probabilities: tuple[float, ...]
    chunk_end_ms: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class VadDown:
    """The VAD could not answer a `DetectSpeech` (its endpoint is gone or timed out)."""

    reason: str


@dataclass(frozen=True, slots=True)
class BackendText:
    """A text delta: the reply's text (text mode) or its transcript (audio mode)."""

    response_id: str
    seq: int
    text: str


@dataclass(frozen=True, slots=True)
class BackendAudio:
    """A chunk of reply audio (pcm16, 24 kHz, mono) and the transcript text whose audio ends in
    this chunk (the pipeline contract: text rides with the chunk where its audio ends)."""

    response_id: str
    seq: int
    audio: bytes
    text: str = ""


@dataclass(frozen=True, slots=True)
class BackendToolCall:
    """The next piece of the response's function call (the pipeline's `TOOL_CALL`): `name`
    in the call's first piece only ("" after), `arguments_delta` the next piece of its
    arguments' JSON text. The call is complete when the stream is (`BackendDone`)."""

    response_id: str
    seq: int
    name: str
    arguments_delta: str


@dataclass(frozen=True, slots=True)
class BackendDone:
    """The stream ended on its own; `reason`: the pipeline's `END_REASON`, its own limit cut
    the reply short (the response ends `incomplete`), None: it ended where the model did."""

    response_id: str
    seq: int
    output_tokens: int = 0
    reason: IncompleteReason | None = None


@dataclass(frozen=True, slots=True)
class BackendFailed:
    response_id: str
    seq: int
    reason: str


BackendEvent = BackendText | BackendAudio | BackendToolCall | BackendDone | BackendFailed


# `turn`: a committed user turn's transcript; `overlap`: a partial of pause mode's overlapping
# speech (orchestrator/session/turns/overlap.py), never shown to the client; `preempt`: the turn so
# far, for
# a preemptive response of the cascade (orchestrator/session/turns/preemption.py), the committed
# turn's own
# once that response is adopted; `end_of_turn`: the turn so far at a semantic_vad pause
# (orchestrator/session/turns/end_of_turn.py), never shown to the client.
TranscriptPurpose = Literal["turn", "overlap", "preempt", "end_of_turn"]


@dataclass(frozen=True, slots=True)
class TranscriptReady:
    """The transcriber's answer to one `Transcribe`: the text, or the model's error; `purpose`
    and `token` are the request's (a partial of an old overlap is recognised by its token)."""

    item_id: str
    transcript: str | None
    error: str | None
    seconds: float
    purpose: TranscriptPurpose = "turn"
    token: int = 0


@dataclass(frozen=True, slots=True)
class TurnPrediction:
    """The turn model's answer to one `PredictTurn`: the probability that the user's turn is
    complete, or the error that kept it from answering; `token` is the request's."""

    token: int
    probability: float | None
    error: str | None = None


TimerKind = Literal["idle", "transcripts", "overlap_grace", "overlap_resume", "playout", "drain"]


@dataclass(frozen=True, slots=True)
class TimerFired:
    """An `ArmTimer` ran out; `token` says which arming (an older one is stale)."""

    kind: TimerKind
    token: int


CloseReason = Literal["session_expired", "server_shutting_down"]


@dataclass(frozen=True, slots=True)
class CloseRequested:
    """The service ends the session: its lifetime ran out, or the server stops at once."""

    reason: CloseReason
    max_session_s: float = 3600.0


@dataclass(frozen=True, slots=True)
class DrainRequested:
    """The server drains (a deploy): the session ends once the answer it is generating has
    finished, or `answer_ms` from now (core rule 11). `kept`: its state stays in a store that
    outlives this process, so its client can resume it elsewhere at once."""

    answer_ms: int
    kept: bool


Samples = npt.NDArray[np.float32]

"""What `SessionCore` asks its I/O layer to do: typed actions, apart from the server events.

The session actor carries each out and reports back through a core input; it decides nothing.
Actions of one core step are carried out before that step's server events are queued, so a
backend is cancelled before the client hears `output_audio_buffer.cleared` (rule 1), and an
`SessionEnd` takes effect after the events decided with it went out.

`CancelBackend` is the response chart's own effect (statecharts/effects.py) handed on
unchanged; `StartBackend` is built by the core from the chart's `OpenStream` and the
response's request (the chart never carries the prompt, so statecharts/ imports nothing of
the orchestrator).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from orchestrator.protocol.tools import FunctionTool, ToolChoice, ToolChoiceFunction
from orchestrator.session.history.conversation import Item
from orchestrator.session.inputs import Samples, TimerKind, TranscriptPurpose
from statecharts.effects import CancelBackend

__all__ = [
    "Action",
    "ArmTimer",
    "CancelBackend",
    "CancelTimer",
    "DetectSpeech",
    "InferenceRequest",
    "PredictTurn",
    "SessionEnd",
    "SessionEndCause",
    "StartBackend",
    "Transcribe",
]


@dataclass(frozen=True, slots=True)
class InferenceRequest:
    """Everything a pipeline needs for one response: the pruned prompt and parameters, with
    the tools in force and the tool choice (checked to fit them)."""

    instructions: str
    items: tuple[Item, ...]
    output_modalities: tuple[Literal["audio", "text"], ...]
    max_output_tokens: int | None
    voice: str = "alloy"
    metadata: dict[str, str] = field(default_factory=dict)
    tools: tuple[FunctionTool, ...] = ()
    tool_choice: ToolChoice = "auto"

    @property
    def call_only(self) -> bool:
        """The reply is a function call and nothing else (`required`, or a named function)."""
        choice = self.tool_choice
        return bool(self.tools) and (choice == "required" or isinstance(choice, ToolChoiceFunction))


@dataclass(frozen=True, slots=True)
class StartBackend:
    """Open the backend stream for a response: fence number `seq`, the pruned prompt, and the
    transcripts of its user audio known when it starts (the cascade hears through them)."""

    response_id: str
    seq: int
    request: InferenceRequest
    transcripts: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, eq=False)
class DetectSpeech:
    """Ask the VAD for one probability per 512-sample 16 kHz chunk; answer `SpeechProbabilities`
    (or `VadDown`). The chunks of one append travel together: one round trip per append."""

    chunks: tuple[Samples, ...]
    chunk_end_ms: tuple[int, ...]


@dataclass(frozen=True, slots=True, eq=False)
class Transcribe:
    """Transcribe a committed user turn, or (`purpose="overlap"`) the speech overlapping a
    paused reply so far (16 kHz samples); answer `TranscriptReady` with `purpose` and `token`."""

    item_id: str
    audio16k: Samples
    purpose: TranscriptPurpose = "turn"
    token: int = 0


@dataclass(frozen=True, slots=True, eq=False)
class PredictTurn:
    """Ask the `turn` model whether the user's turn is complete, on its last 8 s at 16 kHz
    (semantic_vad); answer `TurnPrediction` with `token`."""

    token: int
    audio16k: Samples


@dataclass(frozen=True, slots=True)
class ArmTimer:
    """Report `TimerFired(kind, token)` at `deadline_ms` on the caller's clock (the `now_ms` it
    passes the core). Replaces an armed timer of the same kind."""

    kind: TimerKind
    deadline_ms: int
    token: int


@dataclass(frozen=True, slots=True)
class CancelTimer:
    kind: TimerKind


# Why a session (or, for `session_replaced`, one of its connections) ends: the metrics label.
SessionEndCause = Literal[
    "server_shutting_down",
    "server_restarting",
    "session_expired",
    "session_replaced",
    "client_not_reading",
    "grace_expired",
    "journal_overflow",
    "internal_error",
    "refused_draining",
    "connection_failed",
]


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """The step ends at a turn boundary (orchestrator/session/core.py rule 9): once its events
    are out, the session's state (`SessionCore.state`) is worth keeping where another process
    can take the session over (orchestrator/session/resume/snapshot.py). Carried out after the
    step's events, as `SessionEnd` is, so the snapshot's journal holds them."""


@dataclass(frozen=True, slots=True)
class SessionEnd:
    """How a session ends, the one type for it: the WebSocket close code and reason, and the
    metrics label. Chosen only by orchestrator/session/ending.py. As an action: close the
    connection once this step's events are out."""

    code: int
    reason: str
    cause: SessionEndCause
    # False when there is nothing to flush to (a client that stopped reading, or none): the
    # connection is cut, not flushed.
    flush: bool = True


Action = (
    StartBackend
    | CancelBackend
    | DetectSpeech
    | Transcribe
    | PredictTurn
    | ArmTimer
    | CancelTimer
    | SessionEnd
    | Checkpoint
)

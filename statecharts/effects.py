"""Typed effects that the charts emit and the orchestrator carries out.

Charts decide; they never act. Entering a state or taking a transition appends one of these
values to the chart's outbox. The orchestrator drains the outbox after every event and
performs each effect in order (send a server event, cancel a backend stream, write history).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

ResponseStatus = Literal["completed", "cancelled", "failed", "incomplete"]
HistoryMode = Literal["full", "cut"]


@dataclass(frozen=True, slots=True)
class StartInference:
    """Open the backend stream for a response."""

    response_id: str


@dataclass(frozen=True, slots=True)
class CancelInference:
    """Cancel the backend stream of a response at once (rule 1)."""

    response_id: str


@dataclass(frozen=True, slots=True)
class ForwardOutput:
    """Deliver one backend chunk of a generating response to the client (rule 2)."""

    response_id: str
    chunk: object


@dataclass(frozen=True, slots=True)
class SendCleared:
    """Send `output_audio_buffer.cleared` for a response (rules 1, 4)."""

    response_id: str


@dataclass(frozen=True, slots=True)
class SendResponseDone:
    """Send the one `response.done` of a response (rule 3)."""

    response_id: str
    status: ResponseStatus
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class CommitHistory:
    """Write what the user heard of a reply into its history slot (rule 5).

    `full`: the whole reply was heard. `cut`: cut at the playback cursor (or at
    `audio_end_ms` when given); nothing heard leaves the empty boundary.
    """

    response_id: str
    mode: HistoryMode
    audio_end_ms: int | None = None


@dataclass(frozen=True, slots=True)
class CommitInput:
    """Commit the input audio buffer as the next user item."""

    audio_end_ms: int | None = None


@dataclass(frozen=True, slots=True)
class CreateResponse:
    """Start a response for the turn just committed."""


@dataclass(frozen=True, slots=True)
class InterruptResponses:
    """Interrupt every live response of the session (barge-in, rule 1; clear, rule 4)."""

    reason: Literal["turn_detected", "client_cancelled"]


@dataclass(frozen=True, slots=True)
class InterruptResponse:
    """Interrupt one named response that is not the latest (rule 4: older clears)."""

    response_id: str
    reason: Literal["turn_detected", "client_cancelled"]


@dataclass(frozen=True, slots=True)
class AnnounceSpeechStarted:
    """Send `input_audio_buffer.speech_started`."""

    audio_start_ms: int


@dataclass(frozen=True, slots=True)
class AnnounceSpeechStopped:
    """Send `input_audio_buffer.speech_stopped`."""

    audio_end_ms: int


@dataclass(frozen=True, slots=True)
class RejectCommit:
    """Answer a commit that cannot be taken with an error (rule 7)."""

    code: str
    message: str


Effect = (
    StartInference
    | CancelInference
    | ForwardOutput
    | SendCleared
    | SendResponseDone
    | CommitHistory
    | CommitInput
    | CreateResponse
    | InterruptResponses
    | InterruptResponse
    | AnnounceSpeechStarted
    | AnnounceSpeechStopped
    | RejectCommit
)

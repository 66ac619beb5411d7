"""Typed effects that the charts emit and the orchestrator carries out.

Charts decide; they never act. Entering a state or taking a transition appends one of these
values to the chart's outbox. The session core drains the outbox after every event and
performs each effect in order (build a server event, write history, hand the session chart a
response's finish). `OpenStream` is the core's to turn into the `StartBackend` action (it
holds the request: a chart carries no prompt); `CancelBackend` goes on to the session actor
as it is. Nothing here imports the orchestrator: the charts are the lowest layer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from statecharts.vocabulary import OverlapDecisionKind, OverlapReason, TerminalStatus

HistoryMode = Literal["full", "cut"]
RejectCode = Literal[
    "input_audio_buffer_commit_empty",
    "response_cancel_not_active",
    "conversation_already_has_active_response",
]
# Why a preemptive response was dropped (statecharts/session.py, preemption region).
PreemptDropReason = Literal[
    "speech_resumed",
    "context_changed",
    "failed",
    "overflow",
    "input_cleared",
    "closed",
    "not_answered",
]


@dataclass(frozen=True, slots=True)
class OpenStream:
    """Open the backend stream for a response with fence number `seq` (the core builds the
    `StartBackend` action from the response's request)."""

    response_id: str
    seq: int


@dataclass(frozen=True, slots=True)
class CancelBackend:
    """Cancel the backend stream of a response at once (rule 1)."""

    response_id: str
    seq: int


@dataclass(frozen=True, slots=True)
class ResponseFinished:
    """A response left `generating`; `audio_pending` when its audio is not yet heard in full.
    The core hands it to the session chart (its output region follows the latest response)."""

    response_id: str
    audio_pending: bool


@dataclass(frozen=True, slots=True)
class ResponseSettled:
    """What the user heard of a reply is in history for good; handed to the session chart."""

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
    status: TerminalStatus
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
class CommitCall:
    """The response's function call, if it made one, is complete: write it into its history
    slot (a call has no audio, so it is heard once complete; rule 5)."""

    response_id: str


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
class Reject:
    """Answer a client event that the chart cannot take with an error (rules 3, 7)."""

    code: RejectCode
    message: str


@dataclass(frozen=True, slots=True)
class WindDown:
    """The server drains while the latest response generates: its end is held until it
    finishes, and the core arms the drain's bound on it (`drain_over` when it passes)."""


@dataclass(frozen=True, slots=True)
class EndSession:
    """The drain ends the session now: the core closes it (as `close`, then its end)."""


@dataclass(frozen=True, slots=True)
class AnswerClear:
    """A clear of the latest response when nothing is live: answered with
    `output_audio_buffer.cleared` all the same (the client's buffer is empty now)."""

    response_id: str | None


@dataclass(frozen=True, slots=True)
class PauseOutput:
    """Pause mode: send `output_audio_buffer.paused` (the client stops, keeps its queue)."""

    response_id: str


@dataclass(frozen=True, slots=True)
class ResumeOutput:
    """Pause mode: send `output_audio_buffer.resumed` (the client plays on)."""

    response_id: str


@dataclass(frozen=True, slots=True)
class OverlapDecided:
    """The one `overlap.decision` of an overlap; the core adds what was measured and heard."""

    response_id: str
    decision: OverlapDecisionKind
    reason: OverlapReason


@dataclass(frozen=True, slots=True)
class OverlapSpeechStarted:
    """Pause mode: speech over the paused reply started (the pause's first, or speech after
    the held overlap's): the core measures it (orchestrator/session/turns/overlap.py)."""

    audio_start_ms: int


@dataclass(frozen=True, slots=True)
class OverlapSpeechStopped:
    """Pause mode: the overlap's speech stopped and is held, undecided: the core arms the
    resume timer from where it ended."""

    audio_end_ms: int


@dataclass(frozen=True, slots=True)
class DropInput:
    """A resumed overlap: drop its audio from the input buffer, with no event (it never
    becomes a user turn)."""


@dataclass(frozen=True, slots=True)
class HearByAcknowledgement:
    """The client acknowledges playback: from now on the playback ledger builds history from
    its ACKs (rule 5), no longer from what was generated (docs/protocol.md "History without
    acknowledgements"). `response_id` is the reply the first ACK names."""

    response_id: str


@dataclass(frozen=True, slots=True)
class StartPreemptive:
    """Start a preemptive response on the turn so far (orchestrator/session/turns/preemption.py):
    its
    output is held, nothing of it is sent until it is adopted."""


@dataclass(frozen=True, slots=True)
class AdoptPreemptive:
    """The turn was committed as the preemptive response heard it: create the response from
    it (after `input_audio_buffer.committed`) and replay its held output."""


@dataclass(frozen=True, slots=True)
class DropPreemptive:
    """Cancel the preemptive response's stream and forget its held output: nothing of it is
    ever sent."""

    reason: PreemptDropReason


# Why a session ended while no client held it open (statecharts/connection.py).
UnattendedEnd = Literal["client_left", "grace_expired", "journal_overflow"]


@dataclass(frozen=True, slots=True)
class ArmGrace:
    """The connection was lost without a 1000 close: the session lives on for its grace,
    its running responses going on and their events journaled."""


@dataclass(frozen=True, slots=True)
class CancelGrace:
    """A resume came within the grace: the session is not to end."""


@dataclass(frozen=True, slots=True)
class ReplaceConnection:
    """Another connection resumed the session while this one is still open: tell it
    (`session_replaced`) and close it with 1000."""


@dataclass(frozen=True, slots=True)
class AttachConnection:
    """Carry the session on the resuming connection: `session.resumed`, the replay, then
    live events."""


@dataclass(frozen=True, slots=True)
class EndUnattended:
    """End the session as a client leaving does (streams cancelled, metrics); no client
    is there to tell."""

    cause: UnattendedEnd


# What a reply's playback means for history (statecharts/playback.py): the playback ledger
# carries these out on the reply they came from, with its own numbers.


@dataclass(frozen=True, slots=True)
class HearAll:
    """History holds the whole reply (its full transcript and audio)."""


@dataclass(frozen=True, slots=True)
class HearUntil:
    """History holds the reply up to `audio_end_ms` of its audio (at most what was generated;
    the text aligned with audio that ends there)."""

    audio_end_ms: int


@dataclass(frozen=True, slots=True)
class HearNothing:
    """History holds the reply's empty boundary again (an estimate withdrawn)."""


@dataclass(frozen=True, slots=True)
class StartGrace:
    """A provisional cut: the client's first word within `ack_grace_ms` from now sets it."""


Effect = (
    OpenStream
    | CancelBackend
    | ResponseFinished
    | ResponseSettled
    | ForwardOutput
    | SendCleared
    | SendResponseDone
    | CommitHistory
    | CommitCall
    | CommitInput
    | CreateResponse
    | InterruptResponses
    | InterruptResponse
    | AnnounceSpeechStarted
    | AnnounceSpeechStopped
    | Reject
    | WindDown
    | EndSession
    | AnswerClear
    | PauseOutput
    | ResumeOutput
    | OverlapDecided
    | OverlapSpeechStarted
    | OverlapSpeechStopped
    | DropInput
    | HearByAcknowledgement
    | StartPreemptive
    | AdoptPreemptive
    | DropPreemptive
    | ArmGrace
    | CancelGrace
    | ReplaceConnection
    | AttachConnection
    | EndUnattended
    | HearAll
    | HearUntil
    | HearNothing
    | StartGrace
)

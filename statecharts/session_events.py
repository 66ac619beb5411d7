"""The SessionChart's events, typed (statecharts/session.py says what each one does).

Rules:
1. One class per event of the chart; `name` is the chart's event, the fields its arguments
   (the guards and actions read them by name). tests/statecharts/test_chart_events.py checks
   that the classes and the chart's events are the same set.
2. Facts only: each carries what the caller measured or was told, never a decision.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from statecharts.base import ChartEvent
from statecharts.vocabulary import Heard

__all__ = [
    "Cancel",
    "Clear",
    "ClearInput",
    "Close",
    "Commit",
    "ContextChanged",
    "Drain",
    "DrainOver",
    "OverlapHeard",
    "PlaybackAcked",
    "PreemptFailed",
    "ResponseFinished",
    "ResponseRequested",
    "ResponseSettled",
    "ResponseStarted",
    "ResumeTimer",
    "SessionEvent",
    "SpeechResumed",
    "SpeechStarted",
    "SpeechStopped",
    "Truncate",
    "TurnPaused",
]


@dataclass(frozen=True, slots=True)
class SessionEvent(ChartEvent):
    """Any of the SessionChart's events."""


@dataclass(frozen=True, slots=True)
class SpeechStarted(SessionEvent):
    name: ClassVar[str] = "speech_started"
    audio_start_ms: int


@dataclass(frozen=True, slots=True)
class SpeechStopped(SessionEvent):
    """The user's speech stopped; with what the overlap tracker measured (pause mode)."""

    name: ClassVar[str] = "speech_stopped"
    audio_end_ms: int
    buffered_ms: int
    speech_ms: int = 0
    heard: Heard = "nothing"
    waited: bool = False


@dataclass(frozen=True, slots=True)
class Commit(SessionEvent):
    """`input_audio_buffer.commit` (or the idle timeout's commit)."""

    name: ClassVar[str] = "commit"
    buffered_ms: int
    final: bool | None = None
    create_response: bool | None = None


@dataclass(frozen=True, slots=True)
class ClearInput(SessionEvent):
    name: ClassVar[str] = "clear_input"


@dataclass(frozen=True, slots=True)
class OverlapHeard(SessionEvent):
    """Pause mode: the overlap tracker has new facts for the chart to judge."""

    name: ClassVar[str] = "overlap_heard"
    speech_ms: int = 0
    heard: Heard = "nothing"
    waited: bool = False


@dataclass(frozen=True, slots=True)
class ResumeTimer(SessionEvent):
    name: ClassVar[str] = "resume_timer"
    speech_ms: int = 0
    heard: Heard = "nothing"
    waited: bool = False


@dataclass(frozen=True, slots=True)
class Clear(SessionEvent):
    """`output_audio_buffer.clear` (None: the latest response)."""

    name: ClassVar[str] = "clear"
    response_id: str | None = None


@dataclass(frozen=True, slots=True)
class Cancel(SessionEvent):
    """`response.cancel` (None: the latest); `target_live` when the named one is live."""

    name: ClassVar[str] = "cancel"
    response_id: str | None = None
    target_live: bool = False


@dataclass(frozen=True, slots=True)
class Truncate(SessionEvent):
    name: ClassVar[str] = "truncate"
    response_id: str | None = None


@dataclass(frozen=True, slots=True)
class ResponseRequested(SessionEvent):
    """A response is about to be created (rule 3 decides whether it may)."""

    name: ClassVar[str] = "response_requested"


@dataclass(frozen=True, slots=True)
class ResponseStarted(SessionEvent):
    name: ClassVar[str] = "response_started"
    response_id: str


@dataclass(frozen=True, slots=True)
class ResponseFinished(SessionEvent):
    """A response chart's `ResponseFinished`, routed by the core."""

    name: ClassVar[str] = "response_finished"
    response_id: str
    audio_pending: bool = False


@dataclass(frozen=True, slots=True)
class ResponseSettled(SessionEvent):
    """A response chart's `ResponseSettled`, routed by the core."""

    name: ClassVar[str] = "response_settled"
    response_id: str


@dataclass(frozen=True, slots=True)
class Close(SessionEvent):
    name: ClassVar[str] = "close"


@dataclass(frozen=True, slots=True)
class Drain(SessionEvent):
    """The server drains: the session is to end, once its answer has finished."""

    name: ClassVar[str] = "server_draining"


@dataclass(frozen=True, slots=True)
class DrainOver(SessionEvent):
    """The drain's bound on the answer passed (the timer `WindDown` asked for)."""

    name: ClassVar[str] = "drain_over"


@dataclass(frozen=True, slots=True)
class PlaybackAcked(SessionEvent):
    name: ClassVar[str] = "playback_acked"
    response_id: str


@dataclass(frozen=True, slots=True)
class TurnPaused(SessionEvent):
    """A candidate end of turn (the VAD's pause)."""

    name: ClassVar[str] = "turn_paused"


@dataclass(frozen=True, slots=True)
class SpeechResumed(SessionEvent):
    name: ClassVar[str] = "speech_resumed"


@dataclass(frozen=True, slots=True)
class ContextChanged(SessionEvent):
    """What a preemptive response was given changed (an item, a setting, a response)."""

    name: ClassVar[str] = "context_changed"


@dataclass(frozen=True, slots=True)
class PreemptFailed(SessionEvent):
    name: ClassVar[str] = "preempt_failed"
    reason: Literal["failed", "overflow"] = "failed"

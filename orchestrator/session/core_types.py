"""The values `SessionCore` is spoken to and answers with: its inputs, its `Step`, its config
and the error codes it uses (docs/protocol.md).

A `Step` keeps server events and actions apart; the session actor carries out the actions
before it queues the events (orchestrator/session/actions.py says why). Its `notes` say what was
decided that no event shows (why a turn ended, what became of a preemptive response, what the
echo rules made of a VAD chunk): for metrics only, nothing acts on them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from orchestrator.protocol import client as ce
from orchestrator.protocol import server as se
from orchestrator.protocol.errors import ProtocolError
from orchestrator.protocol.session_config import SessionConfig
from orchestrator.session.actions import Action
from orchestrator.session.echo.processors import Processors
from orchestrator.session.echo.verdict import EchoVerdict
from orchestrator.session.echo.webrtc import WebRtcProcessors
from orchestrator.session.history import conversation as conv
from orchestrator.session.inputs import (
    BackendAudio,
    BackendDone,
    BackendFailed,
    BackendText,
    BackendToolCall,
    CloseRequested,
    DrainRequested,
    SpeechProbabilities,
    TimerFired,
    TranscriptReady,
    TurnPrediction,
    VadDown,
    VadPaused,
    VadResumed,
    VadSpeechStarted,
    VadSpeechStopped,
)
from orchestrator.session.turns.end_of_turn import EndCause
from statecharts.effects import PreemptDropReason

# Every error code the core itself answers with (the codec's own are in protocol.errors).
CoreErrorCode = Literal[
    "input_audio_buffer_full",
    "input_audio_buffer_commit_empty",
    "response_cancel_not_active",
    "conversation_already_has_active_response",
    "item_create_duplicate_item_id",
    "item_retrieve_invalid_item_id",
    "item_delete_invalid_item_id",
    "item_truncate_invalid_item_id",
    "item_not_found",
    "invalid_value",
    "playback_item_not_found",
    "playback_item_mismatch",
    "vad_unavailable",
    "turn_model_unavailable",
    "unsupported_turn_detection",
    "session_expired",
    "server_shutting_down",
]

CoreInput = (
    ce.ClientEvent
    | ProtocolError
    | SpeechProbabilities
    | VadDown
    | VadSpeechStarted
    | VadSpeechStopped
    | VadPaused
    | VadResumed
    | TurnPrediction
    | BackendText
    | BackendAudio
    | BackendToolCall
    | BackendDone
    | BackendFailed
    | TranscriptReady
    | TimerFired
    | CloseRequested
    | DrainRequested
)


@dataclass(frozen=True, slots=True)
class TurnEnded:
    """A VAD turn ended: by semantic_vad's model, its longest wait, its fallback to the
    silence rule during a `turn` outage, or server_vad's silence."""

    cause: EndCause


PreemptOutcome = Literal["started", "used", "dropped"]


@dataclass(frozen=True, slots=True)
class PreemptNoted:
    """A preemptive response started, was adopted (`used`) or was dropped (with why)."""

    outcome: PreemptOutcome
    reason: PreemptDropReason | None = None


# EchoVerdict: echo/verdict.py, one per VAD chunk heard over the echo.
Note = TurnEnded | PreemptNoted | EchoVerdict


@dataclass(frozen=True, slots=True)
class Step:
    """What one input produced: server events to send, in order, and actions to carry out
    (before the events: see orchestrator/session/actions.py); `notes` for metrics."""

    events: tuple[se.ServerEvent, ...] = ()
    actions: tuple[Action, ...] = ()
    notes: tuple[Note, ...] = ()

    def __add__(self, other: Step) -> Step:
        return Step(
            self.events + other.events, self.actions + other.actions, self.notes + other.notes
        )


@dataclass(frozen=True, slots=True)
class CoreState:
    """What a session core hands another process to go on (`SessionCore.state`, `restore`;
    orchestrator/session/resume/snapshot.py encodes it)."""

    settings: SessionConfig
    items: tuple[conv.Item, ...]
    next_id: int  # the id counter: new ids follow it
    live: tuple[str, ...] = ()  # responses generating (their response.done not yet sent)


@dataclass(frozen=True, slots=True)
class CoreConfig:
    limits: conv.HistoryLimits = field(default_factory=conv.HistoryLimits)
    max_input_buffer_bytes: int = 16 * 1024 * 1024
    playback_entries: int = 64
    # docs/protocol.md rule 5's amendment: after the server's own clear, the client's first
    # ACK or truncate of the reply within this long sets what was heard of it.
    ack_grace_ms: int = 1000
    model: str = "turntaker"
    # A transcriber is there to ask (`Transcribe`); without one no transcript is ever asked for.
    transcriber: bool = False
    # The pipeline hears user audio through the orchestrator's transcripts (the cascade): every
    # committed turn is transcribed, and a response starts once its turns' transcripts are in.
    transcripts_for_pipeline: bool = False
    transcript_wait_ms: int = 30_000
    # Pause mode: how long a decision at `min_speech_ms` waits for the partial transcript in
    # flight before duration decides (docs/protocol.md "Interruption policy").
    grace_ms: int = 150
    # A `turn` model is there to ask (`PredictTurn`): semantic_vad is offered.
    turn_model: bool = False
    # The silence that makes a candidate end of turn: semantic_vad asks its model there, and a
    # preemptive response starts (5 VAD chunks; pipecat runs Smart Turn after 200 ms).
    candidate_pause_ms: int = 160
    # What one preemptive response may hold before its turn is committed (over: dropped).
    preempt_max_events: int = 4096
    preempt_max_bytes: int = 4 * 1024 * 1024
    # The DSP of `audio.input.echo_cancellation` / `noise_reduction` (core_echo.py), built when
    # a session first asks for either.
    processors: Callable[[], Processors] = WebRtcProcessors

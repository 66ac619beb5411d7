"""The values `SessionCore` is spoken to and answers with: its inputs, its `Step`, its config
and the error codes it uses (docs/protocol.md).

A `Step` keeps server events and actions apart; the session actor carries out the actions
before it queues the events (orchestrator/actions.py says why).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from orchestrator import conversation as conv
from orchestrator.actions import Action
from orchestrator.inputs import (
    BackendAudio,
    BackendDone,
    BackendFailed,
    BackendText,
    CloseRequested,
    SpeechProbabilities,
    TimerFired,
    TranscriptReady,
    VadDown,
    VadSpeechStarted,
    VadSpeechStopped,
)
from orchestrator.protocol import client as ce
from orchestrator.protocol import server as se
from orchestrator.protocol.errors import ProtocolError

# Every error code the core itself answers with (the codec's own are in protocol.errors).
CoreErrorCode = Literal[
    "input_audio_buffer_full",
    "input_audio_buffer_commit_empty",
    "response_not_active",
    "conversation_already_has_active_response",
    "unsupported_conversation",
    "item_already_exists",
    "item_not_found",
    "invalid_value",
    "playback_item_not_found",
    "playback_item_mismatch",
    "vad_unavailable",
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
    | BackendText
    | BackendAudio
    | BackendDone
    | BackendFailed
    | TranscriptReady
    | TimerFired
    | CloseRequested
)


@dataclass(frozen=True, slots=True)
class Step:
    """What one input produced: server events to send, in order, and actions to carry out
    (before the events: see orchestrator/actions.py)."""

    events: tuple[se.ServerEvent, ...] = ()
    actions: tuple[Action, ...] = ()

    def __add__(self, other: Step) -> Step:
        return Step(self.events + other.events, self.actions + other.actions)


@dataclass(frozen=True, slots=True)
class CoreConfig:
    limits: conv.HistoryLimits = field(default_factory=conv.HistoryLimits)
    max_input_buffer_bytes: int = 16 * 1024 * 1024
    playback_entries: int = 64
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

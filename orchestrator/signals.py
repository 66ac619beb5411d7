"""Typed inputs the session core takes besides client events, and the actions it asks for.

Inputs come from the I/O layer: the VAD (speech start/stop on the session's input audio
clock) and the backend stream of a response (tagged with the response's fence number, so
late output of an older response is recognised without remembering it). Actions go back to
the I/O layer: open or cancel a backend stream.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from orchestrator.conversation import Item


@dataclass(frozen=True, slots=True)
class VadSpeechStarted:
    audio_start_ms: int


@dataclass(frozen=True, slots=True)
class VadSpeechStopped:
    audio_end_ms: int


@dataclass(frozen=True, slots=True)
class BackendText:
    """A text delta: the reply's text (text mode) or its transcript (audio mode)."""

    response_id: str
    seq: int
    text: str


@dataclass(frozen=True, slots=True)
class BackendAudio:
    """A chunk of reply audio (pcm16, 24 kHz, mono) and the transcript text it speaks."""

    response_id: str
    seq: int
    audio: bytes
    text: str = ""


@dataclass(frozen=True, slots=True)
class BackendDone:
    response_id: str
    seq: int
    output_tokens: int = 0


@dataclass(frozen=True, slots=True)
class BackendFailed:
    response_id: str
    seq: int
    reason: str


BackendEvent = BackendText | BackendAudio | BackendDone | BackendFailed
VadEvent = VadSpeechStarted | VadSpeechStopped


@dataclass(frozen=True, slots=True)
class InferenceRequest:
    """Everything a pipeline needs for one response: the pruned prompt and parameters."""

    instructions: str
    items: tuple[Item, ...]
    output_modalities: tuple[Literal["audio", "text"], ...]
    max_output_tokens: int | None
    voice: str = "alloy"
    metadata: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class StartBackend:
    response_id: str
    seq: int
    request: InferenceRequest


@dataclass(frozen=True, slots=True)
class CancelBackend:
    response_id: str
    seq: int


Action = StartBackend | CancelBackend

"""The `realtime.response` object carried by `response.created` and `response.done`."""

from __future__ import annotations

from typing import Literal

import msgspec

from statecharts.vocabulary import IncompleteReason, TerminalStatus

from .items import Item
from .session_config import AudioFormat, MaxTokens, Modality

__all__ = [
    "CachedTokensDetails",
    "InputTokenDetails",
    "OutputTokenDetails",
    "Response",
    "ResponseAudio",
    "ResponseAudioOutput",
    "ResponseStatus",
    "StatusDetails",
    "StatusError",
    "StatusReason",
    "Usage",
]

# A response still running, or how it ended (the charts' `TerminalStatus`, defined once).
ResponseStatus = Literal["in_progress", TerminalStatus]
# A `cancelled` response's reason, or an `incomplete` one's (the charts' `IncompleteReason`).
StatusReason = Literal["turn_detected", "client_cancelled", IncompleteReason]


class StatusError(msgspec.Struct, frozen=True, kw_only=True):
    """Why a `failed` response failed (docs/protocol.md rule 8: reported, not hidden)."""

    type: str
    code: str | None = None
    message: str | None = None


class StatusDetails(msgspec.Struct, frozen=True, kw_only=True):
    type: Literal["completed", "cancelled", "incomplete", "failed"]
    reason: StatusReason | None = None
    error: StatusError | None = None


class CachedTokensDetails(msgspec.Struct, frozen=True, kw_only=True):
    text_tokens: int = 0
    audio_tokens: int = 0
    image_tokens: int = 0


class InputTokenDetails(msgspec.Struct, frozen=True, kw_only=True):
    text_tokens: int = 0
    audio_tokens: int = 0
    image_tokens: int = 0
    cached_tokens: int = 0
    cached_tokens_details: CachedTokensDetails = CachedTokensDetails()


class OutputTokenDetails(msgspec.Struct, frozen=True, kw_only=True):
    text_tokens: int = 0
    audio_tokens: int = 0


class Usage(msgspec.Struct, frozen=True, kw_only=True):
    total_tokens: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    input_token_details: InputTokenDetails = InputTokenDetails()
    output_token_details: OutputTokenDetails = OutputTokenDetails()


class ResponseAudioOutput(msgspec.Struct, frozen=True, kw_only=True):
    format: AudioFormat
    voice: str


class ResponseAudio(msgspec.Struct, frozen=True, kw_only=True):
    output: ResponseAudioOutput


class Response(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    object: Literal["realtime.response"] = "realtime.response"
    status: ResponseStatus = "in_progress"
    status_details: StatusDetails | None = None
    output: tuple[Item, ...] = ()
    # "auto" responses land in the session's one conversation; "none" ones in none (null).
    conversation_id: str | None = None
    output_modalities: tuple[Modality, ...] = ("audio",)
    max_output_tokens: MaxTokens = "inf"
    audio: ResponseAudio | None = None
    usage: Usage | None = None
    metadata: dict[str, str] | None = None

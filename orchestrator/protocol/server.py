"""Server events (GA names only), ready for `codec.ServerEventEncoder`.

`event_id` defaults to "" so producers need not invent ids; the per-session encoder
fills it in. Audio deltas hold raw `bytes`; msgspec writes them as base64.
"""

from __future__ import annotations

from typing import Literal

import msgspec
from msgspec import UNSET, UnsetType

from statecharts.vocabulary import OverlapDecisionKind, OverlapReason

from .items import Item, OutputAudio, OutputText
from .response import Response
from .session_config import SessionObject

__all__ = [
    "SERVER_EVENT_TYPES",
    "ConversationContext",
    "ConversationItemAdded",
    "ConversationItemDeleted",
    "ConversationItemDone",
    "ConversationItemInputAudioTranscriptionCompleted",
    "ConversationItemInputAudioTranscriptionDelta",
    "ConversationItemInputAudioTranscriptionFailed",
    "ConversationItemRetrieved",
    "ConversationItemTruncated",
    "ErrorEvent",
    "ErrorInfo",
    "InputAudioBufferCleared",
    "InputAudioBufferCommitted",
    "InputAudioBufferSpeechStarted",
    "InputAudioBufferSpeechStopped",
    "InputAudioBufferTimeoutTriggered",
    "OutputAudioBufferCleared",
    "OutputAudioBufferPaused",
    "OutputAudioBufferResumed",
    "OverlapDecision",
    "OverlapDecisionKind",
    "OverlapReason",
    "PlaybackAcknowledged",
    "RateLimit",
    "RateLimitsUpdated",
    "ResponseContentPartAdded",
    "ResponseContentPartDone",
    "ResponseCreated",
    "ResponseDone",
    "ResponseFunctionCallArgumentsDelta",
    "ResponseFunctionCallArgumentsDone",
    "ResponseOutputAudioDelta",
    "ResponseOutputAudioDone",
    "ResponseOutputAudioTranscriptDelta",
    "ResponseOutputAudioTranscriptDone",
    "ResponseOutputItemAdded",
    "ResponseOutputItemDone",
    "ResponseOutputTextDelta",
    "ResponseOutputTextDone",
    "ResponsePart",
    "ResponsePartAudio",
    "ResponsePartText",
    "ServerEvent",
    "SessionCreated",
    "SessionResumed",
    "SessionUpdated",
    "TranscriptionError",
    "TranscriptionInputTokenDetails",
    "TranscriptionUsageDuration",
    "TranscriptionUsageTokens",
    "response_part",
]


class _ServerEvent(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    event_id: str = ""
    # v2: the session's event number, stamped by the encoder (1 for `session.created`, then
    # +1 per event); unset (omitted) for events about the connection, which are outside it.
    server_event_seq: int | UnsetType = UNSET


# --- session ---------------------------------------------------------------------------


class SessionCreated(_ServerEvent, frozen=True, kw_only=True, tag="session.created"):
    session: SessionObject
    # v2: the secret a later connection resumes this session with; unset (omitted) until the
    # session actor's link fills it in.
    resume_token: str | UnsetType = UNSET


class SessionResumed(_ServerEvent, frozen=True, kw_only=True, tag="session.resumed"):
    """v2: this connection now carries `session_id`; replay starts at `replayed_from_seq`."""

    session_id: str
    resume_token: str
    replayed_from_seq: int


class SessionUpdated(_ServerEvent, frozen=True, kw_only=True, tag="session.updated"):
    session: SessionObject


# --- conversation items ----------------------------------------------------------------


class ConversationItemAdded(_ServerEvent, frozen=True, kw_only=True, tag="conversation.item.added"):
    previous_item_id: str | None = None
    item: Item


class ConversationItemDone(_ServerEvent, frozen=True, kw_only=True, tag="conversation.item.done"):
    previous_item_id: str | None = None
    item: Item


class ConversationItemRetrieved(
    _ServerEvent, frozen=True, kw_only=True, tag="conversation.item.retrieved"
):
    item: Item


class ConversationItemDeleted(
    _ServerEvent, frozen=True, kw_only=True, tag="conversation.item.deleted"
):
    item_id: str


class ConversationItemTruncated(
    _ServerEvent, frozen=True, kw_only=True, tag="conversation.item.truncated"
):
    item_id: str
    content_index: int
    audio_end_ms: int


# --- input audio buffer ----------------------------------------------------------------


class InputAudioBufferSpeechStarted(
    _ServerEvent, frozen=True, kw_only=True, tag="input_audio_buffer.speech_started"
):
    audio_start_ms: int
    item_id: str


class InputAudioBufferSpeechStopped(
    _ServerEvent, frozen=True, kw_only=True, tag="input_audio_buffer.speech_stopped"
):
    audio_end_ms: int
    item_id: str


class InputAudioBufferCommitted(
    _ServerEvent, frozen=True, kw_only=True, tag="input_audio_buffer.committed"
):
    previous_item_id: str | None = None
    item_id: str


class InputAudioBufferCleared(
    _ServerEvent, frozen=True, kw_only=True, tag="input_audio_buffer.cleared"
):
    pass


class InputAudioBufferTimeoutTriggered(
    _ServerEvent, frozen=True, kw_only=True, tag="input_audio_buffer.timeout_triggered"
):
    audio_start_ms: int
    audio_end_ms: int
    item_id: str


# --- input transcription ---------------------------------------------------------------


class TranscriptionInputTokenDetails(msgspec.Struct, frozen=True, kw_only=True):
    text_tokens: int = 0
    audio_tokens: int = 0


class TranscriptionUsageTokens(
    msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="tokens"
):
    input_tokens: int
    output_tokens: int
    total_tokens: int
    # OpenAI sends it; the JS Agents SDK's schema requires it.
    input_token_details: TranscriptionInputTokenDetails = TranscriptionInputTokenDetails()


class TranscriptionUsageDuration(
    msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="duration"
):
    seconds: float


# omit_defaults: the JS Agents SDK's schema takes these as strings or absent, never null (a
# null `param` makes it drop the whole event).
class TranscriptionError(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    type: str
    code: str | None = None
    message: str | None = None
    param: str | None = None


class ConversationItemInputAudioTranscriptionDelta(
    _ServerEvent,
    frozen=True,
    kw_only=True,
    tag="conversation.item.input_audio_transcription.delta",
):
    item_id: str
    content_index: int = 0
    delta: str


class ConversationItemInputAudioTranscriptionCompleted(
    _ServerEvent,
    frozen=True,
    kw_only=True,
    tag="conversation.item.input_audio_transcription.completed",
):
    item_id: str
    content_index: int = 0
    transcript: str
    # The SDK requires `usage`; duration is what a local transcriber can always report.
    usage: TranscriptionUsageTokens | TranscriptionUsageDuration


class ConversationItemInputAudioTranscriptionFailed(
    _ServerEvent,
    frozen=True,
    kw_only=True,
    tag="conversation.item.input_audio_transcription.failed",
):
    item_id: str
    content_index: int = 0
    error: TranscriptionError


# --- responses -------------------------------------------------------------------------


# `response.content_part.*` keep the short part names ("audio"/"text") in GA, unlike items
# ("output_audio"/"output_text"); the SDK's ResponseContentPart*Event.Part says so.
class ResponsePartAudio(
    msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, tag_field="type", tag="audio"
):
    audio: bytes | None = None
    transcript: str | None = None


class ResponsePartText(
    msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, tag_field="type", tag="text"
):
    text: str


ResponsePart = ResponsePartAudio | ResponsePartText


def response_part(part: OutputAudio | OutputText) -> ResponsePart:
    """The content-part-event spelling of an assistant item's content part."""
    if isinstance(part, OutputAudio):
        return ResponsePartAudio(audio=part.audio or None, transcript=part.transcript)
    return ResponsePartText(text=part.text)


class ResponseCreated(_ServerEvent, frozen=True, kw_only=True, tag="response.created"):
    response: Response


class ResponseDone(_ServerEvent, frozen=True, kw_only=True, tag="response.done"):
    response: Response


class ResponseOutputItemAdded(
    _ServerEvent, frozen=True, kw_only=True, tag="response.output_item.added"
):
    response_id: str
    output_index: int
    item: Item


class ResponseOutputItemDone(
    _ServerEvent, frozen=True, kw_only=True, tag="response.output_item.done"
):
    response_id: str
    output_index: int
    item: Item


class ResponseContentPartAdded(
    _ServerEvent, frozen=True, kw_only=True, tag="response.content_part.added"
):
    response_id: str
    item_id: str
    output_index: int
    content_index: int
    part: ResponsePart


class ResponseContentPartDone(
    _ServerEvent, frozen=True, kw_only=True, tag="response.content_part.done"
):
    response_id: str
    item_id: str
    output_index: int
    content_index: int
    part: ResponsePart


class ResponseOutputAudioDelta(
    _ServerEvent, frozen=True, kw_only=True, tag="response.output_audio.delta"
):
    response_id: str
    item_id: str
    output_index: int
    content_index: int
    delta: bytes


class ResponseOutputAudioDone(
    _ServerEvent, frozen=True, kw_only=True, tag="response.output_audio.done"
):
    response_id: str
    item_id: str
    output_index: int
    content_index: int


class ResponseOutputAudioTranscriptDelta(
    _ServerEvent, frozen=True, kw_only=True, tag="response.output_audio_transcript.delta"
):
    response_id: str
    item_id: str
    output_index: int
    content_index: int
    delta: str


class ResponseOutputAudioTranscriptDone(
    _ServerEvent, frozen=True, kw_only=True, tag="response.output_audio_transcript.done"
):
    response_id: str
    item_id: str
    output_index: int
    content_index: int
    transcript: str


class ResponseOutputTextDelta(
    _ServerEvent, frozen=True, kw_only=True, tag="response.output_text.delta"
):
    response_id: str
    item_id: str
    output_index: int
    content_index: int
    delta: str


class ResponseOutputTextDone(
    _ServerEvent, frozen=True, kw_only=True, tag="response.output_text.done"
):
    response_id: str
    item_id: str
    output_index: int
    content_index: int
    text: str


class ResponseFunctionCallArgumentsDelta(
    _ServerEvent, frozen=True, kw_only=True, tag="response.function_call_arguments.delta"
):
    response_id: str
    item_id: str
    output_index: int
    call_id: str
    delta: str


class ResponseFunctionCallArgumentsDone(
    _ServerEvent, frozen=True, kw_only=True, tag="response.function_call_arguments.done"
):
    response_id: str
    item_id: str
    output_index: int
    call_id: str
    name: str
    arguments: str


# --- misc ------------------------------------------------------------------------------


class RateLimit(msgspec.Struct, frozen=True, kw_only=True):
    name: Literal["requests", "tokens"]
    limit: int
    remaining: int
    reset_seconds: float


class RateLimitsUpdated(_ServerEvent, frozen=True, kw_only=True, tag="rate_limits.updated"):
    rate_limits: tuple[RateLimit, ...] = ()


class OutputAudioBufferCleared(
    _ServerEvent, frozen=True, kw_only=True, tag="output_audio_buffer.cleared"
):
    response_id: str


class OutputAudioBufferPaused(
    _ServerEvent, frozen=True, kw_only=True, tag="output_audio_buffer.paused"
):
    """Pause mode: stop playing this response where it is and keep what is queued."""

    response_id: str


class OutputAudioBufferResumed(
    _ServerEvent, frozen=True, kw_only=True, tag="output_audio_buffer.resumed"
):
    """Pause mode: play on from where the pause stopped."""

    response_id: str


# OverlapDecisionKind and OverlapReason are the charts' words (statecharts/vocabulary.py).


class OverlapDecision(_ServerEvent, frozen=True, kw_only=True, tag="overlap.decision"):
    """The one decision about an overlap that paused `response_id` (docs/protocol.md)."""

    response_id: str
    decision: OverlapDecisionKind
    reason: OverlapReason
    # Overlapping speech heard so far, in ms of input audio (prefix padding not counted).
    speech_ms: int
    # Extension: the latest partial transcript of the overlap the decision saw; null when none
    # was back (a decision made on duration alone).
    transcript: str | None = None


class ErrorInfo(msgspec.Struct, frozen=True, kw_only=True):
    type: str
    code: str | None = None
    message: str
    param: str | None = None
    # The client event that caused it (docs/protocol.md, "Conventions").
    event_id: str | None = None


class ErrorEvent(_ServerEvent, frozen=True, kw_only=True, tag="error"):
    error: ErrorInfo


# --- extensions ------------------------------------------------------------------------


class PlaybackAcknowledged(_ServerEvent, frozen=True, kw_only=True, tag="playback.acknowledged"):
    response_id: str
    item_id: str | None = None
    played_ms: int
    committed_ms: int | None = None
    # True once this ACK put the whole reply into the model's history (docs/protocol.md rule 5).
    history_committed: bool


class ConversationContext(_ServerEvent, frozen=True, kw_only=True, tag="conversation.context"):
    items: tuple[Item, ...]
    audio_inputs: int
    images: int
    bytes: int


ServerEvent = (
    SessionCreated
    | SessionResumed
    | SessionUpdated
    | ConversationItemAdded
    | ConversationItemDone
    | ConversationItemRetrieved
    | ConversationItemDeleted
    | ConversationItemTruncated
    | InputAudioBufferSpeechStarted
    | InputAudioBufferSpeechStopped
    | InputAudioBufferCommitted
    | InputAudioBufferCleared
    | InputAudioBufferTimeoutTriggered
    | ConversationItemInputAudioTranscriptionDelta
    | ConversationItemInputAudioTranscriptionCompleted
    | ConversationItemInputAudioTranscriptionFailed
    | ResponseCreated
    | ResponseDone
    | ResponseOutputItemAdded
    | ResponseOutputItemDone
    | ResponseContentPartAdded
    | ResponseContentPartDone
    | ResponseOutputAudioDelta
    | ResponseOutputAudioDone
    | ResponseOutputAudioTranscriptDelta
    | ResponseOutputAudioTranscriptDone
    | ResponseOutputTextDelta
    | ResponseOutputTextDone
    | ResponseFunctionCallArgumentsDelta
    | ResponseFunctionCallArgumentsDone
    | RateLimitsUpdated
    | OutputAudioBufferCleared
    | OutputAudioBufferPaused
    | OutputAudioBufferResumed
    | OverlapDecision
    | ErrorEvent
    | PlaybackAcknowledged
    | ConversationContext
)

SERVER_EVENT_TYPES: frozenset[str] = frozenset(
    str(cls.__struct_config__.tag) for cls in ServerEvent.__args__
)

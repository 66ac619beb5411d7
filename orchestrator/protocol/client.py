"""Client events, as the rest of the server sees them: typed, validated, one spelling.

`codec.decode_client_event` is the only producer. Beta spellings and raw session payloads
never get past it (see `client_wire`), so a consumer matches on these classes and nothing
else.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from .items import Item
from .session_config import MaxTokens, Modality, SessionPatch
from .tools import FunctionTool, ToolChoice

__all__ = [
    "CLIENT_EVENT_TYPES",
    "ClientEvent",
    "ConversationContextRetrieve",
    "ConversationItemCreate",
    "ConversationItemDelete",
    "ConversationItemRetrieve",
    "ConversationItemTruncate",
    "InputAudioBufferAppend",
    "InputAudioBufferClear",
    "InputAudioBufferCommit",
    "LinkEvent",
    "OutputAudioBufferClear",
    "PlaybackAck",
    "ResponseCancel",
    "ResponseCreate",
    "ResponseParams",
    "SessionEventAck",
    "SessionResume",
    "SessionUpdate",
]

NonNegative = Annotated[int, Meta(ge=0)]


class _ClientEvent(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    event_id: str | None = None


class SessionUpdate(_ClientEvent, frozen=True, kw_only=True, tag="session.update"):
    session: SessionPatch


class InputAudioBufferAppend(
    _ClientEvent, frozen=True, kw_only=True, tag="input_audio_buffer.append"
):
    audio: bytes  # base64 on the wire; msgspec decodes it during the parse


class InputAudioBufferCommit(
    _ClientEvent, frozen=True, kw_only=True, tag="input_audio_buffer.commit"
):
    # vllm-omni extensions (docs/protocol.md, "Extensions"); None means "not sent".
    create_response: bool | None = None
    final: bool | None = None


class InputAudioBufferClear(
    _ClientEvent, frozen=True, kw_only=True, tag="input_audio_buffer.clear"
):
    pass


class ConversationItemCreate(
    _ClientEvent, frozen=True, kw_only=True, tag="conversation.item.create"
):
    previous_item_id: str | None = None
    item: Item


class ConversationItemRetrieve(
    _ClientEvent, frozen=True, kw_only=True, tag="conversation.item.retrieve"
):
    item_id: str


class ConversationItemDelete(
    _ClientEvent, frozen=True, kw_only=True, tag="conversation.item.delete"
):
    item_id: str


class ConversationItemTruncate(
    _ClientEvent, frozen=True, kw_only=True, tag="conversation.item.truncate"
):
    item_id: str
    content_index: NonNegative
    audio_end_ms: NonNegative


class ItemReference(
    msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="item_reference"
):
    """`{type: "item_reference", id}` in `response.input`: a conversation item by id."""

    id: str


class ResponseParams(msgspec.Struct, frozen=True, kw_only=True):
    """Per-response overrides of `response.create`; None means "use the session's".

    `conversation: "none"` is an out-of-band response (nothing of it enters the conversation);
    `input`, when given, is the response's whole prompt instead of the conversation's."""

    output_modalities: tuple[Modality, ...] | None = None
    instructions: str | None = None
    max_output_tokens: MaxTokens | None = None
    conversation: Literal["auto", "none"] | None = None
    metadata: dict[str, str] | None = None
    tools: tuple[FunctionTool, ...] | None = None
    tool_choice: ToolChoice | None = None
    input: tuple[Item | ItemReference, ...] | None = None


class ResponseCreate(_ClientEvent, frozen=True, kw_only=True, tag="response.create"):
    response: ResponseParams | None = None


class ResponseCancel(_ClientEvent, frozen=True, kw_only=True, tag="response.cancel"):
    response_id: str | None = None


class OutputAudioBufferClear(
    _ClientEvent, frozen=True, kw_only=True, tag="output_audio_buffer.clear"
):
    response_id: str | None = None


class PlaybackAck(_ClientEvent, frozen=True, kw_only=True, tag="playback.ack"):
    """Extension: how much of a response's audio the client has actually played.

    Whole ms: the wire may carry fractions (`client_wire.WirePlaybackAck`), floored there.
    """

    response_id: str
    item_id: str | None = None
    played_ms: NonNegative
    committed_ms: NonNegative | None = None
    truncate: bool | None = None
    # How much input audio (ms, fractions kept) the client had captured when it read
    # `played_ms`: where on the input timeline the cursor stands (the echo's reference).
    input_ms: float | None = None


class ConversationContextRetrieve(
    _ClientEvent, frozen=True, kw_only=True, tag="conversation.context.retrieve"
):
    """Extension: ask for exactly what the next model prompt would contain."""


ClientEvent = (
    SessionUpdate
    | InputAudioBufferAppend
    | InputAudioBufferCommit
    | InputAudioBufferClear
    | ConversationItemCreate
    | ConversationItemRetrieve
    | ConversationItemDelete
    | ConversationItemTruncate
    | ResponseCreate
    | ResponseCancel
    | OutputAudioBufferClear
    | PlaybackAck
    | ConversationContextRetrieve
)


class SessionResume(_ClientEvent, frozen=True, kw_only=True, tag="session.resume"):
    """v2: take up a session whose connection was lost (docs/protocol.md "Session resume").

    Only as a connection's first client event; the session actor's link answers it, never
    the session core.
    """

    session_id: str
    resume_token: str
    last_server_event_seq: NonNegative


class SessionEventAck(_ClientEvent, frozen=True, kw_only=True, tag="session.event_ack"):
    """v2: the client has every server event up to this seq; the journal may drop them."""

    server_event_seq: NonNegative


# About the connection rather than the conversation: handled by the session's link
# (orchestrator/session/resume/link.py), so the core's dispatch never sees them.
LinkEvent = SessionResume | SessionEventAck

CLIENT_EVENT_TYPES: frozenset[str] = frozenset(
    str(cls.__struct_config__.tag) for cls in (*ClientEvent.__args__, *LinkEvent.__args__)
)

"""Wire spellings of `conversation.item.create`, `response.create` and `playback.ack`.

Items may use beta content names (`text`, `audio`) whose meaning depends on the role, and
they carry audio and images that must be checked against the session before anything
stores them. An item is a `message` (also when it has no `type`, as beta clients send it),
a `function_call` (`name`, `arguments`, optional `call_id`) or a `function_call_output`
(`call_id`, `output`); another type is `invalid_value`, a missing field of its type
`missing_required_parameter`. A `playback.ack` may count its cursors in fractional
milliseconds (a client that counts samples sends `samples / 24`); they are floored to whole
ms here, so the core only ever sees ints (docs/protocol.md, "playback.ack"). All of that
happens here, once, at the edge.
"""

from __future__ import annotations

import binascii
import math
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Annotated, Final, Literal

import msgspec
from msgspec import UNSET, Meta, UnsetType

from .client import (
    ConversationItemCreate,
    ItemReference,
    NonNegative,
    PlaybackAck,
    ResponseCreate,
    ResponseParams,
)
from .errors import InvalidInput
from .items import (
    ContentPart,
    FunctionCallItem,
    FunctionCallOutputItem,
    InputAudio,
    InputImage,
    InputText,
    Item,
    MessageItem,
    OutputAudio,
    OutputText,
    Role,
)
from .session_config import PCM16, AudioFormat
from .session_wire import WireMaxTokens, normalize_modalities
from .tools import (
    FunctionTool,
    ToolChoice,
    WireToolChoice,
    WireTools,
    normalize_tool_choice,
    normalize_tools,
)

__all__ = [
    "WireConversationItemCreate",
    "WirePlaybackAck",
    "WireResponseCreate",
    "check_image_url",
    "check_pcm_length",
    "normalize_item_create",
    "normalize_playback_ack",
    "normalize_response_create",
]


class _BetaText(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="text"):
    text: str


class _BetaAudio(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="audio"):
    audio: bytes | UnsetType | None = UNSET
    transcript: str | None = None


WireContentPart = (
    InputText | InputAudio | InputImage | OutputText | OutputAudio | _BetaText | _BetaAudio
)


class WireItem(msgspec.Struct, frozen=True, kw_only=True):
    """Every item type's fields side by side; `type` decides which must be there."""

    type: str = "message"
    id: str | None = None
    # message
    role: Role | None = None
    content: tuple[WireContentPart, ...] | None = None
    # function_call, function_call_output
    call_id: str | None = None
    name: str | None = None
    arguments: str | None = None
    output: str | None = None


class WireConversationItemCreate(
    msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="conversation.item.create"
):
    event_id: str | None = None
    previous_item_id: str | None = None
    item: WireItem


class WireResponseParams(msgspec.Struct, frozen=True, kw_only=True):
    output_modalities: tuple[str, ...] | None = None
    instructions: str | None = None
    max_output_tokens: WireMaxTokens | None = None
    conversation: Literal["auto", "none"] | None = None
    metadata: dict[str, str] | None = None
    tools: WireTools | None = None
    tool_choice: WireToolChoice | None = None
    input: tuple[WireItem, ...] | None = None
    # beta
    modalities: tuple[str, ...] | None = None
    max_response_output_tokens: WireMaxTokens | None = None


class WireResponseCreate(
    msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="response.create"
):
    event_id: str | None = None
    response: WireResponseParams | None = None


# An int stays an int (no float rounding of big values); a fraction is a float. Either way
# msgspec rejects negatives, strings, booleans and numbers out of float range ("1e400") with
# the field's path, so those stay precise `invalid_value` errors.
WireMs = NonNegative | Annotated[float, Meta(ge=0)]


class WirePlaybackAck(
    msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="playback.ack"
):
    event_id: str | None = None
    response_id: str
    item_id: str | None = None
    played_ms: WireMs
    committed_ms: WireMs | None = None
    truncate: bool | None = None
    input_ms: WireMs | None = None


def _whole_ms(value: int | float) -> int:
    # Floor, not round: a cursor must never claim audio the client has not played yet.
    # math.floor of a finite float is exact; msgspec never yields inf or nan from JSON.
    return value if isinstance(value, int) else math.floor(value)


def normalize_playback_ack(wire: WirePlaybackAck) -> PlaybackAck:
    return PlaybackAck(
        event_id=wire.event_id,
        response_id=wire.response_id,
        item_id=wire.item_id,
        played_ms=_whole_ms(wire.played_ms),
        committed_ms=None if wire.committed_ms is None else _whole_ms(wire.committed_ms),
        truncate=wire.truncate,
        input_ms=wire.input_ms,
    )


def check_pcm_length(audio: bytes, fmt: AudioFormat, param: str) -> None:
    """pcm16 is whole 2-byte samples; an odd length means the client framed it wrong."""
    if fmt.type == "audio/pcm" and len(audio) % 2:
        raise InvalidInput(
            "invalid_audio_length",
            f"Audio length {len(audio)} is not a whole number of 16-bit samples.",
            param,
        )


_DATA_URL: Final = re.compile(r"data:image/[A-Za-z0-9.+-]+;base64,")


def check_image_url(url: str, param: str) -> None:
    """Images are context only and must arrive inline; no fetching of remote URLs."""
    head = _DATA_URL.match(url)
    if head is None:
        raise InvalidInput(
            "invalid_image",
            "image_url must be a data URL: data:image/<type>;base64,<data>.",
            param,
        )
    payload = url[head.end() :]
    try:
        ok = bool(payload) and bool(binascii.a2b_base64(payload, strict_mode=True))
    except (binascii.Error, ValueError):
        ok = False
    if not ok:
        raise InvalidInput("invalid_image", "image_url carries no valid base64 image.", param)


# Which content types each role may hold, with the beta spellings mapped per role.
_ALLOWED: Final[Mapping[Role, tuple[type, ...]]] = MappingProxyType(
    {
        "user": (InputText, InputAudio, InputImage, _BetaText, _BetaAudio),
        "system": (InputText, _BetaText),
        "assistant": (OutputText, OutputAudio, _BetaText, _BetaAudio),
    }
)


def _part(part: WireContentPart, role: Role, fmt: AudioFormat, param: str) -> ContentPart:
    if not isinstance(part, _ALLOWED[role]):
        tag = type(part).__struct_config__.tag
        raise InvalidInput(
            "invalid_value",
            f"Content type '{tag}' is not allowed in a {role} message.",
            f"{param}.type",
        )
    if isinstance(part, _BetaText):
        return OutputText(text=part.text) if role == "assistant" else InputText(text=part.text)
    if isinstance(part, _BetaAudio):
        if role == "assistant":
            return OutputAudio(audio=part.audio, transcript=part.transcript)
        part = InputAudio(audio=part.audio, transcript=part.transcript)
    if isinstance(part, InputAudio):
        if not isinstance(part.audio, bytes):
            raise InvalidInput(
                "missing_required_parameter",
                f"Missing required parameter: '{param}.audio'.",
                f"{param}.audio",
            )
        check_pcm_length(part.audio, fmt, f"{param}.audio")
    elif isinstance(part, InputImage):
        check_image_url(part.image_url, f"{param}.image_url")
    return part


def _missing(param: str) -> InvalidInput:
    return InvalidInput(
        "missing_required_parameter", f"Missing required parameter: '{param}'.", param
    )


def _required(value: str | None, param: str) -> str:
    if value is None:
        raise _missing(param)
    return value


def _item(item: WireItem, input_format: AudioFormat, at: str = "item") -> Item:
    if item.type == "function_call":
        return FunctionCallItem(
            id=item.id,
            call_id=item.call_id,
            name=_required(item.name, f"{at}.name"),
            arguments=_required(item.arguments, f"{at}.arguments"),
        )
    if item.type == "function_call_output":
        return FunctionCallOutputItem(
            id=item.id,
            call_id=_required(item.call_id, f"{at}.call_id"),
            output=_required(item.output, f"{at}.output"),
        )
    if item.type != "message":
        raise InvalidInput(
            "invalid_value",
            f"Unsupported item type '{item.type[:64]}'; use 'message', 'function_call' or "
            "'function_call_output'.",
            f"{at}.type",
        )
    role, parts = item.role, item.content
    if role is None or parts is None:
        raise _missing(f"{at}.role" if role is None else f"{at}.content")
    content = tuple(_part(p, role, input_format, f"{at}.content[{i}]") for i, p in enumerate(parts))
    return MessageItem(id=item.id, role=role, content=content)


def _input_item(item: WireItem, input_format: AudioFormat, at: str) -> Item | ItemReference:
    """An item of `response.input`: any item `conversation.item.create` takes, or a
    reference to a conversation item."""
    if item.type == "item_reference":
        return ItemReference(id=_required(item.id, f"{at}.id"))
    return _item(item, input_format, at)


def normalize_item_create(
    wire: WireConversationItemCreate, input_format: AudioFormat
) -> ConversationItemCreate:
    return ConversationItemCreate(
        event_id=wire.event_id,
        previous_item_id=wire.previous_item_id,
        item=_item(wire.item, input_format),
    )


def normalize_response_create(
    wire: WireResponseCreate, input_format: AudioFormat = PCM16
) -> ResponseCreate:
    r = wire.response
    if r is None:
        return ResponseCreate(event_id=wire.event_id)
    modalities = None
    if r.output_modalities is not None:
        modalities = normalize_modalities(r.output_modalities, "response.output_modalities")
    elif r.modalities is not None:
        modalities = normalize_modalities(r.modalities, "response.modalities")
    max_tokens = (
        r.max_output_tokens if r.max_output_tokens is not None else r.max_response_output_tokens
    )
    tools: tuple[FunctionTool, ...] | None = None
    if r.tools is not None:
        tools = normalize_tools(r.tools, "response.tools")
    tool_choice: ToolChoice | None = None
    if r.tool_choice is not None:
        tool_choice = normalize_tool_choice(r.tool_choice, "response.tool_choice")
    return ResponseCreate(
        event_id=wire.event_id,
        response=ResponseParams(
            output_modalities=modalities,
            instructions=r.instructions,
            max_output_tokens=max_tokens,
            conversation=r.conversation,
            metadata=r.metadata,
            tools=tools,
            tool_choice=tool_choice,
            input=None
            if r.input is None
            else tuple(
                _input_item(item, input_format, f"response.input[{i}]")
                for i, item in enumerate(r.input)
            ),
        ),
    )

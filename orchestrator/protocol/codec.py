"""The edge: raw WebSocket text in, typed client events out; server events in, JSON out.

Sans-IO like h11/wsproto: no sockets, no clocks. The only state is the per-session
event-id counter inside `ServerEventEncoder`.
"""

from __future__ import annotations

import re
from typing import Any, Final

import msgspec
from msgspec import UNSET

from .client import (
    CLIENT_EVENT_TYPES,
    ClientEvent,
    ConversationContextRetrieve,
    ConversationItemDelete,
    ConversationItemRetrieve,
    ConversationItemTruncate,
    InputAudioBufferAppend,
    InputAudioBufferClear,
    InputAudioBufferCommit,
    LinkEvent,
    OutputAudioBufferClear,
    ResponseCancel,
    SessionEventAck,
    SessionResume,
)
from .client_wire import (
    WireConversationItemCreate,
    WirePlaybackAck,
    WireResponseCreate,
    check_pcm_length,
    normalize_item_create,
    normalize_playback_ack,
    normalize_response_create,
)
from .errors import InvalidInput, ProtocolError, from_validation_error
from .server import ErrorEvent, ErrorInfo, ServerEvent
from .session_config import PCM16, AudioFormat
from .session_wire import WireSessionUpdate, normalize_session_update

__all__ = [
    "DEFAULT_MAX_BYTES",
    "ServerEventEncoder",
    "decode_client_event",
    "error_event",
]

DEFAULT_MAX_BYTES: Final = 15 * 1024 * 1024

_WireClientEvent = (
    WireSessionUpdate
    | InputAudioBufferAppend
    | InputAudioBufferCommit
    | InputAudioBufferClear
    | WireConversationItemCreate
    | ConversationItemRetrieve
    | ConversationItemDelete
    | ConversationItemTruncate
    | WireResponseCreate
    | ResponseCancel
    | OutputAudioBufferClear
    | WirePlaybackAck
    | ConversationContextRetrieve
    | SessionResume
    | SessionEventAck
)

# Decoders hold no per-call state; building them once is what makes decoding cheap.
_DECODER: Final = msgspec.json.Decoder(_WireClientEvent)


class _Envelope(msgspec.Struct):
    # Any: on the error path we want whatever the client sent, to name it in the error.
    type: Any = UNSET
    event_id: Any = None


_ENVELOPE: Final = msgspec.json.Decoder(_Envelope)

_TYPE_NAMES: Final = [f"'{t}'" for t in sorted(CLIENT_EVENT_TYPES)]
_SUPPORTED_TYPES: Final = ", ".join(_TYPE_NAMES[:-1]) + f", and {_TYPE_NAMES[-1]}"

# Malformed or oversize input cannot be parsed, but the client's event_id is usually near
# the start; finding it there lets even those errors point at the event that caused them.
_SNIFF_WINDOW: Final = 4096
# Strings (whole, or an opening quote with no end in sight) and brackets: enough to know how
# deep each key sits, so an "event_id" inside a nested object is not taken for the event's.
_TOKEN: Final = re.compile(rb'"(?:[^"\\]|\\.)*"|[{}\[\]"]', re.DOTALL)
_EVENT_ID_KEY: Final = b'"event_id"'
_EVENT_ID_VALUE: Final = re.compile(rb'\s*:\s*("(?:[^"\\\r\n]|\\.){0,256}")')


def _sniff_event_id(data: bytes | bytearray | memoryview | str) -> str | None:
    head = data[:_SNIFF_WINDOW]
    raw = head.encode("utf-8", "replace") if isinstance(head, str) else bytes(head)
    depth = 0
    for token in _TOKEN.finditer(raw):
        text = token.group()
        if text in (b"{", b"["):
            depth += 1
        elif text in (b"}", b"]"):
            depth -= 1
        elif text == b'"':
            return None  # a string running past the window: what follows is its content
        elif depth == 1 and text == _EVENT_ID_KEY:
            value = _EVENT_ID_VALUE.match(raw, token.end())
            if value is not None:
                try:
                    return msgspec.json.decode(value.group(1), type=str)
                except msgspec.DecodeError:
                    return None
    return None


def _not_utf8(data: bytes | bytearray | memoryview) -> str | None:
    """Why a binary message is not UTF-8 (None when it is).

    msgspec checks the strings it keeps, but skips unknown fields unread; without this, a
    message that is not UTF-8, and so not JSON (RFC 8259), would pass when only an ignored
    field was broken.
    """
    if isinstance(data, bytes) and data.isascii():
        return None
    try:
        str(data, "utf-8")
    except UnicodeDecodeError as error:
        return f"not UTF-8 at byte {error.start}"
    return None


def _too_large(data: bytes | bytearray | memoryview | str, max_bytes: int) -> int | None:
    """The size in bytes if it is over the limit, else None, without copying when we can."""
    if isinstance(data, str):
        # A str is at most 4 UTF-8 bytes per character; isascii() is O(1) in CPython.
        if data.isascii() or len(data) > max_bytes:
            size = len(data)
        elif len(data) * 4 <= max_bytes:
            return None
        else:
            size = len(data.encode("utf-8", "surrogatepass"))
    else:
        size = memoryview(data).nbytes
    return size if size > max_bytes else None


def _invalid_event(
    data: bytes | bytearray | memoryview | str, exc: msgspec.ValidationError
) -> ProtocolError:
    try:
        env = _ENVELOPE.decode(data)
    except msgspec.ValidationError:
        return ProtocolError(code="invalid_value", message="A client event must be a JSON object.")
    except msgspec.DecodeError as bad:
        # The typed decoder stopped at a type error before reaching the malformed part.
        return ProtocolError(
            code="invalid_json", message=f"Invalid JSON: {bad}.", event_id=_sniff_event_id(data)
        )
    except RecursionError:
        # The envelope walks fields the typed decoder rejected early; keep that verdict.
        return from_validation_error(exc, _sniff_event_id(data))
    event_id = env.event_id if isinstance(env.event_id, str) else None
    if env.type is UNSET or env.type is None:
        return ProtocolError(
            code="missing_required_parameter",
            message="Missing required parameter: 'type'.",
            param="type",
            event_id=event_id,
        )
    if not isinstance(env.type, str) or env.type not in CLIENT_EVENT_TYPES:
        # OpenAI's answer, word for word up to the list (which is ours).
        shown = f"'{env.type[:64]}'" if isinstance(env.type, str) else repr(env.type)[:64]
        return ProtocolError(
            code="invalid_value",
            message=f"Invalid value: {shown}. Supported values are: {_SUPPORTED_TYPES}.",
            param="type",
            event_id=event_id,
        )
    return from_validation_error(exc, event_id)


def _decode(
    data: bytes | bytearray | memoryview | str, max_bytes: int, input_audio_format: AudioFormat
) -> ClientEvent | LinkEvent | ProtocolError:
    size = _too_large(data, max_bytes)
    if size is not None:
        return ProtocolError(
            code="message_too_large",
            message=f"Message of {size} bytes exceeds the limit of {max_bytes} bytes.",
            event_id=_sniff_event_id(data),
        )
    # Text frames arrive as str, valid UTF-8 by construction; binary ones need checking.
    broken = None if isinstance(data, str) else _not_utf8(data)
    if broken is not None:
        return ProtocolError(
            code="invalid_json", message=f"Invalid JSON: {broken}.", event_id=_sniff_event_id(data)
        )
    try:
        wire = _DECODER.decode(data)
    except msgspec.ValidationError as exc:  # a subclass of DecodeError: must come first
        return _invalid_event(data, exc)
    except msgspec.DecodeError as exc:
        return ProtocolError(
            code="invalid_json",
            message=f"Invalid JSON: {exc}.",
            event_id=_sniff_event_id(data),
        )
    try:
        if isinstance(wire, InputAudioBufferAppend):
            check_pcm_length(wire.audio, input_audio_format, "audio")
            return wire
        if isinstance(wire, WireSessionUpdate):
            return normalize_session_update(wire)
        if isinstance(wire, WireConversationItemCreate):
            return normalize_item_create(wire, input_audio_format)
        if isinstance(wire, WireResponseCreate):
            return normalize_response_create(wire, input_audio_format)
        if isinstance(wire, WirePlaybackAck):
            return normalize_playback_ack(wire)
        return wire
    except InvalidInput as exc:
        return exc.to_error(wire.event_id)


def decode_client_event(
    data: bytes | bytearray | memoryview | str,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    input_audio_format: AudioFormat = PCM16,
) -> ClientEvent | LinkEvent | ProtocolError:
    """Parse one WebSocket message into a client event, or say precisely what is wrong.

    Never raises (docs/protocol.md rule 7). `input_audio_format` is the session's current input
    format; it decides whether an odd audio length is an error (pcm16) or fine (G.711).
    """
    try:
        return _decode(data, max_bytes, input_audio_format)
    except Exception as exc:
        # Only pathological input gets here (lone surrogates in a str, nesting deeper
        # than the interpreter allows); it is still the client's fault, not a crash.
        why = "nesting too deep" if isinstance(exc, RecursionError) else type(exc).__name__
        return ProtocolError(
            code="invalid_json",
            message=f"Could not parse the event ({why}).",
            event_id=_sniff_event_id(data),
        )


def error_event(err: ProtocolError) -> ErrorEvent:
    return ErrorEvent(
        error=ErrorInfo(
            type=err.type,
            code=err.code,
            message=err.message,
            param=err.param,
            event_id=err.event_id,
        )
    )


class ServerEventEncoder:
    """Encodes one session's server events; owns that session's event-id counter (`named`:
    a session taken over by another process goes on from where its snapshot left it)."""

    __slots__ = ("_count", "_encoder", "_prefix")

    def __init__(self, *, prefix: str = "event_", named: int = 0) -> None:
        self._encoder = msgspec.json.Encoder()
        self._prefix = prefix
        self._count = named

    @property
    def named(self) -> int:
        """How many event ids it has handed out."""
        return self._count

    def next_event_id(self) -> str:
        self._count += 1
        return f"{self._prefix}{self._count}"

    def encode(self, event: ServerEvent, seq: int | None = None) -> bytes:
        """JSON for the wire; an empty `event_id` is filled with the next session id, and
        `seq` (v2) becomes the event's `server_event_seq`."""
        if not event.event_id:
            if seq is None:
                event = msgspec.structs.replace(event, event_id=self.next_event_id())
            else:
                event = msgspec.structs.replace(
                    event, event_id=self.next_event_id(), server_event_seq=seq
                )
        elif seq is not None:
            event = msgspec.structs.replace(event, server_event_seq=seq)
        return self._encoder.encode(event)

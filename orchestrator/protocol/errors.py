"""Protocol errors: what a bad client event turns into (docs/protocol.md rule 7).

A `ProtocolError` is a value, not an exception: `decode_client_event` returns it so the
session loop answers with an `error` event and carries on, instead of unwinding.

Where OpenAI has a code for the case, the code and the opening of the message are OpenAI's:
clients match on them (docs/protocol.md, "Wire parity with OpenAI").
"""

from __future__ import annotations

import re
from typing import Final, Literal

import msgspec

__all__ = [
    "ErrorCode",
    "InvalidInput",
    "ItemAction",
    "ProtocolError",
    "UnknownItemCode",
    "duplicate_item",
    "from_validation_error",
    "unknown_item",
]

ErrorCode = Literal[
    "message_too_large",
    "invalid_json",
    "invalid_value",
    "missing_required_parameter",
    "invalid_base64",
    "invalid_image",
    "unsupported_audio_format",
    "unsupported_turn_detection",
    "invalid_audio_length",
    "invalid_function_parameters",
]


ItemAction = Literal["retrieve", "delete", "truncate", "create"]
UnknownItemCode = Literal[
    "item_retrieve_invalid_item_id",
    "item_delete_invalid_item_id",
    "item_truncate_invalid_item_id",
    "item_not_found",
]

# OpenAI's code and wording per client event; `create` is a `previous_item_id` that names no
# item, for which OpenAI's code is not known: ours, in OpenAI's words.
_UNKNOWN_ITEM: Final[dict[ItemAction, tuple[UnknownItemCode, str]]] = {
    "retrieve": ("item_retrieve_invalid_item_id", "Error retrieving item"),
    "delete": ("item_delete_invalid_item_id", "Error deleting item"),
    "truncate": ("item_truncate_invalid_item_id", "Error truncating item"),
    "create": ("item_not_found", "Error adding item"),
}


def unknown_item(action: ItemAction, item_id: str) -> tuple[UnknownItemCode, str]:
    """The code and message for an item id the conversation does not hold.

    Pipecat fails its `retrieve_conversation_item` on `item_retrieve_invalid_item_id` (any other
    code is fatal to it); clients ignore `item_truncate_invalid_item_id` and
    `item_delete_invalid_item_id` as the races they are."""
    code, doing = _UNKNOWN_ITEM[action]
    what = "the previous item" if action == "create" else "the item"
    return code, f"{doing}: {what} with id '{item_id}' does not exist."


def duplicate_item(item_id: str) -> tuple[Literal["item_create_duplicate_item_id"], str]:
    """OpenAI's answer to an item id already in use (LiveKit takes it as "already there")."""
    return (
        "item_create_duplicate_item_id",
        f"Error adding item: an item with id '{item_id}' already exists.",
    )


class ProtocolError(msgspec.Struct, frozen=True, kw_only=True):
    """A client event the server cannot act on; rendered as `error.error` on the wire."""

    code: str
    message: str
    param: str | None = None
    event_id: str | None = None
    type: str = "invalid_request_error"


class InvalidInput(Exception):
    """Raised by the normalizers, deep inside a parsed event, where the event_id is unknown.

    `decode_client_event` catches it and attaches the event_id; it never escapes the codec.
    """

    def __init__(self, code: ErrorCode, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.code: ErrorCode = code
        self.message = message
        self.param = param

    def to_error(self, event_id: str | None) -> ProtocolError:
        return ProtocolError(
            code=self.code, message=self.message, param=self.param, event_id=event_id
        )


# msgspec's messages are stable ("<what> - at `$.path`"); parsing them lets one decoder
# report both the precise field and the kind of problem without a second validation pass.
_AT: Final = re.compile(r"^(?P<what>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.DOTALL)
_MISSING: Final = re.compile(r"^Object missing required field `(?P<field>[^`]*)`$")


def _join(path: str, field: str | None) -> str | None:
    # "$.item.content[0]" arrives as ".item.content[0]"; the API reports "item.content[0]".
    path = path.removeprefix(".")
    if field is None:
        return path or None
    return f"{path}.{field}" if path else field


def from_validation_error(exc: msgspec.ValidationError, event_id: str | None) -> ProtocolError:
    """Map a msgspec validation failure to a code plus the JSON path as `param`."""
    match = _AT.match(str(exc))
    # _AT matches every string (both groups are optional); the guard is for mypy.
    what = match.group("what") if match else str(exc)
    path = (match.group("path") if match else None) or ""
    missing = _MISSING.match(what)
    if missing is not None:
        param = _join(path, missing.group("field"))
        return ProtocolError(
            code="missing_required_parameter",
            message=f"Missing required parameter: '{param}'.",
            param=param,
            event_id=event_id,
        )
    param = _join(path, None)
    where = f" at '{param}'" if param else ""
    if what.startswith("Invalid base64"):
        return ProtocolError(
            code="invalid_base64",
            message=f"Invalid base64 encoding{where}.",
            param=param,
            event_id=event_id,
        )
    return ProtocolError(
        code="invalid_value",
        message=f"Invalid value{where}: {what}.",
        param=param,
        event_id=event_id,
    )

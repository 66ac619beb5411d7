"""Conversation items and their content parts, shared by client and server events.

One type per item kind serves both directions: a client creates it without `id`/`status`,
the server fills them in and sends the same struct back, so no field can be lost in a
translation between two look-alike types. `Item` is every kind the server speaks: `message`,
and function calling's `function_call` and `function_call_output` (OpenAI GA's shapes).
"""

from __future__ import annotations

from typing import Literal

import msgspec
from msgspec import UNSET, UnsetType

__all__ = [
    "ContentPart",
    "FunctionCallItem",
    "FunctionCallOutputItem",
    "InputAudio",
    "InputImage",
    "InputText",
    "Item",
    "ItemStatus",
    "MessageItem",
    "OutputAudio",
    "OutputText",
    "Role",
]

Role = Literal["user", "assistant", "system"]
ItemStatus = Literal["completed", "incomplete", "in_progress"]


# omit_defaults on the text and image parts: OpenAI leaves their absent optional keys out (an
# image's `detail`).
class InputText(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    omit_defaults=True,
    tag_field="type",
    tag="input_text",
):
    text: str


# Audio parts render like OpenAI's: `transcript` always (null until there is one: the JS Agents
# SDK's item schema requires the key, and a ZodError there is uncaught in the app), `audio` never
# in the server's echo (UNSET: left out), though a client may send it.
class InputAudio(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="input_audio"):
    # Required on `conversation.item.create` (the codec checks); UNSET once stripped for the
    # server's echo of the item.
    audio: bytes | UnsetType | None = UNSET
    transcript: str | None = None


class InputImage(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    omit_defaults=True,
    tag_field="type",
    tag="input_image",
):
    image_url: str
    detail: Literal["auto", "low", "high"] | None = None


class OutputText(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    omit_defaults=True,
    tag_field="type",
    tag="output_text",
):
    text: str


class OutputAudio(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="output_audio"):
    audio: bytes | UnsetType | None = UNSET
    transcript: str | None = None


ContentPart = InputText | InputAudio | InputImage | OutputText | OutputAudio


class MessageItem(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="message"):
    """A `realtime.item` of type `message` (the only item type this server supports)."""

    id: str | None = None
    object: Literal["realtime.item"] = "realtime.item"
    status: ItemStatus | None = None
    role: Role
    content: tuple[ContentPart, ...] = ()

    def without_audio(self) -> MessageItem:
        """The item as the server echoes it: audio bytes dropped, transcripts kept."""
        if not any(
            isinstance(p, InputAudio | OutputAudio) and p.audio is not UNSET for p in self.content
        ):
            return self
        parts: list[ContentPart] = []
        for part in self.content:
            if isinstance(part, InputAudio | OutputAudio) and part.audio is not UNSET:
                part = msgspec.structs.replace(part, audio=UNSET)
            parts.append(part)
        return msgspec.structs.replace(self, content=tuple(parts))


class FunctionCallItem(
    msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="function_call"
):
    """A `realtime.item` of type `function_call`: a call the model made, or a client added.

    `call_id` is None only on a client's item that gave none (the core names it); `arguments`
    is the JSON text of the call's arguments ("" while a call streams)."""

    id: str | None = None
    object: Literal["realtime.item"] = "realtime.item"
    status: ItemStatus | None = None
    call_id: str | None = None
    name: str
    arguments: str


class FunctionCallOutputItem(
    msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="function_call_output"
):
    """A `realtime.item` of type `function_call_output`: the client's answer to a call."""

    id: str | None = None
    object: Literal["realtime.item"] = "realtime.item"
    status: ItemStatus | None = None
    call_id: str
    output: str


Item = MessageItem | FunctionCallItem | FunctionCallOutputItem

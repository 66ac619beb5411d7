"""Conversation history, reply slots and pruning (docs/protocol.md rule 6, `conversation.context`).

Guarantees:
- Items are addressed by id only: two items with equal content stay distinct, and add, delete,
  fill and prune act on ids, never on content.
- A reply slot opened by `open_reply` is an empty assistant item (the empty boundary) that keeps
  its position; `fill_reply` replaces its content in place even after newer turns were added.
- A turn is a run of consecutive user/system messages (its input) plus the reply items after
  it: assistant messages, function calls and function call outputs (`tool` items), so a call
  and the client's answer to it belong to the turn they answer and are pruned with it.
  Leading reply items form a turn of their own. An empty boundary keeps two user turns apart.
- A function call is an assistant item whose one part is a `FunctionCall`; a model's call is
  held in a reply slot (`open_reply`) that `fill_reply` fills only once the call is complete,
  so a call cut short stays the empty boundary and never reaches a prompt.
- Pruning evicts whole turns, oldest first, while a limit (`HistoryLimits`) is exceeded, and
  stops as soon as all limits hold. The current user input (the last turn holding a user item)
  and everything after it is never evicted, so it is always present and always last.
- `prompt_view` is pure; `prune` applies the same eviction to the stored items, so afterwards
  `prompt_view().items == items`. Both are O(number of items).
- The context payload never carries audio bytes, only their length.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from orchestrator.protocol.session_config import PCM16, AudioFormat

# `tool`: a function call output (the client's answer to a call).
Role = Literal["user", "assistant", "system", "tool"]

# Reserved by the protocol: `previous_item_id: "root"` means "insert first".
ROOT = "root"


@dataclass(frozen=True, slots=True)
class HistoryLimits:
    max_audio_inputs: int = 4  # turns holding user audio, the current one included
    max_history_bytes: int = 8 * 1024 * 1024
    max_images: int = 8

    def __post_init__(self) -> None:
        # A limit below 1 would make every prompt "over limit" and evict all but the current turn
        # silently; reject it where it is configured instead.
        if self.max_audio_inputs < 1 or self.max_history_bytes < 1 or self.max_images < 0:
            raise ValueError(f"invalid history limits: {self!r}")


@dataclass(frozen=True, slots=True)
class InputText:
    text: str

    @property
    def size_bytes(self) -> int:
        return len(self.text.encode())


@dataclass(frozen=True, slots=True)
class InputAudio:
    """User audio in the format it arrived in (`format`): a session may switch formats between
    turns, and each turn must still be decoded as what it was recorded in."""

    audio: bytes = field(repr=False)  # can be megabytes; keep logs and test failures readable
    transcript: str | None = None
    format: AudioFormat = PCM16

    @property
    def size_bytes(self) -> int:
        return len(self.audio)


@dataclass(frozen=True, slots=True)
class InputImage:
    image_url: str = field(repr=False)  # data URLs are large

    @property
    def size_bytes(self) -> int:
        return len(self.image_url)


@dataclass(frozen=True, slots=True)
class OutputText:
    text: str

    @property
    def size_bytes(self) -> int:
        return len(self.text.encode())


@dataclass(frozen=True, slots=True)
class OutputAudio:
    """Assistant audio as heard: transcript and duration only, so history stays small."""

    transcript: str | None
    audio_ms: int

    @property
    def size_bytes(self) -> int:
        return len(self.transcript.encode()) if self.transcript else 0


@dataclass(frozen=True, slots=True)
class FunctionCall:
    """A complete function call: the model's (heard once complete) or a client's."""

    call_id: str
    name: str
    arguments: str  # JSON text, as the model produced it

    @property
    def size_bytes(self) -> int:
        return len(self.name.encode()) + len(self.arguments.encode())


@dataclass(frozen=True, slots=True)
class FunctionCallOutput:
    """The client's answer to a call (`function_call_output`)."""

    call_id: str
    output: str

    @property
    def size_bytes(self) -> int:
        return len(self.output.encode())


Content = (
    InputText
    | InputAudio
    | InputImage
    | OutputText
    | OutputAudio
    | FunctionCall
    | FunctionCallOutput
)


@dataclass(frozen=True, slots=True)
class Item:
    id: str
    role: Role
    content: tuple[Content, ...]
    response_id: str | None = None  # set for assistant replies produced by a response

    @property
    def size_bytes(self) -> int:
        return sum(part.size_bytes for part in self.content)

    @property
    def is_empty_boundary(self) -> bool:
        return self.role == "assistant" and not self.content

    @property
    def opens_turn(self) -> bool:
        """A user or system message: the input a turn starts with."""
        return self.role in ("user", "system")

    @property
    def call(self) -> FunctionCall | None:
        """The function call this item is, if it is one."""
        part = self.content[0] if len(self.content) == 1 else None
        return part if isinstance(part, FunctionCall) else None

    @property
    def call_output(self) -> FunctionCallOutput | None:
        """The function call output this item is, if it is one."""
        part = self.content[0] if len(self.content) == 1 else None
        return part if isinstance(part, FunctionCallOutput) else None


@dataclass(frozen=True, slots=True)
class Turn:
    items: tuple[Item, ...]

    @property
    def has_user_input(self) -> bool:
        return any(item.role == "user" for item in self.items)

    @property
    def has_audio_input(self) -> bool:
        return any(
            isinstance(part, InputAudio)
            for item in self.items
            if item.role != "assistant"
            for part in item.content
        )

    @property
    def images(self) -> int:
        return sum(isinstance(p, InputImage) for item in self.items for p in item.content)

    @property
    def size_bytes(self) -> int:
        return sum(item.size_bytes for item in self.items)


@dataclass(frozen=True, slots=True)
class ContextView:
    items: tuple[Item, ...]
    audio_inputs: int  # turns holding user audio, as counted against `max_audio_inputs`
    images: int
    bytes: int


class ItemNotFound(KeyError):
    def __init__(self, item_id: str) -> None:
        super().__init__(item_id)
        self.item_id = item_id


class DuplicateItemId(ValueError):
    def __init__(self, item_id: str) -> None:
        super().__init__(item_id)
        self.item_id = item_id


def split_turns(items: tuple[Item, ...]) -> tuple[Turn, ...]:
    turns: list[Turn] = []
    current: list[Item] = []
    for item in items:
        # An input item after a reply item starts the next turn; this is why an empty
        # boundary keeps two user turns from merging.
        if current and item.opens_turn and not current[-1].opens_turn:
            turns.append(Turn(tuple(current)))
            current = []
        current.append(item)
    if current:
        turns.append(Turn(tuple(current)))
    return tuple(turns)


def retained(limits: HistoryLimits, ratio: float) -> HistoryLimits:
    """The limits a cut aims at under a retention ratio (OpenAI's `truncation`): that fraction
    of each, keeping at least the current turn's audio and one byte."""
    return HistoryLimits(
        max_audio_inputs=max(1, int(limits.max_audio_inputs * ratio)),
        max_history_bytes=max(1, int(limits.max_history_bytes * ratio)),
        max_images=int(limits.max_images * ratio),
    )


def _plan(
    turns: tuple[Turn, ...], limits: HistoryLimits, retention: float | None = None
) -> tuple[int, ContextView]:
    """How many leading turns to evict, and the view that remains. With a `retention` ratio,
    a history over its limits is cut down to that fraction of them (`retained`)."""
    audio = [t.has_audio_input for t in turns]
    images = [t.images for t in turns]
    sizes = [t.size_bytes for t in turns]
    total_audio, total_images, total_bytes = sum(audio), sum(images), sum(sizes)
    if retention is not None and (
        total_audio > limits.max_audio_inputs
        or total_images > limits.max_images
        or total_bytes > limits.max_history_bytes
    ):
        limits = retained(limits, retention)

    protected = len(turns) - 1  # with no user input at all, keep at least the newest turn
    for index in range(len(turns) - 1, -1, -1):
        if turns[index].has_user_input:
            protected = index
            break

    evicted = 0
    while evicted < protected and (
        total_audio > limits.max_audio_inputs
        or total_images > limits.max_images
        or total_bytes > limits.max_history_bytes
    ):
        total_audio -= audio[evicted]
        total_images -= images[evicted]
        total_bytes -= sizes[evicted]
        evicted += 1

    kept = tuple(item for turn in turns[evicted:] for item in turn.items)
    return evicted, ContextView(kept, total_audio, total_images, total_bytes)


class Conversation:
    def __init__(self, limits: HistoryLimits | None = None) -> None:
        self.limits = limits if limits is not None else HistoryLimits()
        # The session's `truncation` retention ratio (None: "auto", rule 6 as is).
        self.retention: float | None = None
        self._items: dict[str, Item] = {}
        self._order: list[str] = []

    def __contains__(self, item_id: object) -> bool:
        return item_id in self._items

    def __len__(self) -> int:
        return len(self._order)

    @property
    def items(self) -> tuple[Item, ...]:
        return tuple(self._items[item_id] for item_id in self._order)

    def get(self, item_id: str) -> Item:
        try:
            return self._items[item_id]
        except KeyError:
            raise ItemNotFound(item_id) from None

    def add(self, item: Item, previous_item_id: str | None = None) -> Item:
        if item.id == ROOT or not item.id:
            raise ValueError(f"reserved or empty item id: {item.id!r}")
        if item.id in self._items:
            raise DuplicateItemId(item.id)
        if previous_item_id is None:
            position = len(self._order)
        elif previous_item_id == ROOT:
            position = 0
        elif previous_item_id in self._items:
            position = self._order.index(previous_item_id) + 1
        else:
            raise ItemNotFound(previous_item_id)
        self._items[item.id] = item
        self._order.insert(position, item.id)
        return item

    def delete(self, item_id: str) -> Item:
        item = self.get(item_id)
        del self._items[item_id]
        self._order.remove(item_id)
        return item

    def open_reply(self, item_id: str, response_id: str) -> Item:
        return self.add(Item(item_id, "assistant", (), response_id=response_id))

    def fill_reply(self, item_id: str, content: tuple[Content, ...]) -> Item:
        old = self.get(item_id)
        if old.role != "assistant":
            raise ValueError(f"item {item_id!r} is not an assistant reply")
        new = Item(old.id, old.role, tuple(content), old.response_id)
        # Replacing the dict value keeps the slot's position: `_order` is untouched.
        self._items[item_id] = new
        return new

    def set_transcript(self, item_id: str, transcript: str) -> Item | None:
        """Attach a transcript to a user item's audio that has none; None if it is gone.

        In place, like `fill_reply`: transcription finishes after the item was committed, and
        the item keeps its position and id.
        """
        if item_id not in self._items:
            return None
        old = self._items[item_id]
        content = tuple(
            InputAudio(part.audio, transcript, part.format)
            if isinstance(part, InputAudio) and part.transcript is None
            else part
            for part in old.content
        )
        new = Item(old.id, old.role, content, old.response_id)
        self._items[item_id] = new
        return new

    def turns(self) -> tuple[Turn, ...]:
        return split_turns(self.items)

    def prompt_view(self) -> ContextView:
        return _plan(self.turns(), self.limits, self.retention)[1]

    def prune(self) -> tuple[str, ...]:
        turns = self.turns()
        evicted, _ = _plan(turns, self.limits, self.retention)
        count = sum(len(turn.items) for turn in turns[:evicted])
        removed = tuple(self._order[:count])
        del self._order[:count]
        for item_id in removed:
            del self._items[item_id]
        return removed


def content_json(part: Content) -> dict[str, Any]:
    if isinstance(part, InputText):
        return {"type": "input_text", "text": part.text}
    if isinstance(part, InputAudio):
        return {
            "type": "input_audio",
            "transcript": part.transcript,
            "audio_bytes": len(part.audio),
        }
    if isinstance(part, InputImage):
        return {"type": "input_image", "image_url": part.image_url}
    if isinstance(part, OutputText):
        return {"type": "output_text", "text": part.text}
    if isinstance(part, OutputAudio):
        return {"type": "output_audio", "transcript": part.transcript, "audio_ms": part.audio_ms}
    if isinstance(part, FunctionCall):
        return {"call_id": part.call_id, "name": part.name, "arguments": part.arguments}
    return {"call_id": part.call_id, "output": part.output}


def item_json(item: Item) -> dict[str, Any]:
    if item.call is not None:
        return {"id": item.id, "type": "function_call", **content_json(item.call)}
    if item.call_output is not None:
        return {"id": item.id, "type": "function_call_output", **content_json(item.call_output)}
    return {
        "id": item.id,
        "type": "message",
        "role": item.role,
        "content": [content_json(part) for part in item.content],
    }


def context_json(view: ContextView) -> dict[str, Any]:
    """The payload of the `conversation.context` server event (without type/event_id)."""
    return {
        "items": [item_json(item) for item in view.items],
        "audio_inputs": view.audio_inputs,
        "images": view.images,
        "bytes": view.bytes,
    }

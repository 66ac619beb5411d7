"""SessionSnapshot: what a session needs to go on in another process (issue 36).

A snapshot is written at turn boundaries to the session store (orchestrator/service/store/);
a worker that does not hold a session reads it to take the session over. Rules:
1. What is kept: the settings as the session holds them, the conversation as the model sees
   it (`Conversation.items`, after pruning), the id counter (new ids never repeat old ones),
   the sequence position and the events the client has not acknowledged (the journal), the
   identity that opened the session and the SHA-256 of its resume token. Never the token
   itself (link.py rule 4): a store that leaks gives no one a session.
2. User audio is never stored: an audio part is kept as its transcript, and comes back as an
   `input_text` part; one without a transcript comes back as nothing (its item keeps its
   place, so the turn stays a turn). So a session taken over remembers what was said, not
   how it sounded (docs/protocol.md "Session takeover").
3. Images are kept, newest first, while `max_image_bytes` lasts; an older one past it is
   dropped from its item (the model sees the rest of that turn).
4. Bounded: `encode` refuses a snapshot over `max_bytes` (`SnapshotTooLarge`); the store
   keeps the previous one. The conversation is bounded by its pruning limits
   (conversation.py); the journal kept is its newest events within `max_journal_bytes`
   (`journal_to_snapshot`), contiguous, so that a session whose client never acknowledges
   (its journal full: 8 MiB by default) still fits: a takeover's resume from before them
   fails as `not_journaled`, as a resume after the journal's own eviction does.
5. Versioned twice: `format` is this layout's number (a reader refuses one it does not know,
   `SnapshotUnreadable`, as it refuses bytes that do not decode), and `version` is the
   session's own count of snapshots, which the store uses to refuse an older write after a
   newer one (orchestrator/service/store/).
6. Event ids: a snapshot keeps how many the session has handed out (`events_named`), and a
   session taken over goes on after them (`events_named()`), so its client never sees an
   `event_id` twice: after a drain's last snapshot exactly; after a lost worker, past the
   events its client saw since the snapshot.

Pure: no clocks, no I/O; msgspec encodes and checks every field on the way back.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from typing import Final

import msgspec

from orchestrator.protocol.session_config import SessionConfig
from orchestrator.session.core_types import CoreState
from orchestrator.session.history import conversation as conv
from orchestrator.session.resume.journal import JournalEntry

__all__ = [
    "FORMAT",
    "SessionSnapshot",
    "SnapshotItem",
    "SnapshotTooLarge",
    "SnapshotUnreadable",
    "core_state",
    "decode",
    "encode",
    "items_from_snapshot",
    "items_to_snapshot",
    "journal_to_snapshot",
    "take",
    "token_digest",
    "token_matches",
]

FORMAT: Final = 1


class SnapshotTooLarge(ValueError):
    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"a snapshot of {size} bytes is over the {limit}-byte limit")
        self.size = size
        self.limit = limit


class SnapshotUnreadable(ValueError):
    """Bytes that are no snapshot this server can read (corrupt, or another format)."""


# Parts, tagged so a union of them decodes (one class per `conv` content type).
class _Part(msgspec.Struct, frozen=True, tag_field="type"):
    pass


class TextIn(_Part, frozen=True, tag="input_text"):
    text: str


class ImageIn(_Part, frozen=True, tag="input_image"):
    image_url: str


class TextOut(_Part, frozen=True, tag="output_text"):
    text: str


class AudioOut(_Part, frozen=True, tag="output_audio"):
    transcript: str | None
    audio_ms: int


class Call(_Part, frozen=True, tag="function_call"):
    call_id: str
    name: str
    arguments: str


class CallOutput(_Part, frozen=True, tag="function_call_output"):
    call_id: str
    output: str


Part = TextIn | ImageIn | TextOut | AudioOut | Call | CallOutput


class SnapshotItem(msgspec.Struct, frozen=True):
    id: str
    role: conv.Role
    content: tuple[Part, ...]
    response_id: str | None = None


class JournaledEvent(msgspec.Struct, frozen=True, array_like=True):
    seq: int
    text: str


class SessionSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    format: int = FORMAT
    session_id: str
    version: int
    identity: str
    token_sha256: str
    settings: SessionConfig
    items: tuple[SnapshotItem, ...]
    next_id: int  # the id counter (core_outbox.py `Ids`)
    last_seq: int  # the last server_event_seq sent
    journal: tuple[JournaledEvent, ...] = ()  # events after the client's ack, in order
    # Responses generating or playing when the snapshot was taken: the session that takes it
    # over ends them (their worker is gone) and tells the client.
    live: tuple[str, ...] = ()
    # Event ids handed out (ServerEventEncoder's count, rule 6); 0 in a snapshot written
    # before it was kept.
    events_named: int = 0


def journal_to_snapshot(
    entries: Sequence[JournalEntry], max_journal_bytes: int
) -> tuple[JournaledEvent, ...]:
    """Rule 4: the newest events within `max_journal_bytes` (their text's length), in order."""
    kept: list[JournaledEvent] = []
    size = 0
    for entry in reversed(entries):
        size += len(entry.text)
        if size > max_journal_bytes:
            break
        kept.append(JournaledEvent(entry.seq, entry.text))
    return tuple(reversed(kept))


def take(
    state: CoreState,
    *,
    session_id: str,
    version: int,
    identity: str,
    token: str,
    last_seq: int,
    journal: Sequence[JournalEntry],
    max_image_bytes: int,
    max_journal_bytes: int,
    events_named: int = 0,
) -> SessionSnapshot:
    """A snapshot of a core's `state` and its link's parts (rules 1-4)."""
    return SessionSnapshot(
        session_id=session_id,
        version=version,
        identity=identity,
        token_sha256=token_digest(token),
        settings=state.settings,
        items=items_to_snapshot(state.items, max_image_bytes),
        next_id=state.next_id,
        last_seq=last_seq,
        journal=journal_to_snapshot(journal, max_journal_bytes),
        live=state.live,
        events_named=events_named,
    )


def events_named(snapshot: SessionSnapshot, client_seq: int) -> int:
    """Rule 6: where a session taken over goes on naming its events. Every event sent after
    the snapshot was sequenced (a resume there, the one other kind, writes a snapshot), so the
    ones its client saw past the snapshot (`client_seq`, its last) took one id each; ids of
    events it never saw may be given again, to events it will see."""
    return snapshot.events_named + max(0, client_seq - snapshot.last_seq)


def core_state(snapshot: SessionSnapshot) -> CoreState:
    """What a core goes on from (`SessionCore.restore`): rule 2's audio comes back as text."""
    return CoreState(
        snapshot.settings, items_from_snapshot(snapshot.items), snapshot.next_id, snapshot.live
    )


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def token_matches(snapshot: SessionSnapshot, token: str) -> bool:
    """Rule 1: the token a resume presents against the digest kept, in constant time."""
    return hmac.compare_digest(token_digest(token).encode(), snapshot.token_sha256.encode())


def items_to_snapshot(
    items: tuple[conv.Item, ...], max_image_bytes: int
) -> tuple[SnapshotItem, ...]:
    """Rules 2 and 3."""
    budget = max_image_bytes
    kept: list[SnapshotItem] = []
    for item in reversed(items):  # newest first: the images kept are the latest ones
        parts: list[Part] = []
        for part in reversed(item.content):
            if isinstance(part, conv.InputImage):
                if part.size_bytes > budget:
                    continue
                budget -= part.size_bytes
            converted = _part(part)
            if converted is not None:
                parts.append(converted)
        kept.append(SnapshotItem(item.id, item.role, tuple(reversed(parts)), item.response_id))
    return tuple(reversed(kept))


def _part(part: conv.Content) -> Part | None:
    if isinstance(part, conv.InputText):
        return TextIn(part.text)
    if isinstance(part, conv.InputAudio):
        return TextIn(part.transcript) if part.transcript else None  # rule 2
    if isinstance(part, conv.InputImage):
        return ImageIn(part.image_url)
    if isinstance(part, conv.OutputText):
        return TextOut(part.text)
    if isinstance(part, conv.OutputAudio):
        return AudioOut(part.transcript, part.audio_ms)
    if isinstance(part, conv.FunctionCall):
        return Call(part.call_id, part.name, part.arguments)
    return CallOutput(part.call_id, part.output)


def items_from_snapshot(items: tuple[SnapshotItem, ...]) -> tuple[conv.Item, ...]:
    return tuple(
        conv.Item(item.id, item.role, tuple(_content(p) for p in item.content), item.response_id)
        for item in items
    )


def _content(part: Part) -> conv.Content:
    if isinstance(part, TextIn):
        return conv.InputText(part.text)
    if isinstance(part, ImageIn):
        return conv.InputImage(part.image_url)
    if isinstance(part, TextOut):
        return conv.OutputText(part.text)
    if isinstance(part, AudioOut):
        return conv.OutputAudio(part.transcript, part.audio_ms)
    if isinstance(part, Call):
        return conv.FunctionCall(part.call_id, part.name, part.arguments)
    return conv.FunctionCallOutput(part.call_id, part.output)


def encode(snapshot: SessionSnapshot, max_bytes: int) -> bytes:
    """Rule 4."""
    data = msgspec.json.encode(snapshot)
    if len(data) > max_bytes:
        raise SnapshotTooLarge(len(data), max_bytes)
    return data


def decode(data: bytes) -> SessionSnapshot:
    """Rule 5: a snapshot of this format, every field checked, or `SnapshotUnreadable`."""
    try:
        snapshot = msgspec.json.decode(data, type=SessionSnapshot)
    except (msgspec.DecodeError, msgspec.ValidationError) as error:
        raise SnapshotUnreadable(f"not a session snapshot: {error}") from error
    if snapshot.format != FORMAT:
        raise SnapshotUnreadable(f"snapshot format {snapshot.format}; this server reads {FORMAT}")
    return snapshot

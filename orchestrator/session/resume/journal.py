"""EventJournal: a session's recent server events, kept for replay after a lost connection.

Rules (docs/protocol.md "Session resume"):
1. Every sequenced server event is appended, encoded, in `server_event_seq` order (1, 2, ...,
   no gap): the journal holds a contiguous run of them, the newest last.
2. Bounded in bytes (`max_bytes`, the text's length): an append evicts the oldest events until
   the new one fits. One event always fits, however large, so it is kept alone.
3. Events after `protect_after` must not be evicted: while a session has no connection, those
   are the events its client never got. An append that would need one of them is refused
   (`overflowed`), and the session ends, as the contract says of a journal that overflows.
4. `ack(seq)` (the client's `session.event_ack`) drops every event up to `seq`: the client
   has them, and a resume from before that point is no longer possible.
5. `after(seq)` is exactly the events with a larger seq, in order, or None when some of them
   are no longer journaled (evicted or acked), or when `seq` is beyond the last event: a
   replay never skips an event and never invents one.

Pure: no clocks, no I/O.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import islice


@dataclass(frozen=True, slots=True)
class JournalEntry:
    seq: int
    text: str


class EventJournal:
    def __init__(self, max_bytes: int) -> None:
        if max_bytes <= 0:
            raise ValueError(f"max_bytes must be > 0, got {max_bytes}")
        self.max_bytes = max_bytes
        self._entries: deque[JournalEntry] = deque()
        self.bytes = 0
        # The seq of the newest event ever appended (0: none), kept when everything is evicted.
        self.last_seq = 0
        self.overflowed = False

    @classmethod
    def restored(
        cls, max_bytes: int, entries: Sequence[JournalEntry], last_seq: int
    ) -> EventJournal:
        """Another process's journal (a snapshot's copy, `held()`): its events, contiguous,
        ending at `last_seq` (none: nothing is held after it)."""
        journal = cls(max_bytes)
        journal.last_seq = entries[0].seq - 1 if entries else last_seq
        for entry in entries:
            journal.append(entry.seq, entry.text)
        if journal.last_seq != last_seq:
            raise ValueError(f"a journal ending at {journal.last_seq}, not at {last_seq}")
        return journal

    def skip_to(self, seq: int) -> None:
        """Events up to `seq` were sent, but not journaled here (a takeover whose client saw
        more than the snapshot held): nothing up to it can be replayed, and the next event
        is `seq + 1`."""
        self.ack(seq)
        self.last_seq = max(self.last_seq, seq)

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def first_seq(self) -> int:
        """The oldest seq still held; `last_seq + 1` when the journal is empty."""
        return self._entries[0].seq if self._entries else self.last_seq + 1

    def append(self, seq: int, text: str, *, protect_after: int | None = None) -> bool:
        """Journals event `seq` (rule 1); False, appending nothing, if room for it would need
        an event after `protect_after` (rule 3)."""
        if seq != self.last_seq + 1:
            raise ValueError(f"event {seq} does not follow {self.last_seq}")
        size = len(text)
        if protect_after is not None and not self._room_without(size, protect_after):
            self.overflowed = True
            return False
        while self._entries and self.bytes + size > self.max_bytes:
            self.bytes -= len(self._entries.popleft().text)
        self._entries.append(JournalEntry(seq, text))
        self.bytes += size
        self.last_seq = seq
        return True

    def _room_without(self, size: int, protect_after: int) -> bool:
        """Whether evicting only events up to `protect_after` makes room for `size`."""
        freed = 0
        for entry in self._entries:
            if self.bytes - freed + size <= self.max_bytes:
                return True
            if entry.seq > protect_after:
                return False
            freed += len(entry.text)
        return True  # everything may go: one event always fits

    def ack(self, seq: int) -> None:
        """Drops every event up to `seq` (rule 4); a seq beyond the last drops them all."""
        while self._entries and self._entries[0].seq <= seq:
            self.bytes -= len(self._entries.popleft().text)

    def covers(self, seq: int) -> bool:
        """Whether `after(seq)` can replay everything after `seq` (rule 5)."""
        return seq <= self.last_seq and seq + 1 >= self.first_seq

    def held(self) -> tuple[JournalEntry, ...]:
        """Every event still journaled, in order (a snapshot's copy: snapshot.py)."""
        return tuple(self._entries)

    def after(self, seq: int) -> list[JournalEntry] | None:
        if not self.covers(seq):
            return None
        return list(islice(self._entries, seq + 1 - self.first_seq, None))

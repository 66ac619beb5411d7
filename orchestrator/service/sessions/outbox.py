"""A connection's outbox: encoded server events on their way to its socket, bounded.

Rules:
- `put` is bounded in messages and in bytes (one message always fits): all that a client that
  stops reading can hold of the server's memory. It waits at most `timeout_s` for room and
  says whether the event was queued; the caller decides what a full outbox means (the session
  actor ends the session: 1008).
- `put_replay` queues a resume's replay at once, past the bounds: its texts are the journal's
  own (their memory is counted there, orchestrator/session/resume/journal.py), and later `put`s wait
  until the replay has drained below the bounds, which holds the session back, not the client.
- Each item carries its `server_event_seq` (0: an event about the connection), so the socket
  side can tell the session's link what the client was sent.
- After `close()` the reader still gets what is queued (`discard=True` drops it first), then
  the end; a `put` to a closed outbox drops its event at once and says queued: that event is
  journaled, and the connection it was for is gone or replaced.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

import trio

Item = tuple[int, str]


class Outbox:
    def __init__(self, max_messages: int, max_bytes: int) -> None:
        self._items: deque[Item] = deque()
        self._max_messages = max_messages
        self._max_bytes = max_bytes
        self.bytes = 0
        self.closed = False
        # Replaced each time it is set: the reader waits on `_queued`, writers on `_taken`.
        self._queued = trio.Event()
        self._taken = trio.Event()

    @property
    def messages(self) -> int:
        return len(self._items)

    def _fits(self, size: int) -> bool:
        if not self._items:
            return True
        return len(self._items) < self._max_messages and self.bytes + size <= self._max_bytes

    def _append(self, item: Item) -> None:
        self._items.append(item)
        self.bytes += len(item[1])
        self._queued.set()

    async def put(self, text: str, timeout_s: float, seq: int = 0) -> bool:
        """Queues `text`; False if there was no room for it within `timeout_s`."""
        size = len(text)
        if self.closed or self._fits(size):
            # The common case, without a cancel scope per event.
            if not self.closed:
                self._append((seq, text))
            return True
        with trio.move_on_after(timeout_s):
            while not self.closed and not self._fits(size):
                await self._taken.wait()
            if not self.closed:
                self._append((seq, text))
            return True
        return False

    def put_replay(self, items: Iterable[Item]) -> None:
        if not self.closed:
            for item in items:
                self._append(item)

    def close(self, *, discard: bool = False, last: Item | None = None) -> None:
        """No more events; `last` (a farewell) is queued after what is kept."""
        if self.closed:
            return
        if discard:
            self._items.clear()
            self.bytes = 0
        if last is not None:
            self._append(last)
        self.closed = True
        self._queued.set()
        self._taken.set()

    def __aiter__(self) -> Outbox:
        return self

    async def __anext__(self) -> Item:
        while not self._items:
            if self.closed:
                raise StopAsyncIteration
            await self._queued.wait()
            self._queued = trio.Event()
        item = self._items.popleft()
        self.bytes -= len(item[1])
        self._taken.set()
        self._taken = trio.Event()
        return item

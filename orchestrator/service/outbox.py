"""The session's outbox: encoded server events on their way to the socket, bounded.

Rules:
- Bounded in messages and in bytes (one message always fits): all that a client that stops
  reading can hold of the server's memory.
- `put` waits at most `timeout_s` for room and says whether the event was queued; the caller
  decides what a full outbox means (the session actor ends the session: 1008).
"""

from __future__ import annotations

import trio


class Outbox:
    """Encoded server events on their way to the socket, bounded in messages and in bytes
    (one message always fits): all that a client that stops reading can hold of the server's
    memory. Bytes count too because messages differ by orders of magnitude: a retrieve of a
    large item answers with the whole item."""

    def __init__(self, max_messages: int, max_bytes: int) -> None:
        self._send, self._recv = trio.open_memory_channel[str](max_messages)
        self._max_bytes = max_bytes
        self.bytes = 0
        # Set (and replaced) each time the reader takes a message.
        self._taken = trio.Event()

    @property
    def messages(self) -> int:
        return self._send.statistics().current_buffer_used

    def _fits(self, size: int) -> bool:
        return self.bytes == 0 or self.bytes + size <= self._max_bytes

    async def put(self, text: str, timeout_s: float) -> bool:
        """Queues `text`; False if there was no room for it within `timeout_s`."""
        size = len(text)
        if self._fits(size):
            try:
                # The common case, without a cancel scope per event.
                self._send.send_nowait(text)
            except trio.WouldBlock:
                pass
            else:
                self.bytes += size
                return True
        with trio.move_on_after(timeout_s):
            while not self._fits(size):
                await self._taken.wait()
            # Counted before the send: the reader may take it before this task runs again.
            self.bytes += size
            try:
                await self._send.send(text)
            except BaseException:
                self.bytes -= size  # not sent (trio's guarantee on a cancelled send)
                raise
            return True
        return False

    def close(self) -> None:
        self._send.close()

    def __aiter__(self) -> Outbox:
        return self

    async def __anext__(self) -> str:
        try:
            text = await self._recv.receive()
        except trio.EndOfChannel:
            raise StopAsyncIteration from None
        self.bytes -= len(text)
        self._taken.set()
        self._taken = trio.Event()
        return text

"""Response fencing (rule 2) in constant memory.

Every response of a session gets the next number of one counter when it is created. Backend
output is tagged with that number by the task that reads the backend stream. Only output
tagged with the number of the one response that is currently open is admitted; closing a
response (completed, interrupted, cancelled, failed) shuts the fence behind it. Any number
below the open one is older, so nothing needs to remember which responses were interrupted:
the fence is two integers for the whole life of a session, however many interruptions.
"""

from __future__ import annotations


class ResponseFence:
    __slots__ = ("_next", "_open")

    def __init__(self) -> None:
        self._next = 0
        self._open: int | None = None

    def issue(self) -> int:
        """Number a new response and open the fence for it (closing any older one)."""
        seq = self._next
        self._next += 1
        self._open = seq
        return seq

    def close(self, seq: int) -> None:
        if self._open == seq:
            self._open = None

    def admits(self, seq: int) -> bool:
        return self._open is not None and seq == self._open

    @property
    def open_seq(self) -> int | None:
        return self._open

"""The cascade's transcript wait: a response hears user audio through the turns' transcripts.

Rules (pure; the core owns the clock, the timer tokens and what to do with a released start):
- Each committed turn is transcribed once; `asked` records the turns whose transcript is being
  made. Bounded: turns no longer in the conversation are dropped at every `asked`.
- `hold` keeps a response's `StartBackend` back while a transcript of one of its own turns is
  still being made, and says how long at most (`wait_ms`); with nothing to wait for it holds
  nothing and the backend starts at once.
- The held start is released exactly once: when the last awaited transcript is in
  (`answered`), when its wait runs out (`expired` with the hold's token), never after the
  response was cancelled (`drop`); at most one start is held (one response generates at once).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from orchestrator.session.actions import StartBackend
from orchestrator.session.history import conversation as conv


@dataclass(slots=True)
class _Held:
    start: StartBackend
    waiting: set[str]
    token: int


class TranscriptWait:
    __slots__ = ("_held", "_making", "wait_ms")

    def __init__(self, wait_ms: int) -> None:
        self.wait_ms = wait_ms
        self._making: set[str] = set()
        self._held: _Held | None = None

    def asked(self, item_id: str, alive: Callable[[str], bool]) -> None:
        self._making = {i for i in self._making if alive(i)}
        self._making.add(item_id)

    def hold(self, start: StartBackend, token: int) -> bool:
        """True when `start` is held (the caller arms a timer of `wait_ms` with `token`)."""
        waiting = {
            item.id
            for item in start.request.items
            if item.id in self._making and _untranscribed_audio(item)
        }
        if not waiting:
            return False
        self._held = _Held(start, waiting, token)
        return True

    def answered(self, item_id: str) -> StartBackend | None:
        """A transcript (or its failure) is in; the held start if nothing else is awaited."""
        self._making.discard(item_id)
        held = self._held
        if held is None or item_id not in held.waiting:
            return None
        held.waiting.discard(item_id)
        if held.waiting:
            return None
        self._held = None
        return held.start

    def expired(self, token: int) -> StartBackend | None:
        held = self._held
        if held is None or held.token != token:
            return None  # stale: released or dropped already
        self._held = None
        return held.start

    def drop(self, response_id: str) -> bool:
        """The response was cancelled before its backend started: True if it was held."""
        if self._held is None or self._held.start.response_id != response_id:
            return False
        self._held = None
        return True


def _untranscribed_audio(item: conv.Item) -> bool:
    return any(isinstance(p, conv.InputAudio) and p.transcript is None for p in item.content)

"""Semantic end of turn: a turn-completion model's answers -> the turn is over, or not yet.

`semantic_vad` (docs/protocol.md "Semantic end of turn and preemptive responses") ends the
user's turn at a pause when the `turn` model (Smart Turn v3.2) says the turn is complete, not
after a fixed silence. This module holds the rules; the caller owns the clock and the
detector (numbers in, decisions out), asks the model (`PredictTurn`) and feeds the answers.

Rules:
- At each candidate pause (the detector's `VadPaused`) the model is asked once (`ask` gives
  the request's token). An ask is current until speech resumes (`resumed`), the turn ends,
  or a newer ask: an answer to any other token is stale and decides nothing.
- A current answer whose completion probability is >= the eagerness's threshold ends the
  turn (cause `model`); below it, the turn waits: for speech to resume, or for the longest
  wait (the detector's own silence limit, `silence_duration_ms` of `SemanticVad`: cause
  `timeout`).
- Outage: an answer with an error (the model is down or timed out) starts an outage; while
  it lasts, the silence rule decides: the turn ends at `fallback_ms` (500, server_vad's
  default) of silence (cause `fallback`), and a pause already that long ends it at once. The
  first failure of an outage is told (`failed` returns True once); any good answer ends the
  outage. Pauses go on being asked during an outage, so a recovered model is noticed.
- Causes: `model`, `timeout`, `fallback`; server_vad's turns end by `silence`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

__all__ = ["FALLBACK_SILENCE_MS", "EndCause", "EndOfTurn", "Verdict"]

FALLBACK_SILENCE_MS: Final = 500  # server_vad's silence_duration_ms default

EndCause = Literal["model", "timeout", "fallback", "silence"]


@dataclass(frozen=True, slots=True)
class Verdict:
    """What an answer means: end the turn now (with its cause), or not."""

    end: bool
    cause: EndCause | None = None


_WAIT: Final = Verdict(False)


class EndOfTurn:
    __slots__ = ("_current", "_down", "_fallback_ms", "_tokens", "threshold")

    def __init__(self, threshold: float, fallback_ms: int = FALLBACK_SILENCE_MS) -> None:
        self.threshold = threshold
        self._fallback_ms = fallback_ms
        self._tokens = 0
        self._current: int | None = None
        self._down = False

    @property
    def down(self) -> bool:
        """The model is in an outage: the silence rule (`fallback_ms`) ends turns."""
        return self._down

    @property
    def fallback_ms(self) -> int:
        return self._fallback_ms

    @property
    def silence_limit_ms(self) -> int | None:
        """The silence that ends a turn whatever the model says, beyond the longest wait."""
        return self._fallback_ms if self._down else None

    def ask(self) -> int:
        """A candidate pause: the token of the model's request for it."""
        self._tokens += 1
        self._current = self._tokens
        return self._current

    def resumed(self) -> None:
        """Speech resumed, or the turn ended: the ask in flight is stale."""
        self._current = None

    def answered(self, token: int, probability: float) -> Verdict:
        current = token == self._current
        if current:
            self._current = None
        self._down = False  # any answer, current or stale, says the model is back
        # A NaN (a broken reply) fails the comparison: the turn waits.
        if current and probability >= self.threshold:
            return Verdict(True, "model")
        return _WAIT

    def failed(self, token: int) -> bool:
        """An ask failed; True when it starts an outage (the one to tell the client)."""
        if token == self._current:
            self._current = None
        first = not self._down
        self._down = True
        return first

    def cause_of_silence_stop(self) -> EndCause:
        """Why the detector's own silence rule ended a semantic turn."""
        return "fallback" if self._down else "timeout"

    def fallback_due(self, silence_ms: int) -> bool:
        """During an outage, a pause already `fallback_ms` long ends the turn at once."""
        return self._down and silence_ms >= self._fallback_ms

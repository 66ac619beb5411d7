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
- Words (when there is a transcriber: `ask(with_words=True)`): the turn so far is also
  transcribed (asr's fast partial decode), and the verdict waits for both answers. Words that
  go on (`continues`: a trailing ellipsis, comma or dash, or a last word that does not end an
  English sentence: an article, a preposition, a conjunction, a possessive, a filler) keep
  the turn open whatever the probability: the user stopped mid-phrase ("a table for..."). A
  transcript that failed or holds no words leaves the model alone to decide.
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

__all__ = ["CONTINUATIONS", "FALLBACK_SILENCE_MS", "EndCause", "EndOfTurn", "Verdict", "continues"]

FALLBACK_SILENCE_MS: Final = 500  # server_vad's silence_duration_ms default

EndCause = Literal["model", "timeout", "fallback", "silence"]


@dataclass(frozen=True, slots=True)
class Verdict:
    """What an answer means: end the turn now (with its cause), or not."""

    end: bool
    cause: EndCause | None = None


_WAIT: Final = Verdict(False)

# Last words after which an English sentence goes on (lower case).
CONTINUATIONS: Final = frozenset(
    "a an the my your our their his her its this these those "
    "for to of in on at with from by about into onto over under between through without "
    "and or but so because if than as "
    "um uh er erm".split()
)


def continues(transcript: str) -> bool:
    """Whether these words stop mid-phrase (see the rules above)."""
    text = transcript.strip()
    if text.endswith(("...", "…", ",", "-", "—")):
        return True
    words = [w.strip(".?!;:\"'()").lower() for w in text.split()]
    words = [w for w in words if w]
    return bool(words) and words[-1] in CONTINUATIONS


class EndOfTurn:
    __slots__ = (
        "_current",
        "_down",
        "_fallback_ms",
        "_probability",
        "_tokens",
        "_words",
        "_words_due",
        "threshold",
    )

    def __init__(self, threshold: float, fallback_ms: int = FALLBACK_SILENCE_MS) -> None:
        self.threshold = threshold
        self._fallback_ms = fallback_ms
        self._tokens = 0
        self._current: int | None = None
        self._down = False
        # The current ask's answers so far.
        self._probability: float | None = None
        self._words: str | None = None
        self._words_due = False

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

    def ask(self, with_words: bool = False) -> int:
        """A candidate pause: the token of the model's request for it (and of its transcript,
        `with_words`)."""
        self._tokens += 1
        self._current = self._tokens
        self._probability = None
        self._words = None
        self._words_due = with_words
        return self._current

    def resumed(self) -> None:
        """Speech resumed, or the turn ended: the ask in flight is stale."""
        self._current = None

    def answered(self, token: int, probability: float) -> Verdict:
        self._down = False  # any answer, current or stale, says the model is back
        if token != self._current:
            return _WAIT
        self._probability = probability
        return self._verdict()

    def heard(self, token: int, transcript: str | None) -> Verdict:
        """The transcript of the pause's turn so far (None: the transcriber failed)."""
        if token != self._current or not self._words_due:
            return _WAIT
        self._words_due = False
        self._words = transcript
        return self._verdict()

    def _verdict(self) -> Verdict:
        if self._probability is None or self._words_due:
            return _WAIT  # an answer still to come
        self._current = None
        # A NaN (a broken reply) fails the comparison: the turn waits.
        if not self._probability >= self.threshold:
            return _WAIT
        if self._words is not None and continues(self._words):
            return _WAIT
        return Verdict(True, "model")

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

"""Semantic end of turn: a turn-completion model's answers -> the turn is over, or not yet.

`semantic_vad` (docs/protocol.md "Semantic end of turn and preemptive responses") ends the
user's turn at a pause when the sound and the words say the turn is complete, not after a
fixed silence. This module holds the rules; the caller owns the clock and the detector
(numbers in, decisions out), asks the model (`PredictTurn`) and the transcriber, and feeds
the answers.

Rules:
1. At each candidate pause (the detector's `VadPaused`) the `turn` model (Smart Turn v3.2) is
   asked once (`ask` gives the request's token), and, where there is a transcriber
   (`ask(with_words=True)`), asr_partial's fast decode of the same audio. An ask is current
   until speech resumes (`resumed`), the turn ends, or a newer ask: an answer to any other
   token is stale and decides nothing.
2. Every pause has a deadline from the moment it is asked: the eagerness's unsure wait
   (`unsure_ms`). The caller's detector ends the turn at that much silence
   (`silence_limit_ms`) unless an answer moves it, so a decision always arrives: if the
   answers are not back by then (a loaded machine), the turn ends there (cause `late`).
3. The verdict waits for every answer asked for, then scores the pause:
   `turn_words.turn_score(probability, words_say(transcript))` (words that go on score 0, a
   finished sentence lifts the sound's probability). A score >= the eagerness's threshold
   makes the pause *sure*: the turn ends once the silence reaches the sure wait (`sure_ms`;
   at once if it already has; cause `model`). Below it the unsure wait stands (cause
   `unsure`). A transcript that failed or holds no words leaves the sound alone to decide.
   Why a sure pause still waits: people pause between two sentences of one turn, and Smart
   Turn calls the first one complete (bench.turn_policy: asterisk's held pauses score 0.94
   median); a short wait outlasts most such pauses and costs every real end the same.
4. Outage: an answer with an error (the model is down or timed out) starts an outage; while
   it lasts, the silence rule decides: the turn ends at `fallback_ms` (500, server_vad's
   default) of silence (cause `fallback`), and a pause already that long ends it at once. The
   first failure of an outage is told (`failed` returns True once); any good answer ends the
   outage. Pauses go on being asked during an outage, so a recovered model is noticed.
5. Causes: `model`, `unsure`, `late`, `fallback`; server_vad's turns end by `silence`. The
   detector's longest wait (`silence_duration_ms`, OpenAI's 8 / 4 / 2 s) is only a ceiling:
   every asked pause ends sooner.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from orchestrator.protocol.session_config import EAGERNESS
from orchestrator.session.turns.turn_words import turn_score, words_say

__all__ = ["FALLBACK_SILENCE_MS", "UNSURE_WAIT_MS", "EndCause", "EndOfTurn", "Verdict"]

FALLBACK_SILENCE_MS: Final = 500  # server_vad's silence_duration_ms default
UNSURE_WAIT_MS: Final = EAGERNESS["medium"].unsure_wait_ms

EndCause = Literal["model", "unsure", "late", "fallback", "silence"]


@dataclass(frozen=True, slots=True)
class Verdict:
    """What an answer means: end the turn now (with its cause), or not."""

    end: bool
    cause: EndCause | None = None


_WAIT: Final = Verdict(False)


class EndOfTurn:
    """`sure_ms` 0 (the default) ends a sure pause at once; the session sets the eagerness's."""

    __slots__ = (
        "_current",
        "_down",
        "_fallback_ms",
        "_probability",
        "_sure",
        "_tokens",
        "_words",
        "_words_due",
        "sure_ms",
        "threshold",
        "unsure_ms",
    )

    def __init__(
        self,
        threshold: float,
        fallback_ms: int = FALLBACK_SILENCE_MS,
        unsure_ms: int = UNSURE_WAIT_MS,
        sure_ms: int = 0,
    ) -> None:
        self.threshold = threshold
        self.unsure_ms = unsure_ms
        self.sure_ms = sure_ms
        self._fallback_ms = fallback_ms
        self._tokens = 0
        self._current: int | None = None
        self._down = False
        # The current ask's answers so far.
        self._probability: float | None = None
        self._words: str | None = None
        self._words_due = False
        # Whether the last asked pause was judged sure (None: none judged since speech).
        self._sure: bool | None = None

    @property
    def down(self) -> bool:
        """The model is in an outage: the silence rule (`fallback_ms`) ends turns."""
        return self._down

    @property
    def fallback_ms(self) -> int:
        return self._fallback_ms

    @property
    def pending(self) -> bool:
        """A pause is asked and its answers are not all back."""
        return self._current is not None

    @property
    def silence_limit_ms(self) -> int | None:
        """The silence that ends the turn now (None: no pause asked, the detector's longest
        wait). Rules 2-4."""
        if self._down:
            return self._fallback_ms
        if self._current is None and self._sure is None:
            return None
        if self._sure:
            return self.sure_ms
        return self.unsure_ms  # asked and pending (rule 2), or decided unsure (rule 3)

    def ask(self, with_words: bool = False) -> int:
        """A candidate pause: the token of the model's request for it (and of its transcript,
        `with_words`)."""
        self._tokens += 1
        self._current = self._tokens
        self._probability = None
        self._words = None
        self._words_due = with_words
        self._sure = None
        return self._current

    def resumed(self) -> None:
        """Speech resumed, or the turn ended: the ask in flight is stale."""
        self._current = None
        self._sure = None

    def answered(self, token: int, probability: float, silence_ms: int = 0) -> Verdict:
        """The model's answer; `silence_ms`: the pause's silence so far (the caller's
        detector), against the sure wait."""
        self._down = False  # any answer, current or stale, says the model is back
        if token != self._current:
            return _WAIT
        self._probability = probability
        return self._verdict(silence_ms)

    def heard(self, token: int, transcript: str | None, silence_ms: int = 0) -> Verdict:
        """The transcript of the pause's turn so far (None: the transcriber failed)."""
        if token != self._current or not self._words_due:
            return _WAIT
        self._words_due = False
        self._words = transcript
        return self._verdict(silence_ms)

    def _verdict(self, silence_ms: int) -> Verdict:
        if self._probability is None or self._words_due:
            return _WAIT  # an answer still to come
        self._current = None
        # A NaN (a broken reply) fails the comparison: the pause stays unsure.
        self._sure = turn_score(self._probability, words_say(self._words)) >= self.threshold
        if self._sure and silence_ms >= self.sure_ms:
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
        """Why the detector's own silence rule ended a semantic turn (rules 2-5)."""
        if self._down:
            return "fallback"
        if self._current is not None:
            return "late"
        return "model" if self._sure else "unsure"

    def fallback_due(self, silence_ms: int) -> bool:
        """During an outage, a pause already `fallback_ms` long ends the turn at once."""
        return self._down and silence_ms >= self._fallback_ms

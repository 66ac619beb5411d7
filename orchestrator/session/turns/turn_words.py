"""What a pause's words say about the turn, and how they combine with the sound's score.

semantic_vad hears two things at a candidate pause: Smart Turn's completion probability (the
sound: intonation, a trailing vowel) and the turn so far as words (asr_partial's fast decode of
the same audio). People pause inside a turn mostly after words that cannot end one ("I'd like
a table for ... four", "montreal forced uh um ..."), and Whisper writes a sentence's end with
its mark. So the words can veto an end, and a finished sentence can vouch for one.

Rules:
1. `words_say(transcript)`:
   - `open` when there are no words (None: the transcriber failed; "": it heard none): the
     sound alone decides;
   - `continues` when the words stop mid-phrase: a trailing ellipsis, comma, colon or dash,
     or a last word that cannot end an English sentence (`CONTINUATIONS`: an article, a
     preposition, a conjunction, a possessive, a subject "I", a filler such as "uh" or "um");
   - `complete` when the last word may end a sentence and the text ends with ".", "?" or "!";
   - `open` otherwise (no mark: Whisper was unsure where the sentence goes).
2. `turn_score(probability, words)`: `continues` gives 0 (the words veto the sound);
   `complete` lifts the probability `COMPLETE_LIFT` of the way to 1 (a finished sentence makes
   an end likelier than the sound alone says); `open` leaves the probability as it is. Why
   these and not others: chosen on the human held turns (bench.turn_policy, docs/
   benchmarks.md "End of turn: the sound and the words"); the alternatives measured are there.
3. The words judged are the turn's last `WORDS_WINDOW_MS` (3 s), not all the sound Smart
   Turn hears: the fast decode stops after its token budget (24 tokens, PARTIAL_MAX_TOKENS of
   turntaker_models/cascade/asr.py), and 8 s of speech overflows it, so the "last word" was
   wherever the budget ran out ("Press 2 to use the" of a finished prompt). 3 s of speech is
   a dozen words at most; the words that matter are the last ones.

Pure: strings and floats in, a class and a score out.
"""

from __future__ import annotations

from typing import Final, Literal

__all__ = [
    "COMPLETE_LIFT",
    "CONTINUATIONS",
    "FILLERS",
    "WORDS_WINDOW_MS",
    "WordsSay",
    "turn_score",
    "words_say",
]

WordsSay = Literal["continues", "complete", "open"]

FILLERS: Final = frozenset("um uh er erm ah hm hmm mm uhm".split())

# Last words after which an English sentence goes on (lower case, apostrophes kept).
CONTINUATIONS: Final = FILLERS | frozenset(
    "a an the my your our their his her its this these those every each "
    "for to of in on at with from by about into onto over under between through without "
    "and or but so because if than as although though whether nor "
    "i i'm i'd i'll i've".split()
)

# The turn's latest audio whose words are judged (rule 3).
WORDS_WINDOW_MS: Final = 3000

# How far a finished sentence lifts the sound's probability toward 1 (rule 2).
COMPLETE_LIFT: Final = 0.5

_TRAILING_OPEN: Final = ("...", "…", ",", ":", ";", "-", "—", "\u2013")
_ENDS: Final = (".", "?", "!")


def _last_word(text: str) -> str:
    words = [w.strip(".?!;:,\"'()[]").lower() for w in text.split()]
    words = [w for w in words if w]
    return words[-1] if words else ""


def words_say(transcript: str | None) -> WordsSay:
    """What the turn's words so far say (rule 1)."""
    if transcript is None:
        return "open"
    text = transcript.strip()
    last = _last_word(text)
    if not last:
        return "open"
    if text.endswith(_TRAILING_OPEN) or last in CONTINUATIONS:
        return "continues"
    if text.endswith(_ENDS):
        return "complete"
    return "open"


def turn_score(probability: float, words: WordsSay, complete_lift: float = COMPLETE_LIFT) -> float:
    """The sound's completion probability with the words' say (rule 2), in [0, 1]."""
    if words == "continues":
        return 0.0
    if words == "complete":
        return probability + (1.0 - probability) * complete_lift
    return probability

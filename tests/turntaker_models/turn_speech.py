"""Complete and cut-off turns for the Smart Turn tests (in-process and through Triton).

Synthetic speech is a weak judge of an end-of-turn model (shared/TURN_TAKING_NOTES.md, "Smart
Turn v3.2"): a fragment synthesised on its own is spoken with sentence-final prosody and
scores as complete, some complete sentences score low, and the scores move with the voice and
with the length of the trailing silence. So an incomplete turn is the WHOLE sentence's audio
cut at a word gap (the voice still rising into the next word), both turns end in the same
TAIL_S of silence (they differ only in the words said), and the sentences and the voice are
ones measured to give clear results (flite slt; probabilities in the tests' comments). This
shows that the model is wired correctly, not how well it judges real speech.
"""

from __future__ import annotations

import numpy as np

from bench import speech
from turntaker_models.contract import INPUT_SAMPLE_RATE

Audio = speech.Audio

VOICE = "slt"
# Questions the model, fed slt, scores clearly complete whole and clearly incomplete when cut
# at the word gap nearest their middle (measured with exact int8 sums, turntaker_models.turn:
# whole 0.829 and 0.979, cut 0.030 and 0.214).
# Other voices (kal16, awb, rms) and other sentences tried gave mixed results.
SENTENCES = (
    "Would you like to come to dinner with us on Friday?",
    "Have you ever been to the museum in the city centre?",
)
# The pause after the last word, the same for whole and cut turns. The model reads longer
# silence as more complete: with 0.2 s the first sentence scores only 0.58 whole.
TAIL_S = 0.3
FRAME = INPUT_SAMPLE_RATE // 100  # 10 ms energy frames
# A frame is a gap when its RMS is under 5 % of the loudest frame's.
GAP_REL = 0.05


def spoken(sentence: str) -> Audio:
    """`sentence` spoken by flite's VOICE at 16 kHz, without leading or trailing silence."""
    return speech.spoken_part(speech.flite(sentence, VOICE, INPUT_SAMPLE_RATE), INPUT_SAMPLE_RATE)


def word_gap(audio: Audio) -> tuple[int, int]:
    """The longest run of quiet 10 ms frames whose centre lies in the middle half of `audio`
    (speech start to end), as (first sample, end sample)."""
    frames = audio[: len(audio) // FRAME * FRAME].reshape(-1, FRAME).astype(np.float64)
    rms = np.sqrt((frames**2).mean(axis=1))
    quiet = rms < GAP_REL * rms.max()
    n = len(quiet)
    best: tuple[int, int] | None = None
    start = None
    for i, q in enumerate([*quiet.tolist(), False]):
        if q and start is None:
            start = i
        elif not q and start is not None:
            inside = start > 0 and i < n  # a gap between words, not the edges
            middle = 0.25 * n <= (start + i) / 2 <= 0.75 * n
            if inside and middle and (best is None or i - start > best[1] - best[0]):
                best = (start, i)
            start = None
    assert best is not None, "no word gap near the middle of the sentence"
    return best[0] * FRAME, best[1] * FRAME


def with_tail(audio: Audio) -> Audio:
    return np.concatenate([audio, speech.silence(TAIL_S, INPUT_SAMPLE_RATE)])


def complete_turn(sentence: str) -> Audio:
    """The whole sentence, then TAIL_S of silence."""
    return with_tail(spoken(sentence))


def cut_turn(sentence: str) -> Audio:
    """The sentence up to its middle word gap, then the same TAIL_S of silence: a speaker who
    paused mid-phrase."""
    audio = spoken(sentence)
    start, _ = word_gap(audio)
    return with_tail(audio[:start])

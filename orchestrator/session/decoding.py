"""Which decode a transcription gets: the transcriber's fast one (`partial`) or its full one.

Rules:
1. An overlap's partial (`purpose="overlap"`) must be back within the overlap decision's
   grace: the fast decode.
2. A pause's words (`"end_of_turn"`) go with its end-of-turn verdict: the fast decode.
3. A committed turn (`"turn"`) and a preemptive response's turn (`"preempt"`) are what the
   conversation keeps and the cascade hears: the full decode.

Pure: the session actor asks here and carries out the answer.
"""

from __future__ import annotations

from typing import Final

from orchestrator.session.inputs import TranscriptPurpose

__all__ = ["fast_decode"]

_FAST: Final[frozenset[TranscriptPurpose]] = frozenset({"overlap", "end_of_turn"})


def fast_decode(purpose: TranscriptPurpose) -> bool:
    """Whether a transcription for `purpose` takes the fast decode (rules 1-3)."""
    return purpose in _FAST

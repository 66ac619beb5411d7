"""Rule 13 of core_echo.py: speech so sure, for so long, over more than the echo, that it is the
user's, whatever rules 7, 8 and 10 say of each chunk.

Rules:
1. A run is the VAD chunks in a row at `SURE_SPEECH` or more; a chunk under it ends the run.
2. A run vouches for its chunk once it is `SURE_CHUNKS` long (256 ms) and rule 10 heard at
   least `SURE_EXCESS_DB` more than the echo the reference predicts in one of its chunks, or
   had no measure of one (nothing to say it was the echo).

Why both: a user at the echo's own level, in its spectrum, is held back by rules 8 and 10 all
the while silero is sure of them, because rule 10's filter tracks any power under its freeze
and the canceller begins to take them; over 256 ms their voice still puts power where the
answer has none in some chunk (3-9 dB in the page's interruptions held this way). The canceller
losing the echo for a moment (the page's playout shifting after an underrun) leaves a residual
silero can score 0.99 for as long, but rule 10's prediction explains all of it: its excess
stayed within 2 dB of zero through every such run seen (bench.echo_page, 0 dB).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["SURE_CHUNKS", "SURE_EXCESS_DB", "SURE_SPEECH", "SureSpeech"]

SURE_SPEECH = 0.99
SURE_CHUNKS = 8
SURE_EXCESS_DB = 3.0


@dataclass(slots=True)
class SureSpeech:
    chunks: int = 0
    most_excess_db: float = -math.inf  # rule 2: the most rule 10 heard over the echo in the run

    def add(self, probability: float, excess_db: float | None) -> bool:
        """Takes the next chunk (its VAD probability, rule 10's excess or None where it has no
        measure); True when the run vouches for it."""
        if probability < SURE_SPEECH:
            self.reset()
            return False
        self.chunks += 1
        excess = math.inf if excess_db is None else excess_db
        self.most_excess_db = max(self.most_excess_db, excess)
        return self.chunks >= SURE_CHUNKS and self.most_excess_db >= SURE_EXCESS_DB

    def reset(self) -> None:
        self.chunks = 0
        self.most_excess_db = -math.inf

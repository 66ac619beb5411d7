"""What the echo rules made of one VAD chunk (core_echo.py rules 7-13), as a step's note.

The rules only scale a chunk's probability; which of them did, and on what measures, is lost
in the number turn detection gets. A verdict keeps it, so a cut can be traced to the rule
that let its chunk through, and the service can count how often each rule holds one back
(orchestrator/service/metrics.py).

Rules:
1. One verdict per chunk that ends while the reference may still be heard (core_echo rule 7's
   `ECHO_TAIL_MS`); a chunk past the echo's tail is heard as the VAD scored it and gets none.
2. `held_by` names the rules that scaled the chunk under the threshold, in the order core_echo
   tests them: 7 (not clearly speech), 8 (quieter than the echo), 10 (no more than the
   echo); empty when none did. `vouched` is rule 13: a run of sure speech let it through
   whatever they said (`held_by` is then empty).
3. The measures are the rules' own, None where a rule had none: rule 10's excess over the
   predicted echo (dB), rule 8's microphone, cleaned and echo levels (dBFS), rule 10's filter
   trained on every band or not; and how long before the chunk's end a playback ACK last
   moved the reference, and by how much (far_end.py rule 5; None: never), since the
   canceller and rule 10's filter learnt the echo's path where the reference stood before.
Pure data: no clock, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["EchoRule", "EchoVerdict"]

EchoRule = Literal[7, 8, 10]


@dataclass(frozen=True, slots=True)
class EchoVerdict:
    chunk_end_ms: int  # on the session's input clock
    probability: float  # the VAD's, of the cleaned audio
    heard: float  # what turn detection was given
    since_played_ms: int  # how long before the chunk's end the reference last had sound
    excess_db: float | None
    microphone_db: float | None
    cleaned_db: float | None
    echo_db: float | None
    trained: bool
    held_by: tuple[EchoRule, ...] = ()
    vouched: bool = False
    reference_moved_ms: int | None = None  # before the chunk's end; None: never moved
    reference_moved_by_ms: int = 0  # later (negative: earlier)

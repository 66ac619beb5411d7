"""Protocol fuzzing of the session core in memory: most of CI's fuzzing.

At least `TURNTAKER_FUZZ_INPUTS` (default 10,000) generated client messages, in sessions of
16, each decoded at the edge as the session actor does and fed to a `SessionCore`, whose
backend, VAD, transcriber and timers are seeded stand-ins (`fuzzing.in_memory`). Every server
event is checked against the contract and the openai SDK, every answer against the message
that caused it (`fuzzing.checks`). Derandomized, so a failure reproduces on the next run; it
reports the broken invariant, the input, its session and Hypothesis's shrunk example.
`TURNTAKER_FUZZ_SEED=N` explores elsewhere instead. The socket run over the live server is
`tests/e2e/test_fuzz_e2e.py`; the long run `python -m bench.fuzz`.
"""

from __future__ import annotations

import math
import os

from fuzzing.campaign import campaign
from fuzzing.in_memory import MemoryRunner
from fuzzing.scripts import memory_scripts

SCRIPT_LENGTH = 16


def test_fuzzed_client_messages_never_break_the_core() -> None:
    target = int(os.environ.get("TURNTAKER_FUZZ_INPUTS", "10000"))
    chosen_seed = os.environ.get("TURNTAKER_FUZZ_SEED")
    runner = MemoryRunner()
    campaign(
        runner,
        memory_scripts(SCRIPT_LENGTH),
        # A non-UTF-8 text frame (about one session in 20 ends with one) never reaches a core.
        math.ceil(target / (SCRIPT_LENGTH - 1)),
        seed=None if chosen_seed is None else int(chosen_seed),
    )
    summary = runner.stats.summary()
    print(summary)
    assert runner.stats.inputs >= target, summary
    assert not runner.stats.failures, summary
    # The stand-ins really played their part: responses ran, turn detection spoke, and
    # answers of every kind interleaved with the client's messages.
    fed = runner.stats.fed
    assert fed["BackendDone"] and fed["SpeechProbabilities"] and fed["TranscriptReady"], summary
    assert runner.stats.events_by_type["input_audio_buffer.speech_started"], summary

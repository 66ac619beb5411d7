"""Protocol fuzzing against the live server: real models, real sockets, generated input.

At least `TURNTAKER_FUZZ_INPUTS` (default 5,000) generated client messages, in sessions of 16,
go to the session's realtime server (`tests/service/fuzz_inputs.py` says what they are and what
each answer must be). The run is derandomized, so a failure reproduces on the next run; it
prints the broken invariant, the input, its session, and Hypothesis's shrunk example.
`TURNTAKER_FUZZ_SEED=N` explores elsewhere (random seed N) instead.

After the run the server must still be healthy, and hold no session beyond those open before.
`python -m bench.fuzz` is the long run (50,000 inputs by default, its own servers).
"""

from __future__ import annotations

import math
import os

from hypothesis import HealthCheck, Phase, given, seed, settings

from orchestrator.service.serve import BackgroundServer
from tests.service.fuzz_inputs import (
    FuzzRunner,
    Script,
    capture_server_errors,
    healthz,
    metric_value,
    scripts,
    wait_for_metric,
)

SCRIPT_LENGTH = 16


def test_fuzzed_client_messages_never_break_the_live_server(
    realtime_server: BackgroundServer,
) -> None:
    target = int(os.environ.get("TURNTAKER_FUZZ_INPUTS", "5000"))
    chosen_seed = os.environ.get("TURNTAKER_FUZZ_SEED")
    http = realtime_server.http_url
    active_before = metric_value(http, "turntaker_sessions_active")
    crashes_before = metric_value(http, "turntaker_session_closes_total", {"code": "1011"})
    runner = FuzzRunner(realtime_server.url)

    with capture_server_errors() as logs:

        @settings(
            max_examples=math.ceil(target / SCRIPT_LENGTH),
            derandomize=chosen_seed is None,
            database=None,
            deadline=None,
            # Shrinking replays sessions against the live server: slow, but a short failing
            # session is worth it.
            phases=(Phase.explicit, Phase.generate, Phase.shrink),
            suppress_health_check=list(HealthCheck),
            print_blob=chosen_seed is not None,
        )
        @given(scripts(SCRIPT_LENGTH))
        def one_session(script: Script) -> None:
            failures = runner.run(script)
            assert not failures, failures[0].report()
            assert not logs.records, "the server logged errors:\n" + "\n".join(logs.records)

        if chosen_seed is not None:
            seed(int(chosen_seed))(one_session)
        one_session()

    summary = runner.stats.summary()
    print(summary)
    assert runner.stats.inputs >= target, summary
    assert healthz(http) == {"status": "ok"}
    # Sessions end a moment after their sockets close; none may linger.
    active = wait_for_metric(http, "turntaker_sessions_active", active_before or 0.0)
    assert active == active_before, f"{active} sessions active, {active_before} before the run"
    assert "1011" not in runner.stats.closes, summary
    # The server's own count (a labelled counter appears at its first increment).
    crashes = metric_value(http, "turntaker_session_closes_total", {"code": "1011"})
    assert (crashes or 0) == (crashes_before or 0), f"the server closed {crashes} with 1011"

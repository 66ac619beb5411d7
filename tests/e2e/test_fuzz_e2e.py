"""Protocol fuzzing of the live server: real models, real sockets, generated input.

At least `TURNTAKER_FUZZ_LIVE_INPUTS` (default 2,000) generated client messages, in sessions
of 16, go to the session's realtime server over real WebSockets (`fuzzing.live`); most of
CI's fuzzing runs in memory against the core (`tests/orchestrator/session/test_core_fuzz.py`), this
keeps the transport, the session actor and the models honest. The inputs and invariants are
`fuzzing`'s. The run is derandomized, so a failure reproduces on the next run; it prints the
broken invariant, the input, its session, and Hypothesis's shrunk example.
`TURNTAKER_FUZZ_SEED=N` explores elsewhere (random seed N) instead.

After the run the server must still be healthy, and hold no session beyond those open before,
but for those whose socket it failed (a non-UTF-8 text frame), which wait out their resume
grace as a dropped connection's do.
`python -m bench.fuzz` is the long run (50,000 inputs by default, its own servers).
"""

from __future__ import annotations

import math
import os
import time

from fuzzing.campaign import campaign
from fuzzing.inputs import Script
from fuzzing.live import LiveRunner
from fuzzing.raw_frames import bad_utf8_text_frame
from fuzzing.scripts import live_scripts
from fuzzing.server_health import capture_server_errors, healthz, metric_value
from orchestrator.service.serve import BackgroundServer

SCRIPT_LENGTH = 16


def test_fuzzed_client_messages_never_break_the_live_server(
    realtime_server: BackgroundServer,
) -> None:
    target = int(os.environ.get("TURNTAKER_FUZZ_LIVE_INPUTS", "2000"))
    chosen_seed = os.environ.get("TURNTAKER_FUZZ_SEED")
    http = realtime_server.http_url
    active_before = metric_value(http, "turntaker_sessions_active") or 0.0
    in_grace_before = metric_value(http, "turntaker_sessions_in_grace") or 0.0
    crashes_before = metric_value(http, "turntaker_session_closes_total", {"code": "1011"})
    runner = LiveRunner(realtime_server.url)

    with capture_server_errors() as logs:

        def no_server_errors() -> None:
            assert not logs.records, "the server logged errors:\n" + "\n".join(logs.records)

        # Shrinking replays sessions against the live server: slow, but a short failing
        # session is worth it.
        campaign(
            runner,
            live_scripts(SCRIPT_LENGTH),
            math.ceil(target / SCRIPT_LENGTH),
            seed=None if chosen_seed is None else int(chosen_seed),
            check=no_server_errors,
        )
        # Derandomized draws may miss it: the one input that must end the connection, always.
        failures = runner.run(Script((bad_utf8_text_frame(),)))
        assert not failures, failures[0].report()
        no_server_errors()

    summary = runner.stats.summary()
    print(summary)
    assert runner.stats.inputs >= target, summary
    assert healthz(http) == {"status": "ok"}
    # Sessions closed with 1000 end a moment after their sockets close; none may linger. Those
    # whose socket the server failed are in their grace (docs/protocol.md "Session resume").
    failed = runner.stats.closes["1007"] + runner.stats.closes["None"]
    deadline = time.monotonic() + 10
    while True:
        active = metric_value(http, "turntaker_sessions_active") or 0.0
        in_grace = (metric_value(http, "turntaker_sessions_in_grace") or 0.0) - in_grace_before
        if active - in_grace == active_before or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert active - in_grace == active_before, (
        f"{active} sessions active ({in_grace} more in grace), {active_before} before the run"
    )
    assert in_grace <= failed, f"{in_grace} sessions in grace, {failed} sockets failed"
    assert "1011" not in runner.stats.closes, summary
    # The server's own count (a labelled counter appears at its first increment).
    crashes = metric_value(http, "turntaker_session_closes_total", {"code": "1011"})
    assert (crashes or 0) == (crashes_before or 0), f"the server closed {crashes} with 1011"

"""The playout clock (orchestrator/session/history/playout.py): the server's estimate of what a
client that never
acknowledges has played."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from orchestrator.session.history.playout import PlayoutClock


def test_rule1_playback_starts_at_the_first_audio_and_runs_at_real_time() -> None:
    clock = PlayoutClock()
    assert clock.played(1000) == 0 and clock.ends_at() is None
    clock.send(1000, 500)
    clock.send(1100, 500)  # generated faster than real time: queued behind
    assert [clock.played(t) for t in (1000, 1250, 1999, 2000, 9000)] == [0, 250, 999, 1000, 1000]
    assert clock.ends_at() == 2000


def test_rule2_an_underrun_waits_for_the_next_audio() -> None:
    clock = PlayoutClock()
    clock.send(0, 100)
    assert clock.played(300) == 100  # never past what was sent
    clock.send(300, 100)  # the buffer ran dry at 100: playback resumes now
    assert clock.played(350) == 150 and clock.ends_at() == 400


def test_rule3_a_pause_stops_the_clock_and_a_resume_goes_on_from_there() -> None:
    clock = PlayoutClock()
    clock.send(0, 1000)
    clock.pause(200)
    clock.send(300, 1000)
    assert clock.played(5000) == 200 and clock.ends_at() is None
    clock.resume(6000)
    assert clock.played(6100) == 300 and clock.ends_at() == 6000 + 1800


@given(st.lists(st.tuples(st.integers(0, 500), st.integers(0, 400)), max_size=30))
def test_rules_1_2_played_is_monotonic_and_never_past_what_was_sent(
    sends: list[tuple[int, int]],
) -> None:
    clock, now, last = PlayoutClock(), 0, 0
    for gap, ms in sends:
        now += gap
        clock.send(now, ms)
        played = clock.played(now)
        assert last <= played <= clock.sent_ms
        last = played


def test_rule4_a_reply_opened_while_another_plays_starts_after_it() -> None:
    clock = PlayoutClock(start_at=1000)
    clock.send(500, 800)  # sent at 500, while the reply before plays until 1000
    assert clock.played(900) == 0
    assert clock.played(1300) == 300
    assert clock.ends_at() == 1800
    late = PlayoutClock(start_at=1000)
    late.send(1500, 800)  # the reply before was over: it starts when sent
    assert late.ends_at() == 2300

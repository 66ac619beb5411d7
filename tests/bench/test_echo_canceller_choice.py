"""bench/echo_canceller_choice.py's synthetic room (rule 1), which the wrapper's tests reuse."""

from __future__ import annotations

import numpy as np

from bench import echo_canceller_choice as room

RATE = room.RATE


def test_the_room_decays_by_60_db_over_its_rt60() -> None:
    rir = room.room_impulse_response(0.4)
    assert len(rir) == int(0.4 * RATE)
    assert int(np.argmax(np.abs(rir))) == int(0.001 * RATE)  # the direct path, at 1 ms
    tail = rir[int(0.003 * RATE) :].astype(np.float64) ** 2
    early, late = tail[: RATE // 100].mean(), tail[-RATE // 100 :].mean()
    assert 50 < 10 * np.log10(early / late) < 70


def test_the_echo_comes_at_its_delay_and_level() -> None:
    far = room.scaled(np.random.default_rng(0).standard_normal(RATE).astype(np.float32), -20)
    echo = room.echo_of(far, room.room_impulse_response(0.2), 0.25, -30.0)
    assert len(echo) == len(far)
    assert not echo[: int(0.25 * RATE)].any()
    assert abs(20 * np.log10(room.rms_active(echo)) + 30) < 0.5


def test_a_missing_wheel_is_a_row_not_an_error() -> None:
    def missing() -> room.Stream:
        raise ImportError("no", name="livekit")

    assert room._available(missing) == "not installed (livekit)"

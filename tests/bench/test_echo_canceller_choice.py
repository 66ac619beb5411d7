"""bench/echo_canceller_choice.py's room (rule 1), which the wrapper's tests reuse."""

from __future__ import annotations

import numpy as np

from bench import echo_canceller_choice as room
from bench.rooms import Room

RATE = room.RATE


def test_the_room_is_the_echo_benchs_from_its_direct_path() -> None:
    """Rule 1: one room model for both echo benches (bench/rooms.py is tested in test_rooms)."""
    rir = room.room_impulse_response(0.4, seed=3)
    same = Room(delay_ms=0.0, rt60_s=0.4, level_db=0.0, seed=3, distance_m=room.DISTANCE_M)
    np.testing.assert_array_equal(rir, same.impulse_response(RATE))
    assert int(np.argmax(np.abs(rir))) < int(0.005 * RATE), "the direct path comes first"


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

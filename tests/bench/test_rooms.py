"""bench/rooms.py: the echo corpus's rooms (rules named in each test)."""

from __future__ import annotations

import numpy as np

from bench.rooms import EchoPath, Room

RATE = 24000


def _direct_to_reverberant_db(room: Room) -> float:
    taps = room.impulse_response(RATE).astype(np.float64)
    peak = int(np.argmax(np.abs(taps)))
    direct = np.sum(taps[peak - 24 : peak + 24] ** 2)
    return float(10 * np.log10(direct / (np.sum(taps**2) - direct)))


def test_rule_2_the_direct_path_comes_after_the_delay() -> None:
    taps = Room(delay_ms=250, rt60_s=0.3, level_db=0.0, seed=3).impulse_response(RATE)
    peak = int(np.argmax(np.abs(taps)))
    assert not np.any(taps[: 250 * RATE // 1000])
    assert 250 * RATE // 1000 <= peak <= 250 * RATE // 1000 + 48


def test_rule_3_the_level_scales_a_unit_energy_response() -> None:
    loud = Room(delay_ms=40, rt60_s=0.4, level_db=0.0, seed=1).impulse_response(RATE)
    quiet = Room(delay_ms=40, rt60_s=0.4, level_db=-20.0, seed=1).impulse_response(RATE)
    assert abs(float(np.sum(loud.astype(np.float64) ** 2)) - 1.0) < 1e-3
    np.testing.assert_allclose(quiet, loud * 0.1, atol=1e-7)


def test_rule_1_a_closer_microphone_hears_more_of_the_direct_sound() -> None:
    near = _direct_to_reverberant_db(Room(rt60_s=0.6, seed=5, distance_m=0.1))
    far = _direct_to_reverberant_db(Room(rt60_s=0.6, seed=5, distance_m=1.5))
    assert near > far + 10


def test_rule_1_a_livelier_room_rings_longer() -> None:
    def late_energy(rt60: float) -> float:
        taps = Room(delay_ms=0, rt60_s=rt60, seed=2, distance_m=1.5).impulse_response(RATE)
        return float(np.sum(taps[RATE // 10 :].astype(np.float64) ** 2))

    assert late_energy(0.6) > 4 * late_energy(0.2)


def test_rules_4_5_the_same_room_every_time_and_any_chunking() -> None:
    room = Room(delay_ms=120, rt60_s=0.2, level_db=-6.0, seed=9)
    np.testing.assert_array_equal(
        room.impulse_response(RATE), Room(120, 0.2, -6.0, 9).impulse_response(RATE)
    )
    sound = np.random.default_rng(0).standard_normal(RATE).astype(np.float32) * 0.1
    whole = EchoPath(room, RATE)(sound)
    path = EchoPath(room, RATE)
    parts = np.concatenate([path(sound[i : i + 480]) for i in range(0, sound.size, 480)])
    np.testing.assert_allclose(parts, whole, atol=1e-6)

"""echo/residual.py: the input's levels and the echo's level (rules named in each test)."""

from __future__ import annotations

import numpy as np

from orchestrator.session.echo.residual import (
    FRAMES,
    HISTORY,
    MARGIN_DB,
    MIN_HISTORY,
    EchoLevel,
    InputLevels,
)


def _full(n: int, value: int) -> np.ndarray:
    return np.full(n, value, np.int16)


def test_rule1_levels_per_frame_whatever_the_appends() -> None:
    levels = InputLevels()
    assert levels.level(0, 32) is None, "nothing heard yet"
    # 32 ms in appends of 7 and 25 ms: a frame split across two appends adds up.
    levels.add(0, _full(168, 3277), _full(168, 328))
    levels.add(168, _full(600, 3277), _full(600, 328))
    raw, clean = levels.level(0, 32)  # type: ignore[misc]
    assert abs(raw - -20.0) < 0.1 and abs(clean - -40.0) < 0.1


def test_rule1_a_chunk_takes_the_frames_it_covers() -> None:
    levels = InputLevels()
    levels.add(0, _full(240, 0), _full(240, 0))  # 10 ms of silence
    levels.add(240, _full(240, 3277), _full(240, 3277))  # then 10 ms at -20 dBFS
    assert levels.level(0, 10)[0] < -100  # type: ignore[index]
    assert abs(levels.level(10, 20)[0] - -20.0) < 0.1  # type: ignore[index]
    assert abs(levels.level(0, 20)[0] - -23.0) < 0.1, "the mean power of both frames"  # type: ignore[index]


def test_rule4_the_levels_are_bounded() -> None:
    levels = InputLevels()
    for i in range(FRAMES + 100):
        levels.add(i * 240, _full(240, 100), _full(240, 100))
    assert levels.level(0, 10) is None, "the oldest frames are gone"
    assert levels.level((FRAMES + 99) * 10, (FRAMES + 100) * 10) is not None


def test_rule2_no_echo_level_until_enough_echo_alone() -> None:
    echo = EchoLevel()
    for _ in range(MIN_HISTORY - 1):
        echo.echo_only(-30.0)
    assert echo.level_db is None and echo.loud_enough(-90.0), "rule 7 alone decides meanwhile"
    echo.echo_only(-30.0)
    assert echo.level_db == -30.0


def test_rule3_loud_enough_is_within_the_margin_of_the_echo() -> None:
    echo = EchoLevel()
    for db in np.linspace(-40.0, -20.0, HISTORY):
        echo.echo_only(float(db))
    level = echo.level_db
    assert level is not None and -25.0 < level < -22.0, "a high percentile, not the mean"
    assert echo.loud_enough(level - MARGIN_DB + 0.1)
    assert not echo.loud_enough(level - MARGIN_DB - 0.1)


def test_rule2_the_echo_level_follows_the_recent_chunks() -> None:
    echo = EchoLevel()
    for _ in range(HISTORY):
        echo.echo_only(-20.0)
    for _ in range(HISTORY):
        echo.echo_only(-40.0)
    assert echo.level_db == -40.0, "the volume went down: the old level is forgotten"

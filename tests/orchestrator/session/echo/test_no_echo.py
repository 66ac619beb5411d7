"""echo/no_echo.py: whether the answer comes back into the microphone at all."""

from __future__ import annotations

import numpy as np

from orchestrator.session.echo.no_echo import BLOCK, RECENT, NoEcho
from tests.orchestrator.session.echo.test_double_talk import feed, room, speechlike

RATE = 24000


def noise(seconds: float, seed: int = 2) -> np.ndarray:
    """A headset's own noise, -54 dBFS."""
    return np.random.default_rng(seed).standard_normal(int(seconds * RATE)) * 60


def test_rule4_a_headset_returns_no_echo_within_a_block_of_the_answer() -> None:
    far = speechlike(3.0, 0)
    no_echo = NoEcho()
    feed(no_echo, noise(0.9), far[: int(0.9 * RATE)])
    assert not no_echo.none, "no block yet: nothing is known"
    feed(no_echo, noise(2.1, 3), far[int(0.9 * RATE) :], start=int(0.9 * RATE))
    assert no_echo.none


def test_rule2_the_quietest_room_the_benches_hold_is_an_echo() -> None:
    far = speechlike(6.0, 0)
    for delay_ms in (40, 400, 620):
        no_echo = NoEcho()
        feed(no_echo, room(far, delay_ms, 0.1) + noise(6.0), far)
        assert not no_echo.none, f"a -20 dB echo {delay_ms} ms late taken for none"


def test_rule4_a_user_over_the_answer_does_not_undo_it() -> None:
    far = speechlike(4.0, 0)
    t = np.arange(far.size) / RATE
    user = speechlike(4.0, 3) * ((t >= 2.0) & (t < 3.0))  # the user speaks over a block
    mic = noise(4.0) + user
    no_echo = NoEcho()
    feed(no_echo, mic[: 2 * RATE], far[: 2 * RATE])
    for end in (2.5, 3.0, 3.5, 4.0):
        at = int((end - 0.5) * RATE)
        feed(no_echo, mic[at : int(end * RATE)], far[at : int(end * RATE)], at)
        assert no_echo.none, f"undone by the user at {end} s"


def test_rule4_a_room_that_starts_to_return_the_answer_counts_within_two_blocks() -> None:
    far = speechlike(8.0, 0)
    no_echo = NoEcho()
    split = 3 * RATE
    feed(no_echo, noise(3.0), far[:split])
    assert no_echo.none
    echo = room(far, 120, 0.3)[split:] + noise(5.0, 4)
    feed(no_echo, echo, far[split:], start=split)
    assert not no_echo.none, "a headset unplugged: the speaker's echo still taken for none"
    assert RECENT * BLOCK <= 2 * 100


def test_rule2_a_gap_starts_a_new_block() -> None:
    """Between answers nothing is measured (core_echo rule 11): a block never spans the gap,
    where the reference before it would be summed against a microphone after it."""
    far = speechlike(0.9, 0)
    no_echo = NoEcho()
    feed(no_echo, noise(0.9), far)
    feed(no_echo, noise(0.5, 3), np.zeros(int(0.5 * RATE)), start=10 * RATE)
    assert not no_echo.none, "0.9 s of answer and 0.5 s of silence made one block"

"""How `asr` cuts AUDIO by AUDIO_LENGTHS, without a server or a model."""

from __future__ import annotations

import numpy as np
import pytest

from turntaker_models.cascade.asr import segments
from turntaker_models.contract import ContractError


def test_segments_follow_the_lengths_in_order() -> None:
    audio = np.arange(10, dtype=np.float32)
    parts = segments(audio, np.array([3, 0, 7], np.int32))
    assert [p.tolist() for p in parts] == [[0, 1, 2], [], [3, 4, 5, 6, 7, 8, 9]]


def test_no_audio_gives_no_segments() -> None:
    assert segments(np.zeros(0, np.float32), np.zeros(0, np.int32)) == []


@pytest.mark.parametrize(
    ("lengths", "message"),
    [
        ([4], "AUDIO has 5 samples but AUDIO_LENGTHS add up to 4"),
        ([6, -1], "AUDIO_LENGTHS[1] is -1; lengths must be >= 0"),
    ],
)
def test_lengths_that_do_not_fit_are_refused(lengths: list[int], message: str) -> None:
    with pytest.raises(ContractError) as caught:
        segments(np.zeros(5, np.float32), np.array(lengths, np.int32))
    assert str(caught.value) == message


def test_non_integer_lengths_are_refused() -> None:
    with pytest.raises(ContractError, match="must be integers"):
        segments(np.zeros(5, np.float32), np.array([5.0]))

"""An input's 10 ms frames on the input clock, the partial one carried: echo/double_talk.py
and echo/no_echo.py both measure the microphone against its reference frame by frame.

Rules:
1. Frames sit at multiples of `FRAME` input samples; an append's partial frame waits for the
   next append, so any split of the same samples gives the same frames.
2. An append that does not start where the last one ended (the first, or the first after a
   gap the caller skipped: core_echo rule 11) drops what was carried and starts at its own
   frame, zeros before its first sample.
Pure: samples in, frames out (float, full scale 1).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from orchestrator.session.echo.processors import Pcm

__all__ = ["FRAME", "Framed", "Frames"]

RATE = 24000
FRAME = RATE // 100  # 10 ms

Samples = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class Framed:
    """One append's whole frames: rows of `FRAME` samples, frame `first` first."""

    first: int
    restarted: bool  # rule 2: nothing carried from before
    near: Samples
    far: Samples


class Frames:
    def __init__(self) -> None:
        self._near = np.zeros(0)
        self._far = np.zeros(0)
        self._next = 0  # the frame the carried part belongs to
        self._expected: int | None = None  # the input sample the next append should start at

    def add(self, start: int, near: Pcm, far: Pcm) -> Framed:
        """`near` (the microphone) and `far` (its reference), the same length, began at input
        sample `start`."""
        restarted = start != self._expected
        if restarted:  # rule 2
            self._next = start // FRAME
            lead = np.zeros(start - self._next * FRAME)
            self._near, self._far = lead, lead
        self._expected = start + near.size
        near_all = np.concatenate([self._near, near.astype(np.float64) / 32768])
        far_all = np.concatenate([self._far, far.astype(np.float64) / 32768])
        whole = near_all.size // FRAME
        self._near, self._far = near_all[whole * FRAME :], far_all[whole * FRAME :]
        first, self._next = self._next, self._next + whole
        return Framed(
            first,
            restarted,
            near_all[: whole * FRAME].reshape(whole, FRAME),
            far_all[: whole * FRAME].reshape(whole, FRAME),
        )

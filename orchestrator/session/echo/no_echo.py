"""No echo: does the answer come back into the microphone at all?

A headset, or a client that cancels its own echo, returns none of the answer. The canceller
(WebRTC's AEC3) does not conclude that: while its reference plays it goes on suppressing the
microphone as if the answer might be in it, and takes the user's voice with it. Measured
(the session's canceller, a headset's noise at -54 dBFS, no echo, flite speech at the
answer's level): a user 3 s into an answer was 30 dB down in all but 0.2 s of 2.6 s of
speech, 1 s in the onset was gone for 100 ms; over a real echo (-10 dB) the same user mostly
passes. Handed silence as its reference instead, the canceller passes the user untouched
from the first chunk (core_echo.py rule 14).

Rules:
1. Per 10 ms frame of the input clock (echo/frames.py), the microphone's power and the
   reference's.
2. Frames go in blocks of `BLOCK` contiguous frames (1 s); a gap in the input (core_echo
   rule 11 measures only while the answer may be heard) starts a new block. Every echo of
   a block's first `BLOCK - WINDOW` frames of reference has arrived within the block
   (`WINDOW`: 640 ms, the longest delay and tail echo/double_talk.py's filter holds), so the
   microphone's power summed over the block is at least the room's echo gain times the
   reference's summed over those frames: their ratio bounds the gain from above, whatever
   the delay; the microphone's own noise and the user's voice only raise it.
3. A block counts when its reference had sound (`SOUND`) in at least `EVIDENCE` of those
   frames: an answer has played, not a pause.
4. `none`: one of the last `RECENT` counted blocks bounds the gain at `NONE_DB` or under.
   The quietest room the echo benches hold returns the answer at -20 dB; a headset's noise
   against an answer at speech level bounds it near -30 dB. One block suffices (the gain
   of one room does not change), and a block the user spoke in does not undo it; the last
   two only, so a room that starts to return the answer (a headset unplugged) counts within
   two blocks of its answer.
5. Bounded: a partial frame, a partial block's two sums and `RECENT` verdicts.
Pure: arrays in, a verdict out; no clock.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from orchestrator.session.echo.frames import Frames
from orchestrator.session.echo.processors import Pcm

__all__ = ["NoEcho"]

BLOCK = 100  # rule 2: 1 s
WINDOW = 64  # rule 2: 640 ms (double_talk.TAPS)
SOUND = 10 ** (-50 / 10)  # rule 3: a frame's reference at -50 dBFS or louder
EVIDENCE = 5  # rule 3: 50 ms of the block's reference
NONE_DB = -25.0  # rule 4
RECENT = 2  # rule 4


class NoEcho:
    def __init__(self) -> None:
        self._frames = Frames()  # rule 1
        # Rule 2: the block being summed: its frames so far, the microphone's power, the power
        # of the reference's first BLOCK - WINDOW frames and how many of those had sound.
        self._count = 0
        self._heard = 0.0
        self._played = 0.0
        self._sounding = 0
        self._bounds: deque[float] = deque(maxlen=RECENT)  # rule 4, in dB

    @property
    def none(self) -> bool:
        """Rule 4: no echo comes back."""
        return any(bound <= NONE_DB for bound in self._bounds)

    def add(self, start: int, near: Pcm, far: Pcm) -> None:
        """`near` (the microphone) and `far` (its reference), the same length, began at input
        sample `start` (rule 1)."""
        framed = self._frames.add(start, near, far)
        if framed.restarted:  # rule 2: a gap (or the first audio) starts a new block
            self._count, self._heard, self._played, self._sounding = 0, 0.0, 0.0, 0
        heard = np.mean(framed.near**2, axis=1)
        played = np.mean(framed.far**2, axis=1)
        for mic, ref in zip(heard.tolist(), played.tolist(), strict=True):
            self._frame(mic, ref)

    def _frame(self, mic: float, ref: float) -> None:
        """Rules 2-4 for one frame."""
        if self._count < BLOCK - WINDOW:
            self._played += ref
            self._sounding += ref >= SOUND
        self._heard += mic
        self._count += 1
        if self._count < BLOCK:
            return
        if self._sounding >= EVIDENCE:  # rule 3
            self._bounds.append(10 * np.log10((self._heard + 1e-20) / self._played))
        self._count, self._heard, self._played, self._sounding = 0, 0.0, 0.0, 0

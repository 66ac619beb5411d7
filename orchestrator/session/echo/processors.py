"""What the session core asks of its input DSP (core_echo.py), and nothing of how: WebRTC's
is echo/webrtc.py; a test's may be anything that keeps these promises."""

from __future__ import annotations

from typing import Protocol

import numpy as np
import numpy.typing as npt

from orchestrator.protocol.session_config import NoiseReductionType

__all__ = ["Canceller", "Pcm", "Processors", "Suppressor"]

Pcm = npt.NDArray[np.int16]


class Canceller(Protocol):
    # The noise suppressor that runs after it (WebRTC's order), None for none; set anew at a
    # session.update without losing what the canceller learnt of the echo path.
    noise_reduction: NoiseReductionType | None

    def process(self, near: Pcm, far: Pcm) -> Pcm:
        """The near end with the far end's echo taken out; the same length."""
        ...


class Suppressor(Protocol):
    def process(self, near: Pcm) -> Pcm:
        """The near end with stationary noise lowered; the same length."""
        ...


class Processors(Protocol):
    """Builds the DSP of one session (orchestrator/session/echo/canceller.py)."""

    def canceller(self, rate: int, noise_reduction: NoiseReductionType | None) -> Canceller: ...

    def suppressor(self, rate: int, kind: NoiseReductionType) -> Suppressor: ...

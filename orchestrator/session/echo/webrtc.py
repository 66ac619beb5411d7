"""The DSP a session's input processing gets (core_echo.py's `Processors`): WebRTC's AEC3 and
noise suppressor, through pywebrtc-audio (echo/canceller.py).

Rules:
1. One canceller per session with echo cancellation on; its noise suppressor, when the session
   asks for one, runs inside it, after the canceller (WebRTC's own order).
2. Without echo cancellation a session with noise reduction gets a suppressor alone, with the
   same framing and delay (one 10 ms frame).
"""

from __future__ import annotations

from orchestrator.protocol.session_config import NoiseReductionType
from orchestrator.session.echo.canceller import EchoCanceller, NoiseSuppressor
from orchestrator.session.echo.processors import Canceller, Suppressor

__all__ = ["WebRtcProcessors"]


class WebRtcProcessors:
    def canceller(self, rate: int, noise_reduction: NoiseReductionType | None) -> Canceller:
        """Rule 1."""
        return EchoCanceller(rate, noise_reduction)

    def suppressor(self, rate: int, kind: NoiseReductionType) -> Suppressor:
        """Rule 2."""
        return NoiseSuppressor(kind, rate)

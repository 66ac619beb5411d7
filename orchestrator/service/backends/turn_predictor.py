"""End-of-turn predictions through the Triton `turn` model (Smart Turn v3.2).

Rules:
- The audio is windowed here, by the model's own rule (`turntaker_models.turn_window.window`:
  the last 8 s, zeros in front), so every request has the one shape [1, 128000] and Triton's
  dynamic batcher can put many sessions' requests into one model run.
- Any failure raises (no endpoint, a deadline, a server error, an answer that is not one
  probability in [0, 1]): the caller falls back to its own rule, and a guess is never made up
  here.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
import tritonclient.grpc as grpcclient

from orchestrator.service.backends.endpoints import EndpointPool
from orchestrator.triton.trio_bridge import open_unary
from turntaker_models.turn_window import WINDOW_SAMPLES, window

MODEL = "turn"


class TurnPredictionError(RuntimeError):
    """The `turn` model answered, but not with one probability."""


class TritonTurnPredictor:
    """`timeout_s` is the gRPC deadline of one prediction: it is asked at a pause in the user's
    speech, where a late answer is no better than none (the caller's fallback decides)."""

    def __init__(self, pool: EndpointPool, timeout_s: float = 2.0) -> None:
        self._pool = pool
        self._timeout_s = timeout_s

    async def predict(self, audio16k: npt.NDArray[np.float32]) -> float:
        """The probability that the turn in `audio16k` (16 kHz mono, the turn so far) is
        complete; raises on any failure."""
        endpoint = self._pool.choose()
        row = window(audio16k).reshape(1, WINDOW_SAMPLES)
        samples = grpcclient.InferInput("AUDIO", [1, WINDOW_SAMPLES], "FP32")
        samples.set_data_from_numpy(row)
        async with open_unary(endpoint.url, timeout_s=self._timeout_s) as unary:
            result = await unary.infer(MODEL, [samples])
        found = result.as_numpy("PROBABILITY")
        if found is None or found.size != 1:
            shape = None if found is None else found.shape
            raise TurnPredictionError(f"{MODEL}: expected one PROBABILITY, got {shape}")
        probability = float(found.reshape(-1)[0])
        if not (math.isfinite(probability) and 0.0 <= probability <= 1.0):
            raise TurnPredictionError(f"{MODEL}: PROBABILITY {probability} is not in [0, 1]")
        return probability

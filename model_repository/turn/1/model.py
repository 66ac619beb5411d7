"""Triton Python-backend model `turn`: a thin adapter over turntaker_models.turn.

The dynamic batcher hands over several requests (each [rows, 128000]); their good rows go
through one ONNX run and each request gets its own rows' probabilities back. A request that
breaks the contract (a non-finite sample) fails alone, with the reason; the others of its
batch are still answered.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import triton_python_backend_utils as pb_utils

from turntaker_models.contract import ContractError
from turntaker_models.settings import ModelSettings
from turntaker_models.turn import TurnModel, Windows, check_windows


class TritonPythonModel:
    def initialize(self, args: dict[str, Any]) -> None:
        # transformers computes the features with torch.stft when torch is installed. One
        # window's STFT takes ~2 ms on one thread, while torch's default pool (a thread per
        # core) spins against the other models' threads: 125 ms per window measured on a
        # loaded 2-core host. This stub process is ours alone, so its torch gets one thread.
        torch.set_num_threads(1)
        self.model = TurnModel(ModelSettings.from_env().threads)

    def execute(self, requests: list[Any]) -> list[Any]:
        responses: list[Any] = [None] * len(requests)
        good: list[tuple[int, Windows]] = []
        for i, request in enumerate(requests):
            try:
                audio = pb_utils.get_input_tensor_by_name(request, "AUDIO").as_numpy()
                good.append((i, check_windows(audio)))
            except ContractError as error:
                responses[i] = _failure(f"turn: {error}")
            except Exception as error:
                responses[i] = _failure(f"turn: {type(error).__name__}: {error}")
        if not good:
            return responses
        try:
            # Stacked: one ONNX run for the whole batch, not one per request.
            probabilities = self.model.predict(np.concatenate([rows for _, rows in good]))
        except Exception as error:
            # Our bug, not the callers': every request of the run still gets an answer.
            for i, _ in good:
                responses[i] = _failure(f"turn: {type(error).__name__}: {error}")
            return responses
        start = 0
        for i, rows in good:
            mine = probabilities[start : start + rows.shape[0]].reshape(-1, 1)
            start += rows.shape[0]
            out = pb_utils.Tensor("PROBABILITY", np.ascontiguousarray(mine, np.float32))
            responses[i] = pb_utils.InferenceResponse(output_tensors=[out])
        return responses


def _failure(message: str) -> Any:
    return pb_utils.InferenceResponse(error=pb_utils.TritonError(message))

"""Triton Python-backend model `cancel`: marks request ids cancelled on the shared board."""

from __future__ import annotations

from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

from turntaker_models.cancel_board import CancelBoard
from turntaker_models.settings import ModelSettings


class TritonPythonModel:
    def initialize(self, args: dict[str, Any]) -> None:
        self.board = CancelBoard.open(ModelSettings.from_env().board_path)

    def execute(self, requests: list[Any]) -> list[Any]:
        responses = []
        for request in requests:
            ids = pb_utils.get_input_tensor_by_name(request, "REQUEST_ID").as_numpy().reshape(-1)
            try:
                names = [i.decode() if isinstance(i, bytes) else str(i) for i in ids]
                if not names or any(not n for n in names):
                    raise ValueError("REQUEST_ID must hold at least one non-empty id")
                times = np.array([self.board.cancel(n) for n in names], dtype=np.int64)
            except Exception as error:
                responses.append(
                    pb_utils.InferenceResponse(error=pb_utils.TritonError(f"cancel: {error}"))
                )
                continue
            out = pb_utils.Tensor("CANCELLED_AT_NS", times)
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses

    def finalize(self) -> None:
        self.board.close()

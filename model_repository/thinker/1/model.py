"""Triton Python-backend model `thinker`: Qwen3-Omni's Thinker, streamed token by token.

Decoupled: execute() hands each request to a stream thread (turntaker_models.omni.stages) and
returns at once; the thread sends a response per generated token and the final flag.
"""

from __future__ import annotations

from typing import Any

import triton_python_backend_utils as pb_utils

from turntaker_models.omni.stages import ThinkerStage
from turntaker_models.omni.wire import TritonReply
from turntaker_models.settings import ModelSettings

INPUTS = ("REQUEST_ID", "CONVERSATION", "AUDIO", "AUDIO_LENGTHS", "PARAMETERS")


class TritonPythonModel:
    def initialize(self, args: dict[str, Any]) -> None:
        self.stage = ThinkerStage(ModelSettings.from_env())
        loaded = self.stage.loaded
        tiny = " (RANDOM TINY weights)" if loaded.settings.omni_weights is None else ""
        pb_utils.Logger.log_info(f"thinker: {loaded.path}{tiny} loaded in {loaded.load_s:.2f} s")

    def execute(self, requests: list[Any]) -> None:
        for request in requests:
            tensors = {}
            for name in INPUTS:
                tensor = pb_utils.get_input_tensor_by_name(request, name)
                if tensor is not None:
                    tensors[name] = tensor.as_numpy()
            self.stage.submit(tensors, TritonReply(pb_utils, request))

    def finalize(self) -> None:
        self.stage.close()

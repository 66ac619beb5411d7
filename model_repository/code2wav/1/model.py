"""Triton Python-backend model `code2wav`: Qwen3-Omni's Code2Wav, streamed in windows.

Decoupled: execute() queues each codec frame on its stream's thread (per REQUEST_ID, in SEQ
order; turntaker_models.omni.audio_stages) and returns at once; a request gets an AUDIO_CHUNK
response only when a window is decoded.
"""

from __future__ import annotations

from typing import Any

import triton_python_backend_utils as pb_utils

from turntaker_models.omni.audio_stages import Code2WavStage
from turntaker_models.omni.wire import TritonReply
from turntaker_models.settings import ModelSettings

INPUTS = ("C_TEXT", "C_REQUEST_ID", "C_KIND", "C_SEQ", "C_CODES")


class TritonPythonModel:
    def initialize(self, args: dict[str, Any]) -> None:
        self.stage = Code2WavStage(ModelSettings.from_env())
        loaded = self.stage.loaded
        tiny = " (RANDOM TINY weights)" if loaded.settings.omni_weights is None else ""
        pb_utils.Logger.log_info(f"code2wav: {loaded.path}{tiny} loaded in {loaded.load_s:.2f} s")

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

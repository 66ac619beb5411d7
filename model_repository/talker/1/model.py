"""Triton Python-backend model `talker`: Qwen3-Omni's Talker, one codec frame per text token.

Decoupled: execute() queues each request on its stream's thread (per REQUEST_ID, in SEQ order;
turntaker_models.omni.audio_stages) and returns at once.
"""

from __future__ import annotations

from typing import Any

import triton_python_backend_utils as pb_utils

from turntaker_models.omni.audio_stages import TalkerStage
from turntaker_models.omni.wire import TritonReply
from turntaker_models.settings import ModelSettings

INPUTS = ("T_TEXT", "T_REQUEST_ID", "T_PARAMETERS", "T_KIND", "T_SEQ", "T_EMBEDS", "T_MM")


class TritonPythonModel:
    def initialize(self, args: dict[str, Any]) -> None:
        self.stage = TalkerStage(ModelSettings.from_env())
        loaded = self.stage.loaded
        tiny = " (RANDOM TINY weights)" if loaded.settings.omni_weights is None else ""
        pb_utils.Logger.log_info(f"talker: {loaded.path}{tiny} loaded in {loaded.load_s:.2f} s")

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

"""Triton Python-backend model `asr`: a thin adapter over turntaker_models.cascade.asr."""

from __future__ import annotations

from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

from turntaker_models.cascade.asr import Transcriber
from turntaker_models.cascade.whisper_assets import whisper_model_dir
from turntaker_models.contract import ContractError
from turntaker_models.settings import ModelSettings


class TritonPythonModel:
    def initialize(self, args: dict[str, Any]) -> None:
        settings = ModelSettings.from_env()
        self.transcriber = Transcriber(whisper_model_dir(settings.cache_dir), settings.threads)

    def execute(self, requests: list[Any]) -> list[Any]:
        return [self._one(request) for request in requests]

    def _one(self, request: Any) -> Any:
        try:
            audio = pb_utils.get_input_tensor_by_name(request, "AUDIO").as_numpy()
            lengths = pb_utils.get_input_tensor_by_name(request, "AUDIO_LENGTHS").as_numpy()
            flag = pb_utils.get_input_tensor_by_name(request, "PARTIAL")
            partial = flag is not None and bool(flag.as_numpy().reshape(-1)[:1].any())
            texts = self.transcriber.transcribe_all(audio, lengths, partial)
        except ContractError as error:
            return pb_utils.InferenceResponse(error=pb_utils.TritonError(f"asr: {error}"))
        except Exception as error:
            # Anything else is our bug, but the caller still gets an answer, never a hang.
            failure = pb_utils.TritonError(f"asr: {type(error).__name__}: {error}")
            return pb_utils.InferenceResponse(error=failure)
        out = pb_utils.Tensor("TEXT", np.array([t.encode() for t in texts], dtype=np.object_))
        return pb_utils.InferenceResponse(output_tensors=[out])

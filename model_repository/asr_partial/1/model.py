"""Triton Python-backend model `asr_partial`: a thin adapter over
turntaker_models.cascade.asr.partial_transcriber (Whisper tiny.en, every clip a partial)."""

from __future__ import annotations

from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

from turntaker_models.cascade.asr import partial_transcriber
from turntaker_models.contract import ContractError
from turntaker_models.settings import ModelSettings


class TritonPythonModel:
    def initialize(self, args: dict[str, Any]) -> None:
        self.transcriber = partial_transcriber(ModelSettings.from_env().threads)

    def execute(self, requests: list[Any]) -> list[Any]:
        return [self._one(request) for request in requests]

    def _one(self, request: Any) -> Any:
        try:
            audio = pb_utils.get_input_tensor_by_name(request, "AUDIO").as_numpy()
            lengths = pb_utils.get_input_tensor_by_name(request, "AUDIO_LENGTHS").as_numpy()
            texts = self.transcriber.transcribe_all(audio, lengths, partial=True)
        except ContractError as error:
            return pb_utils.InferenceResponse(error=pb_utils.TritonError(f"asr_partial: {error}"))
        except Exception as error:
            # Anything else is our bug, but the caller still gets an answer, never a hang.
            failure = pb_utils.TritonError(f"asr_partial: {type(error).__name__}: {error}")
            return pb_utils.InferenceResponse(error=failure)
        out = pb_utils.Tensor("TEXT", np.array([t.encode() for t in texts], dtype=np.object_))
        return pb_utils.InferenceResponse(output_tensors=[out])

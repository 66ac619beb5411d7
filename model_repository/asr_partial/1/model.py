"""Triton Python-backend model `asr_partial`: a thin adapter over
turntaker_models.cascade.asr.partial_transcriber (Whisper tiny.en, every clip a partial)."""

from __future__ import annotations

from typing import Any

import triton_python_backend_utils as pb_utils

from turntaker_models.cascade.asr import partial_transcriber
from turntaker_models.cascade.asr_adapter import answer
from turntaker_models.settings import ModelSettings


class TritonPythonModel:
    def initialize(self, args: dict[str, Any]) -> None:
        self.transcriber = partial_transcriber(ModelSettings.from_env().threads)

    def execute(self, requests: list[Any]) -> list[Any]:
        return [answer(pb_utils, r, self.transcriber, "asr_partial") for r in requests]

"""Triton Python-backend model `asr`: a thin adapter over turntaker_models.cascade.asr."""

from __future__ import annotations

from typing import Any

import triton_python_backend_utils as pb_utils

from turntaker_models.cascade.asr import Transcriber
from turntaker_models.cascade.asr_adapter import answer
from turntaker_models.cascade.whisper_assets import whisper_model_dir
from turntaker_models.settings import ModelSettings


class TritonPythonModel:
    def initialize(self, args: dict[str, Any]) -> None:
        settings = ModelSettings.from_env()
        self.transcriber = Transcriber(whisper_model_dir(settings.cache_dir), settings.threads)

    def execute(self, requests: list[Any]) -> list[Any]:
        return [answer(pb_utils, r, self.transcriber, "asr") for r in requests]

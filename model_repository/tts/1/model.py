"""Triton Python-backend model `tts`: Piper (joe) or flite speech, text sent with the chunk where
its audio ends (turntaker_models.cascade.tts), behind the shared decoupled adapter."""

from __future__ import annotations

import triton_python_backend_utils as pb_utils

from turntaker_models.cascade import tts
from turntaker_models.triton_adapter import decoupled_model

TritonPythonModel = decoupled_model(pb_utils, "tts", tts.make_service, tts.TtsService.INPUTS)

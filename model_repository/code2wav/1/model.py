"""Triton Python-backend model `code2wav`: Qwen3-Omni's Code2Wav, streamed in windows.

Decoupled: execute() queues each codec frame on its stream's thread (per REQUEST_ID, in SEQ
order; turntaker_models.omni.audio_stages) and returns at once; a request gets an AUDIO_CHUNK
response only when a window is decoded.
"""

from __future__ import annotations

import triton_python_backend_utils as pb_utils

from turntaker_models.omni.audio_stages import Code2WavStage
from turntaker_models.omni.triton_model import stage_service
from turntaker_models.triton_adapter import decoupled_model

TritonPythonModel = decoupled_model(
    pb_utils,
    "code2wav",
    stage_service("code2wav", Code2WavStage),
    ("C_TEXT", "C_TOOL_CALL", "C_END_REASON", "C_REQUEST_ID", "C_KIND", "C_SEQ", "C_CODES"),
)

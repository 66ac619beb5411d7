"""Triton Python-backend model `thinker`: Qwen3-Omni's Thinker, streamed token by token.

Decoupled: execute() hands each request to a stream thread (turntaker_models.omni.stages) and
returns at once; the thread sends a response per generated token and the final flag.
"""

from __future__ import annotations

import triton_python_backend_utils as pb_utils

from turntaker_models.omni.stages import ThinkerStage
from turntaker_models.omni.triton_model import stage_service
from turntaker_models.triton_adapter import decoupled_model

TritonPythonModel = decoupled_model(
    pb_utils,
    "thinker",
    stage_service("thinker", ThinkerStage),
    ("REQUEST_ID", "CONVERSATION", "AUDIO", "AUDIO_LENGTHS", "PARAMETERS"),
)

"""Triton Python-backend model `talker`: Qwen3-Omni's Talker, one codec frame per text token.

Decoupled: execute() queues each request on its stream's thread (per REQUEST_ID, in SEQ order;
turntaker_models.omni.audio_stages) and returns at once.
"""

from __future__ import annotations

import triton_python_backend_utils as pb_utils

from turntaker_models.omni.audio_stages import TalkerStage
from turntaker_models.omni.triton_model import stage_service
from turntaker_models.triton_adapter import decoupled_model

TritonPythonModel = decoupled_model(
    pb_utils,
    "talker",
    stage_service("talker", TalkerStage),
    (
        "T_TEXT",
        "T_TOOL_CALL",
        "T_END_REASON",
        "T_REQUEST_ID",
        "T_PARAMETERS",
        "T_KIND",
        "T_SEQ",
        "T_EMBEDS",
        "T_MM",
        "T_IDS",
        "T_IMAGE_GRIDS",
        "T_AUDIO_LENGTHS",
    ),
)

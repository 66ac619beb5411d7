"""Triton Python-backend model `llm`: SmolLM2's answer as text deltas and sentences
(turntaker_models.cascade.llm_service), behind the shared decoupled adapter."""

from __future__ import annotations

import triton_python_backend_utils as pb_utils

from turntaker_models.cascade import llm_service
from turntaker_models.triton_adapter import decoupled_model

TritonPythonModel = decoupled_model(pb_utils, "llm", llm_service.make_service, llm_service.INPUTS)

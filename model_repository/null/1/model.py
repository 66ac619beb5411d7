"""Triton Python-backend model `null`: the pipeline contract with no compute
(turntaker_models.null), behind the shared decoupled adapter."""

from __future__ import annotations

import triton_python_backend_utils as pb_utils

from turntaker_models import null
from turntaker_models.triton_adapter import decoupled_model

TritonPythonModel = decoupled_model(pb_utils, "null", null.make_service, null.NullService.INPUTS)

"""The Triton adapter of `asr` and `asr_partial`: one request, one answer, never a hang.

`pb_utils` (triton_python_backend_utils) only exists inside a stub process, so it is passed
in, never imported here (as turntaker_models/triton_adapter.py does for the decoupled models).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from turntaker_models.cascade.asr import Transcriber
from turntaker_models.contract import ContractError


def answer(pb_utils: Any, request: Any, transcriber: Transcriber, model: str) -> Any:
    """TEXT for one request's AUDIO and AUDIO_LENGTHS (PARTIAL, where sent, asks for the fast
    decode); a contract fault or a bug is the request's error, named after `model`."""
    try:
        audio = pb_utils.get_input_tensor_by_name(request, "AUDIO").as_numpy()
        lengths = pb_utils.get_input_tensor_by_name(request, "AUDIO_LENGTHS").as_numpy()
        flag = pb_utils.get_input_tensor_by_name(request, "PARTIAL")
        partial = flag is not None and bool(flag.as_numpy().reshape(-1)[:1].any())
        texts = transcriber.transcribe_all(audio, lengths, partial)
    except ContractError as error:
        return pb_utils.InferenceResponse(error=pb_utils.TritonError(f"{model}: {error}"))
    except Exception as error:
        # Anything else is our bug, but the caller still gets an answer, never a hang.
        failure = pb_utils.TritonError(f"{model}: {type(error).__name__}: {error}")
        return pb_utils.InferenceResponse(error=failure)
    out = pb_utils.Tensor("TEXT", np.array([t.encode() for t in texts], dtype=np.object_))
    return pb_utils.InferenceResponse(output_tensors=[out])

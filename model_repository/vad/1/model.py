"""Triton Python-backend model `vad`: Silero VAD on onnxruntime, one ONNX run per batch."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils

SAMPLE_RATE = 16000
CHUNK = 512
CONTEXT = 64


def _onnx_path() -> Path:
    # find_spec, not import: `import silero_vad` imports torch, which costs seconds and 250 MiB.
    spec = importlib.util.find_spec("silero_vad")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("silero-vad is not installed in the Python that runs this stub")
    return Path(next(iter(spec.submodule_search_locations))) / "data" / "silero_vad.onnx"


class TritonPythonModel:
    def initialize(self, args: dict[str, Any]) -> None:
        options = ort.SessionOptions()
        # One thread: results stay bit-identical whatever the batch size, and the server's
        # other models keep the remaining cores.
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(
            str(_onnx_path()), sess_options=options, providers=["CPUExecutionProvider"]
        )
        self.sr = np.array(SAMPLE_RATE, dtype=np.int64)

    def execute(self, requests: list[Any]) -> list[Any]:
        audio, state, context, counts = [], [], [], []
        try:
            for request in requests:
                a = pb_utils.get_input_tensor_by_name(request, "AUDIO").as_numpy()
                s = pb_utils.get_input_tensor_by_name(request, "STATE").as_numpy()
                c = pb_utils.get_input_tensor_by_name(request, "CONTEXT").as_numpy()
                audio.append(a)
                state.append(s)
                context.append(c)
                counts.append(a.shape[0])
            # The Python backend hands a dynamic batch over as separate requests: stack them so
            # the whole batch is one ONNX run.
            x = np.concatenate([np.concatenate(context), np.concatenate(audio)], axis=1)
            # ONNX wants the state as [2, batch, 128]; requests carry it batch-first.
            h = np.ascontiguousarray(np.concatenate(state).transpose(1, 0, 2))
            prob, h_out = self.session.run(None, {"input": x, "state": h, "sr": self.sr})
        except Exception as error:
            failure = pb_utils.TritonError(f"vad: {error}")
            return [pb_utils.InferenceResponse(error=failure) for _ in requests]
        h_out = h_out.transpose(1, 0, 2)
        ctx_out = x[:, -CONTEXT:]
        responses = []
        start = 0
        for n in counts:
            part = slice(start, start + n)
            start += n
            outputs = [
                pb_utils.Tensor("SPEECH_PROB", np.ascontiguousarray(prob[part], np.float32)),
                pb_utils.Tensor("STATE_OUT", np.ascontiguousarray(h_out[part], np.float32)),
                pb_utils.Tensor("CONTEXT_OUT", np.ascontiguousarray(ctx_out[part], np.float32)),
            ]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses

"""Triton Python-backend model `vad`: Silero VAD on onnxruntime, K chunks per row.

A row carries K >= 1 consecutive 512-sample chunks of one session: the ONNX session runs K
times over the whole batch (step k for every row at once), carrying each row's state and
context from step to step, so a session's 100 ms append costs one row in one request instead
of one request per chunk.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import onnxruntime as ort
import triton_python_backend_utils as pb_utils

SAMPLE_RATE = 16000
CHUNK = 512
CONTEXT = 64

Samples = npt.NDArray[np.float32]


def _onnx_path() -> Path:
    # find_spec, not import: `import silero_vad` imports torch, which costs seconds and 250 MiB.
    spec = importlib.util.find_spec("silero_vad")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("silero-vad is not installed in the Python that runs this stub")
    return Path(next(iter(spec.submodule_search_locations))) / "data" / "silero_vad.onnx"


class _Request:
    """One request's inputs; `error` set when they are unusable (the request alone fails)."""

    def __init__(self, request: Any) -> None:
        self.audio: Samples = pb_utils.get_input_tensor_by_name(request, "AUDIO").as_numpy()
        self.state: Samples = pb_utils.get_input_tensor_by_name(request, "STATE").as_numpy()
        self.context: Samples = pb_utils.get_input_tensor_by_name(request, "CONTEXT").as_numpy()
        length = self.audio.shape[1]
        self.error: str | None = None
        if length == 0 or length % CHUNK:
            self.error = (
                f"vad: AUDIO rows hold {length} samples, not a whole number of {CHUNK}-sample "
                f"chunks (K consecutive chunks of one session: K * {CHUNK} samples, K >= 1)"
            )
        self.chunks = length // CHUNK
        self.rows = self.audio.shape[0]


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
        responses: list[Any] = [None] * len(requests)
        # Triton's dynamic batcher only merges requests of one shape, but a direct caller's
        # batch could mix K: one ONNX pass per K keeps every row's steps aligned.
        groups: dict[int, list[tuple[int, _Request]]] = {}
        for i, request in enumerate(requests):
            try:
                parsed = _Request(request)
            except Exception as error:
                responses[i] = _failure(f"vad: {error}")
                continue
            if parsed.error is not None:
                responses[i] = _failure(parsed.error)
            else:
                groups.setdefault(parsed.chunks, []).append((i, parsed))
        for chunks, group in groups.items():
            try:
                outputs = self._run(chunks, [parsed for _, parsed in group])
            except Exception as error:
                for i, _ in group:
                    responses[i] = _failure(f"vad: {error}")
                continue
            for (i, _), tensors in zip(group, outputs, strict=True):
                responses[i] = pb_utils.InferenceResponse(output_tensors=tensors)
        return responses

    def _run(self, chunks: int, group: list[_Request]) -> list[list[Any]]:
        # The Python backend hands a dynamic batch over as separate requests: stack them so
        # each step is one ONNX run for the whole batch.
        audio = np.concatenate([r.audio for r in group]).reshape(-1, chunks, CHUNK)
        context = np.concatenate([r.context for r in group])
        # ONNX wants the state as [2, batch, 128]; requests carry it batch-first.
        h = np.ascontiguousarray(np.concatenate([r.state for r in group]).transpose(1, 0, 2))
        probs = np.empty((audio.shape[0], chunks), np.float32)
        for k in range(chunks):
            x = np.concatenate([context, audio[:, k]], axis=1)
            prob, h = self.session.run(None, {"input": x, "state": h, "sr": self.sr})
            probs[:, k] = np.asarray(prob, np.float32).reshape(-1)
            context = x[:, -CONTEXT:]
        h_out = h.transpose(1, 0, 2)
        outputs = []
        start = 0
        for r in group:
            part = slice(start, start + r.rows)
            start += r.rows
            outputs.append(
                [
                    pb_utils.Tensor("SPEECH_PROB", np.ascontiguousarray(probs[part])),
                    pb_utils.Tensor("STATE_OUT", np.ascontiguousarray(h_out[part], np.float32)),
                    pb_utils.Tensor("CONTEXT_OUT", np.ascontiguousarray(context[part], np.float32)),
                ]
            )
        return outputs


def _failure(message: str) -> Any:
    return pb_utils.InferenceResponse(error=pb_utils.TritonError(message))

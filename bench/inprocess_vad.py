"""One silero-vad ONNX instance per session, run inline in the server's event loop.

This is what peer servers do; the load benchmark plugs it into the realtime server in place of
the batched Triton `vad` (orchestrator/service/backends/vad_batcher.py) to compare the two at the
same N. Same
ONNX file, one ONNX thread, the same 64-sample context the Triton model keeps.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnxruntime as ort

CHUNK = 512
CONTEXT = 64
Samples = npt.NDArray[np.float32]


def silero_onnx_path() -> Path:
    spec = importlib.util.find_spec("silero_vad")
    assert spec is not None and spec.submodule_search_locations
    return Path(next(iter(spec.submodule_search_locations))) / "data" / "silero_vad.onnx"


@dataclass
class SileroStream:
    model: ort.InferenceSession
    state: Samples = field(default_factory=lambda: np.zeros((2, 1, 128), np.float32))
    context: Samples = field(default_factory=lambda: np.zeros((1, CONTEXT), np.float32))


class InProcessVad:
    """`VadService` with one ONNX session per session's stream, computed on the calling thread
    (blocking the event loop for the ~0.1 ms a chunk costs, as inline VAD does)."""

    def __init__(self) -> None:
        self._path = str(silero_onnx_path())
        self._options = ort.SessionOptions()
        self._options.intra_op_num_threads = 1
        self._options.inter_op_num_threads = 1
        self._rate = np.array(16000, np.int64)

    def open_stream(self) -> SileroStream:
        model = ort.InferenceSession(self._path, self._options, providers=["CPUExecutionProvider"])
        return SileroStream(model)

    async def probability(self, stream: SileroStream, chunk: npt.ArrayLike) -> float:
        samples = np.asarray(chunk, np.float32).reshape(1, CHUNK)
        x = np.concatenate([stream.context, samples], axis=1)
        out, stream.state = stream.model.run(
            None, {"input": x, "state": stream.state, "sr": self._rate}
        )
        stream.context = x[:, -CONTEXT:]
        return float(np.asarray(out).reshape(-1)[0])

    async def probabilities(
        self, stream: SileroStream, chunks: Sequence[npt.ArrayLike]
    ) -> list[float]:
        return [await self.probability(stream, chunk) for chunk in chunks]

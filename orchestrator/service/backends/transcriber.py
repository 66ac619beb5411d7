"""Input audio transcription through the Triton `asr` model (Whisper-base)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import tritonclient.grpc as grpcclient

from orchestrator.service.backends.endpoints import EndpointPool
from orchestrator.triton.trio_bridge import open_unary


class TritonTranscriber:
    """`timeout_s` is the gRPC deadline of one transcription: a hung endpoint fails it (the
    client gets `transcription.failed`) rather than hold the turn's transcript forever."""

    def __init__(self, pool: EndpointPool, timeout_s: float = 60.0) -> None:
        self._pool = pool
        self._timeout_s = timeout_s

    async def transcribe(self, audio16k: npt.NDArray[np.float32], partial: bool = False) -> str:
        """`partial`: the asr model's fast short-window decode (overlap decisions)."""
        endpoint = self._pool.choose()
        audio = np.ascontiguousarray(audio16k, np.float32).reshape(-1)
        samples = grpcclient.InferInput("AUDIO", [audio.shape[0]], "FP32")
        samples.set_data_from_numpy(audio)
        lengths = grpcclient.InferInput("AUDIO_LENGTHS", [1], "INT32")
        lengths.set_data_from_numpy(np.array([audio.shape[0]], np.int32))
        inputs = [samples, lengths]
        if partial:
            flag = grpcclient.InferInput("PARTIAL", [1], "BOOL")
            flag.set_data_from_numpy(np.array([True]))
            inputs.append(flag)
        async with open_unary(endpoint.url, timeout_s=self._timeout_s) as unary:
            result = await unary.infer("asr", inputs)
        text = result.as_numpy("TEXT")
        if text is None or text.size == 0:
            return ""
        value = text.reshape(-1)[0]
        return value.decode() if isinstance(value, bytes) else str(value)

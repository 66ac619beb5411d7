"""Input audio transcription through the Triton `asr` model (Whisper-base).

Partials (overlap decisions) go to `asr_partial` (Whisper tiny.en in an instance of its own,
so they never queue behind turn transcripts) on an endpoint whose last health check found it
ready, else to `asr` with PARTIAL set (a server without the model: an older image, a
repository or --triton-url that left it out).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import tritonclient.grpc as grpcclient

from orchestrator.service.backends.endpoints import EndpointPool
from orchestrator.triton.trio_bridge import open_unary

MODEL = "asr"
PARTIAL_MODEL = "asr_partial"


class TritonTranscriber:
    """`timeout_s` is the gRPC deadline of one transcription: a hung endpoint fails it (the
    client gets `transcription.failed`) rather than hold the turn's transcript forever."""

    def __init__(self, pool: EndpointPool, timeout_s: float = 60.0) -> None:
        self._pool = pool
        self._timeout_s = timeout_s

    async def transcribe(self, audio16k: npt.NDArray[np.float32], partial: bool = False) -> str:
        """`partial`: the fast short-window decode (overlap decisions), on `asr_partial` where
        the endpoint has it, else on `asr`."""
        endpoint = self._pool.choose()
        model = PARTIAL_MODEL if partial and PARTIAL_MODEL in endpoint.optional else MODEL
        audio = np.ascontiguousarray(audio16k, np.float32).reshape(-1)
        samples = grpcclient.InferInput("AUDIO", [audio.shape[0]], "FP32")
        samples.set_data_from_numpy(audio)
        lengths = grpcclient.InferInput("AUDIO_LENGTHS", [1], "INT32")
        lengths.set_data_from_numpy(np.array([audio.shape[0]], np.int32))
        inputs = [samples, lengths]
        if partial and model == MODEL:
            flag = grpcclient.InferInput("PARTIAL", [1], "BOOL")
            flag.set_data_from_numpy(np.array([True]))
            inputs.append(flag)
        async with open_unary(endpoint.url, timeout_s=self._timeout_s) as unary:
            result = await unary.infer(model, inputs)
        text = result.as_numpy("TEXT")
        if text is None or text.size == 0:
            return ""
        value = text.reshape(-1)[0]
        return value.decode() if isinstance(value, bytes) else str(value)

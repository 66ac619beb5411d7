"""Drives the `vad` model over gRPC the way a session would: chunk by chunk, state carried."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import tritonclient.grpc as grpcclient

CHUNK = 512
CONTEXT = 64
SAMPLE_RATE = 16000
CHUNK_S = CHUNK / SAMPLE_RATE

Audio = npt.NDArray[np.float32]


def _input(name: str, value: Audio) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput(name, list(value.shape), "FP32")
    tensor.set_data_from_numpy(value)
    return tensor


def speech_probabilities(client: grpcclient.InferenceServerClient, audio: Audio) -> Audio:
    """One probability per whole 512-sample chunk of `audio`, one request per chunk."""
    state = np.zeros((1, 2, 128), np.float32)
    context = np.zeros((1, CONTEXT), np.float32)
    names = ("SPEECH_PROB", "STATE_OUT", "CONTEXT_OUT")
    outputs = [grpcclient.InferRequestedOutput(n) for n in names]
    probs = []
    for start in range(0, len(audio) - CHUNK + 1, CHUNK):
        chunk = np.ascontiguousarray(audio[None, start : start + CHUNK], np.float32)
        result = client.infer(
            "vad",
            [_input("AUDIO", chunk), _input("STATE", state), _input("CONTEXT", context)],
            outputs=outputs,
        )
        probs.append(float(result.as_numpy("SPEECH_PROB")[0, 0]))
        state = result.as_numpy("STATE_OUT")
        context = result.as_numpy("CONTEXT_OUT")
    return np.asarray(probs, np.float32)


def speech_bounds(probs: Audio, threshold: float = 0.5) -> tuple[float, float] | None:
    """Start of the first and end of the last chunk at or above `threshold`, in seconds."""
    speech = np.flatnonzero(probs >= threshold)
    if speech.size == 0:
        return None
    return float(speech[0] * CHUNK_S), float((speech[-1] + 1) * CHUNK_S)

"""The `vad` model on a real tritonserver: readiness, speech bounds, noise, batching."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from bench import speech
from orchestrator.triton import TritonServer
from tests.triton.vad_client import (
    CHUNK,
    CONTEXT,
    SAMPLE_RATE,
    Audio,
    speech_bounds,
    speech_probabilities,
)

SENTENCE = "Turn taking needs to know exactly when the other person has finished speaking."
PAD_S = 1.0
TOLERANCE_S = 0.1


@pytest.fixture
def client(triton_server: TritonServer) -> Iterator[grpcclient.InferenceServerClient]:
    with grpcclient.InferenceServerClient(triton_server.grpc_url) as c:
        yield c


def flite_speech(tmp_path: Path, text: str) -> Audio:
    """flite's default voice (kal) at 16 kHz (`bench.speech`; `tmp_path` is no longer needed)."""
    return speech.flite(text, "kal", SAMPLE_RATE)


def energy_bounds(audio: Audio, frame_s: float = 0.01, rel: float = 0.05) -> tuple[float, float]:
    """Where the speech really is: first and last 10 ms frame above 5 % of the loudest one."""
    n = int(SAMPLE_RATE * frame_s)
    frames = audio[: len(audio) // n * n].reshape(-1, n)
    rms = np.sqrt((frames.astype(np.float64) ** 2).mean(axis=1))
    active = np.flatnonzero(rms >= rel * rms.max())
    return float(active[0] * frame_s), float((active[-1] + 1) * frame_s)


def test_server_and_vad_ready(triton_server: TritonServer) -> None:
    assert triton_server.running()
    assert triton_server.startup_s is not None and 0 < triton_server.startup_s < 120
    states = {m["name"]: m.get("state") for m in triton_server.models()}
    assert states.get("vad") == "READY", states
    with grpcclient.InferenceServerClient(triton_server.grpc_url) as c:
        assert c.is_server_ready() and c.is_model_ready("vad")


def test_vad_finds_flite_speech(client: grpcclient.InferenceServerClient, tmp_path: Path) -> None:
    speech = flite_speech(tmp_path, SENTENCE)
    pad = np.zeros(int(PAD_S * SAMPLE_RATE), np.float32)
    audio = np.concatenate([pad, speech, pad])
    true_start, true_end = (PAD_S + t for t in energy_bounds(speech))
    bounds = speech_bounds(speech_probabilities(client, audio))
    assert bounds is not None, "no speech found"
    start, end = bounds
    assert abs(start - true_start) <= TOLERANCE_S, (start, true_start)
    assert abs(end - true_end) <= TOLERANCE_S, (end, true_end)


def test_vad_ignores_white_noise(client: grpcclient.InferenceServerClient) -> None:
    rng = np.random.default_rng(7)
    noise = (0.1 * rng.standard_normal(3 * SAMPLE_RATE)).astype(np.float32)
    probs = speech_probabilities(client, noise)
    assert speech_bounds(probs) is None, f"max speech probability {probs.max():.3f}"


def _batch_counts(client: grpcclient.InferenceServerClient) -> dict[int, int]:
    stats = client.get_inference_statistics("vad", as_json=True)
    batches = stats["model_stats"][0].get("batch_stats", [])
    return {int(b["batch_size"]): int(b["compute_infer"].get("count", 0)) for b in batches}


def test_vad_batched_equals_alone(triton_server: TritonServer, tmp_path: Path) -> None:
    rng = np.random.default_rng(11)
    speech = flite_speech(tmp_path, "Hello there, how are you today?")
    sessions: list[Audio] = []
    for i in range(8):
        gain = 0.5 + 0.1 * i
        noise = (0.01 * rng.standard_normal(len(speech))).astype(np.float32)
        sessions.append(np.roll(speech, 1600 * i) * gain + noise)

    def run(audio: Audio) -> Audio:
        with grpcclient.InferenceServerClient(triton_server.grpc_url) as c:
            return speech_probabilities(c, audio)

    alone = [run(audio) for audio in sessions]
    with grpcclient.InferenceServerClient(triton_server.grpc_url) as c:
        before = _batch_counts(c)
        with ThreadPoolExecutor(max_workers=len(sessions)) as pool:
            batched = list(pool.map(run, sessions))
        after = _batch_counts(c)
    multi = sum(n - before.get(size, 0) for size, n in after.items() if size > 1)
    assert multi > 0, f"dynamic batching never formed a batch larger than 1: {after}"
    for i, (a, b) in enumerate(zip(alone, batched, strict=True)):
        np.testing.assert_array_equal(a, b, err_msg=f"session {i}")


# K chunks per row -------------------------------------------------------------------------
_OUTPUTS = ("SPEECH_PROB", "STATE_OUT", "CONTEXT_OUT")


def _infer(
    client: grpcclient.InferenceServerClient, audio: Audio, state: Audio, context: Audio
) -> tuple[Audio, Audio, Audio]:
    """One request: rows of `audio` (rows, K * 512) with their states and contexts."""
    inputs = []
    for name, value in (("AUDIO", audio), ("STATE", state), ("CONTEXT", context)):
        tensor = grpcclient.InferInput(name, list(value.shape), "FP32")
        tensor.set_data_from_numpy(np.ascontiguousarray(value, np.float32))
        inputs.append(tensor)
    outputs = [grpcclient.InferRequestedOutput(n) for n in _OUTPUTS]
    result = client.infer("vad", inputs, outputs=outputs)
    probs, states, contexts = (result.as_numpy(n) for n in _OUTPUTS)
    assert probs is not None and states is not None and contexts is not None
    return probs, states, contexts


def _fresh(rows: int = 1) -> tuple[Audio, Audio]:
    return np.zeros((rows, 2, 128), np.float32), np.zeros((rows, CONTEXT), np.float32)


def _sequential(
    client: grpcclient.InferenceServerClient, audio: Audio, k: int
) -> tuple[Audio, Audio, Audio]:
    """`audio` (whole chunks) as one session: rows of `k` chunks (the last row may be shorter),
    one request each; all the probabilities and the final state and context."""
    state, context = _fresh()
    probs = []
    for start in range(0, len(audio), k * CHUNK):
        row = audio[None, start : start + k * CHUNK]
        p, state, context = _infer(client, row, state, context)
        assert p.shape == (1, row.shape[1] // CHUNK)
        probs.append(p[0])
    return np.concatenate(probs), state, context


def _speech_with_noise(tmp_path: Path, chunks: int, seed: int) -> Audio:
    speech = flite_speech(tmp_path, "Hello there, how are you today?")
    rng = np.random.default_rng(seed)
    audio = (0.01 * rng.standard_normal(chunks * CHUNK)).astype(np.float32)
    n = min(len(speech), len(audio) - 4000)
    audio[4000 : 4000 + n] += speech[:n] * 0.6
    return audio


def test_k_chunks_in_one_row_equal_k_single_chunk_requests(
    client: grpcclient.InferenceServerClient, tmp_path: Path
) -> None:
    audio = _speech_with_noise(tmp_path, 60, seed=1)
    one, state1, context1 = _sequential(client, audio, 1)
    assert one.shape == (60,) and one.max() > 0.5, "the reference found no speech"
    # 3 and 4: a 100 ms append; 7 leaves a short last row; 60: the whole audio in one row.
    for k in (3, 4, 7, 60):
        probs, state, context = _sequential(client, audio, k)
        np.testing.assert_allclose(probs, one, rtol=0, atol=1e-5, err_msg=f"K={k}")
        np.testing.assert_allclose(state, state1, rtol=0, atol=1e-5, err_msg=f"K={k}")
        np.testing.assert_allclose(context, context1, rtol=0, atol=1e-5, err_msg=f"K={k}")


def test_rows_of_many_sessions_in_one_request(
    client: grpcclient.InferenceServerClient, tmp_path: Path
) -> None:
    """Several sessions mid-stream (each its own state) share a K=4 request; each row's answer
    is what that session alone gets, chunk by chunk."""
    k, sessions = 4, 5
    audios = [_speech_with_noise(tmp_path, 3 * k, seed=10 + s) for s in range(sessions)]
    # Each session has heard a different prefix: one row each, alone.
    states, contexts = [], []
    for s, audio in enumerate(audios):
        state, context = _fresh()
        for _ in range(s):
            _, state, context = _infer(client, audio[None, : k * CHUNK], state, context)
        states.append(state[0])
        contexts.append(context[0])
    rows = np.stack([audio[k * CHUNK : 2 * k * CHUNK] for audio in audios])
    probs, state_out, context_out = _infer(client, rows, np.stack(states), np.stack(contexts))
    assert probs.shape == (sessions, k)
    for s in range(sessions):
        state, context = states[s][None], contexts[s][None]
        for i in range(k):
            chunk = rows[None, s, i * CHUNK : (i + 1) * CHUNK]
            p, state, context = _infer(client, chunk, state, context)
            np.testing.assert_allclose(probs[s, i], p[0, 0], rtol=0, atol=1e-5)
        np.testing.assert_allclose(state_out[s], state[0], rtol=0, atol=1e-5)
        np.testing.assert_allclose(context_out[s], context[0], rtol=0, atol=1e-5)


def test_requests_of_different_k_at_once(triton_server: TritonServer, tmp_path: Path) -> None:
    audios = [_speech_with_noise(tmp_path, 24, seed=20 + s) for s in range(6)]
    ks = [1, 2, 3, 4, 6, 8]

    def run(s: int, k: int) -> tuple[Audio, Audio, Audio]:
        with grpcclient.InferenceServerClient(triton_server.grpc_url) as c:
            return _sequential(c, audios[s], k)

    alone = [run(s, 1) for s in range(len(audios))]
    with ThreadPoolExecutor(max_workers=len(audios)) as pool:
        mixed = list(pool.map(run, range(len(audios)), ks))
    for s, (want, got) in enumerate(zip(alone, mixed, strict=True)):
        for a, b in zip(want, got, strict=True):
            np.testing.assert_allclose(b, a, rtol=0, atol=1e-5, err_msg=f"K={ks[s]}")


@pytest.mark.parametrize("samples", [0, 700, CHUNK + 1, 3 * CHUNK - 64])
def test_a_length_that_is_not_whole_chunks_is_refused(
    client: grpcclient.InferenceServerClient, samples: int
) -> None:
    state, context = _fresh()
    with pytest.raises(InferenceServerException, match=f"{samples} samples.*{CHUNK}"):
        _infer(client, np.zeros((1, samples), np.float32), state, context)
    # The model goes on answering.
    probs, _, _ = _infer(client, np.zeros((1, 2 * CHUNK), np.float32), state, context)
    assert probs.shape == (1, 2)

"""The `vad` model on a real tritonserver: readiness, speech bounds, noise, batching."""

from __future__ import annotations

import shutil
import subprocess
import wave
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from scipy.signal import resample_poly

from orchestrator.triton import TritonServer
from tests.triton.vad_client import SAMPLE_RATE, Audio, speech_bounds, speech_probabilities

SENTENCE = "Turn taking needs to know exactly when the other person has finished speaking."
PAD_S = 1.0
TOLERANCE_S = 0.1


@pytest.fixture
def client(triton_server: TritonServer) -> Iterator[grpcclient.InferenceServerClient]:
    with grpcclient.InferenceServerClient(triton_server.grpc_url) as c:
        yield c


def flite_speech(tmp_path: Path, text: str) -> Audio:
    """Speech from flite as 16 kHz float32; flite writes 8 kHz 16-bit mono."""
    flite = shutil.which("flite")
    assert flite, "flite is not installed: `make test` installs it with apt (APT_PACKAGES)"
    path = tmp_path / "speech.wav"
    subprocess.run([flite, "-t", text, "-o", str(path)], check=True)
    with wave.open(str(path)) as wav:
        assert (wav.getnchannels(), wav.getsampwidth()) == (1, 2), "expected 16-bit mono"
        rate = wav.getframerate()
        pcm = np.frombuffer(wav.readframes(wav.getnframes()), np.int16)
    audio = pcm.astype(np.float32) / 32768.0
    if rate != SAMPLE_RATE:
        audio = resample_poly(audio, SAMPLE_RATE, rate).astype(np.float32)
    return audio


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

"""The `asr_partial` model (Whisper tiny.en, overlap partials) on a real tritonserver, and
TritonTranscriber routing partials to it: words of a human voice, "" for a cough, bad lengths
refused, and a partial that never touches `asr`."""

from __future__ import annotations

import re
from collections.abc import Iterator

import numpy as np
import numpy.typing as npt
import pytest
import trio
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from bench.human_speech import asterisk
from bench.partial_asr import HEDGEWARS, ogg
from orchestrator.service.backends.endpoints import EndpointPool
from orchestrator.service.backends.transcriber import TritonTranscriber
from orchestrator.service.metrics import Metrics
from orchestrator.triton import TritonServer
from tests.triton.tts_client import ASR_RATE, raw_asr_inputs


@pytest.fixture
def client(triton_server: TritonServer) -> Iterator[grpcclient.InferenceServerClient]:
    with grpcclient.InferenceServerClient(triton_server.grpc_url) as c:
        yield c


def _partial(
    client: grpcclient.InferenceServerClient, *clips: npt.NDArray[np.float32]
) -> list[str]:
    audio = np.concatenate(clips) if clips else np.zeros(0, np.float32)
    lengths = np.array([c.shape[0] for c in clips], np.int32)
    result = client.infer("asr_partial", raw_asr_inputs(audio.astype(np.float32), lengths))
    return [t.decode() for t in result.as_numpy("TEXT").reshape(-1)]


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z']+", text.lower())


def _count(client: grpcclient.InferenceServerClient, model: str) -> int:
    stats = client.get_inference_statistics(model_name=model, as_json=True)
    return int(stats["model_stats"][0].get("inference_count", 0))


def test_asr_partial_ready(triton_server: TritonServer) -> None:
    states = {m["name"]: m.get("state") for m in triton_server.models()}
    assert states.get("asr_partial") == "READY", states


def test_asr_partial_hears_words_and_abstains_on_a_cough(
    client: grpcclient.InferenceServerClient,
) -> None:
    thanks = asterisk("auth-thankyou", ASR_RATE).audio
    cough = HEDGEWARS / "Default_ru/PoisonCough.ogg"
    assert cough.is_file(), f"{cough} is missing (apt-get install hedgewars-data)"
    texts = _partial(client, thanks, ogg(cough), np.zeros(40, np.float32))
    assert [_words(t) for t in texts] == [["thank", "you"], [], []], texts
    assert _partial(client) == []


def test_asr_partial_rejects_lengths_that_do_not_match_the_audio(
    client: grpcclient.InferenceServerClient,
) -> None:
    inputs = raw_asr_inputs(np.zeros(100, np.float32), np.array([50], np.int32))
    message = "asr_partial: AUDIO has 100 samples but AUDIO_LENGTHS add up to 50"
    with pytest.raises(InferenceServerException, match=re.escape(message)):
        client.infer("asr_partial", inputs)
    assert _partial(client, np.zeros(10, np.float32)) == [""]


async def test_transcriber_sends_partials_to_asr_partial(triton_server: TritonServer) -> None:
    pool = EndpointPool((triton_server.grpc_url,), ("asr",), Metrics(), optional=("asr_partial",))
    await pool.check_all(timeout_s=5.0)
    assert pool.any_healthy and pool.endpoints[0].optional == {"asr_partial"}
    stt = TritonTranscriber(pool)
    thanks = asterisk("auth-thankyou", ASR_RATE).audio
    with grpcclient.InferenceServerClient(triton_server.grpc_url) as client:
        before = _count(client, "asr"), _count(client, "asr_partial")
        with trio.fail_after(30):
            text = await stt.transcribe(thanks, partial=True)
        after = _count(client, "asr"), _count(client, "asr_partial")
    assert _words(text) == ["thank", "you"]
    assert after == (before[0], before[1] + 1), (before, after)
    # An endpoint without it (an older server): the partial goes to `asr` with PARTIAL.
    pool.endpoints[0].optional = frozenset()
    with grpcclient.InferenceServerClient(triton_server.grpc_url) as client:
        with trio.fail_after(30):
            text = await stt.transcribe(thanks, partial=True)
        assert (_count(client, "asr"), _count(client, "asr_partial")) == (
            after[0] + 1,
            after[1],
        )
    assert _words(text) == ["thank", "you"]

"""A turn keeps its audio format: after a pcmu -> pcm switch mid-session, the earlier pcmu turn
still reaches the pipeline and the transcriber as speech (Whisper, the real `asr` model on the
session's tritonserver, hears its words).

The core decides what each gets (the `Transcribe` action's samples, the `StartBackend`
request's audio parts); `pipeline_request` is what the response actor sends to Triton.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from bench.speech import flite
from orchestrator.protocol import client as ce
from orchestrator.protocol.session_config import PCM16, PCMU, SessionPatch, Transcription
from orchestrator.service.backends.requests import pipeline_request
from orchestrator.session.actions import StartBackend, Transcribe
from orchestrator.session.audio import ulaw_encode
from orchestrator.session.core import CoreConfig, SessionCore, Step
from orchestrator.triton import TritonServer
from tests.triton.tts_client import transcribe, word_error_rate

FIRST = "Please book a table for two near the window."
SECOND = "The weather is lovely today."


@pytest.fixture
def client(triton_server: TritonServer) -> Iterator[grpcclient.InferenceServerClient]:
    with grpcclient.InferenceServerClient(triton_server.grpc_url) as c:
        yield c


def _of(step: Step, cls: type) -> list:  # type: ignore[type-arg]
    return [a for a in step.actions if isinstance(a, cls)]


def test_a_pcmu_turn_is_still_speech_after_the_session_switches_to_pcm(
    client: grpcclient.InferenceServerClient,
) -> None:
    core = SessionCore("fmt", CoreConfig(transcriber=True))
    core.open()
    core.handle(ce.SessionUpdate(session=SessionPatch(turn_detection=None, input_format=PCMU)))
    core.handle(ce.SessionUpdate(session=SessionPatch(transcription=Transcription())))
    pcm8k = (np.clip(flite(FIRST, rate=8000), -1, 1) * 32767).astype(np.int16)
    core.handle(ce.InputAudioBufferAppend(audio=ulaw_encode(pcm8k)))
    [first_job] = _of(core.handle(ce.InputAudioBufferCommit()), Transcribe)
    core.handle(ce.SessionUpdate(session=SessionPatch(input_format=PCM16)))
    second = (np.clip(flite(SECOND), -1, 1) * 32767).astype("<i2").tobytes()
    core.handle(ce.InputAudioBufferAppend(audio=second))
    [second_job] = _of(core.handle(ce.InputAudioBufferCommit()), Transcribe)
    [start] = _of(core.handle(ce.ResponseCreate()), StartBackend)

    request = pipeline_request("fmt:1", start.request, default_max_tokens=8)
    segments = [s for s in request.audio if s.size]
    assert len(segments) == 2
    heard = transcribe(client, [*segments, first_job.audio16k, second_job.audio16k])
    for text, said in zip(heard, [FIRST, SECOND, FIRST, SECOND], strict=True):
        assert word_error_rate(said, text) <= 0.25, (said, text)

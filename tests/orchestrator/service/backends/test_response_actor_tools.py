"""The response actor posts a pipeline chunk's function call piece as `BackendToolCall`, after
the chunk's text and audio and after any text held for audio, and the stream's end reason
with its `BackendDone` (orchestrator/service/response_actor.py), with a stand-in stream (no
Triton)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import numpy as np
import pytest

from orchestrator.protocol.tools import FunctionTool
from orchestrator.service.backends import response_actor
from orchestrator.service.backends.endpoints import EndpointPool
from orchestrator.service.backends.response_actor import ResponseActor, ResponseServices
from orchestrator.service.metrics import Metrics
from orchestrator.session.actions import InferenceRequest, StartBackend
from orchestrator.session.inputs import (
    BackendAudio,
    BackendDone,
    BackendEvent,
    BackendText,
    BackendToolCall,
)
from orchestrator.triton.pipeline_client import PipelineChunk
from turntaker_models.contract import EndReason, ToolCallDelta

TOOL = FunctionTool(name="get_weather", parameters={"type": "object", "properties": {}})
REQUEST = InferenceRequest("", (), ("audio",), None, tools=(TOOL,), tool_choice="auto")


def chunk(
    text: str = "",
    samples: int = 0,
    call: ToolCallDelta | None = None,
    final: bool = False,
    end_reason: EndReason | None = None,
) -> PipelineChunk:
    audio = np.zeros(samples, np.float32)
    return PipelineChunk(text, audio, final, 0.0, tool_call=call, end_reason=end_reason)


class _Stream:
    def __init__(self, chunks: Sequence[PipelineChunk]) -> None:
        self.chunks = list(chunks)
        self.request: Any = None

    async def receive(self) -> PipelineChunk:
        return self.chunks.pop(0)

    async def cancel(self) -> int:
        return 0


async def _run(monkeypatch: pytest.MonkeyPatch, chunks: Sequence[PipelineChunk]) -> list[Any]:
    stream = _Stream(chunks)

    @asynccontextmanager
    async def open_stream(url: str, model: str, request: Any) -> AsyncIterator[_Stream]:
        stream.request = request
        yield stream

    monkeypatch.setattr(response_actor, "open_pipeline_stream", open_stream)
    pool = EndpointPool(("127.0.0.1:9",), ("cascade",), Metrics())
    pool.endpoints[0].healthy = True
    posted: list[BackendEvent] = []

    async def post(event: BackendEvent) -> None:
        posted.append(event)

    services = ResponseServices(pool=pool, pipeline="cascade", default_max_tokens=8)
    actor = ResponseActor(StartBackend("r", 3, REQUEST), "req", services, post=post)
    await actor.run()
    assert [t.name for t in stream.request.parameters.tools] == ["get_weather"]
    return posted


async def test_a_call_piece_is_posted_after_the_chunks_speech_and_counts_as_a_token(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    posted = await _run(
        monkeypatch,
        [
            chunk("Let me check. ", 2400),
            chunk(call=ToolCallDelta('{"city":', "get_weather")),
            chunk(call=ToolCallDelta(' "Paris"}'), final=True),
        ],
    )
    assert [type(e) for e in posted] == [
        BackendAudio,
        BackendToolCall,
        BackendToolCall,
        BackendDone,
    ]
    assert posted[1] == BackendToolCall("r", 3, "get_weather", '{"city":')
    assert posted[2] == BackendToolCall("r", 3, "", ' "Paris"}')
    assert posted[3] == BackendDone("r", 3, output_tokens=3)


async def test_text_held_for_audio_is_posted_before_the_call_that_ends_the_speech(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    posted = await _run(
        monkeypatch,
        [
            chunk("One moment."),  # aligned text waits for its audio, which never comes
            chunk(call=ToolCallDelta("{}", "get_weather"), final=True),
        ],
    )
    assert posted == [
        BackendText("r", 3, "One moment."),
        BackendToolCall("r", 3, "get_weather", "{}"),
        BackendDone("r", 3, output_tokens=2),
    ]


async def test_the_end_reason_of_any_chunk_goes_with_the_streams_done(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Was: END_REASON went unread, and every stream that ended on its own was `completed`.
    # The stage that knows it sends it at once: here ahead of the last audio.
    posted = await _run(
        monkeypatch,
        [
            chunk("Once upon ", 2400),
            chunk(end_reason="max_output_tokens"),
            chunk("a time", 2400),
            chunk(final=True),
        ],
    )
    assert posted[-1] == BackendDone("r", 3, 2, "max_output_tokens")
    plain = await _run(monkeypatch, [chunk("Hello.", 2400), chunk(final=True)])
    assert plain[-1] == BackendDone("r", 3, 1, None)

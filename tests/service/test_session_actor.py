"""The session actor in memory (no sockets): faults of its helpers never kill the session."""

from __future__ import annotations

import base64
import json
from typing import Any

import numpy as np
import trio

from orchestrator.service.config import ServiceConfig
from orchestrator.service.endpoints import EndpointPool
from orchestrator.service.metrics import Metrics
from orchestrator.service.response_actor import ResponseServices
from orchestrator.service.session_actor import SessionActor, SessionServices
from orchestrator.vad_batcher import VadUnavailable


class _DownVad:
    """A VAD whose Triton endpoint is gone: every chunk fails."""

    def __init__(self) -> None:
        self.calls = 0

    def open_stream(self) -> object:
        return object()

    async def probability(self, stream: object, chunk: Any) -> float:
        self.calls += 1
        raise VadUnavailable("no Triton endpoint for vad")


def _append(ms: int) -> str:
    audio = (np.zeros(24 * ms, np.int16)).tobytes()
    return json.dumps(
        {"type": "input_audio_buffer.append", "audio": base64.b64encode(audio).decode()}
    )


async def test_vad_outage_is_reported_once_and_the_session_goes_on() -> None:
    metrics = Metrics()
    vad = _DownVad()
    services = SessionServices(
        metrics=metrics,
        vad=vad,  # type: ignore[arg-type]
        responses=ResponseServices(
            pool=EndpointPool(("127.0.0.1:9",), ("cascade",), metrics),
            pipeline="cascade",
            default_max_tokens=8,
        ),
        transcriber=None,
    )
    actor = SessionActor("sess_test", ServiceConfig(), services)
    seen: list[dict[str, Any]] = []

    async def read() -> None:
        async for text in actor.outgoing:
            seen.append(json.loads(text))

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(actor.run)
            nursery.start_soon(read)
            for _ in range(10):
                await actor.receive(_append(100))
            await actor.receive(json.dumps({"type": "conversation.context.retrieve"}))
            while not any(e["type"] == "conversation.context" for e in seen) or vad.calls < 20:
                await trio.sleep(0.01)
            await actor.client_gone()
    errors = [e for e in seen if e["type"] == "error"]
    assert [e["error"]["code"] for e in errors] == ["vad_unavailable"], errors
    assert seen[0]["type"] == "session.created"

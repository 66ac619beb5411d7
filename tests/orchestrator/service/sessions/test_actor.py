"""The session actor in memory (no sockets): faults of its helpers never kill the session,
and the ways the server ends a session (slow client, expiry, drain, hung endpoint), on a mock
clock where timing matters."""

from __future__ import annotations

import base64
import dataclasses
import json
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import numpy as np
import pytest
import trio
import trio.testing

from orchestrator.service.backends import response_actor
from orchestrator.service.backends.endpoints import EndpointPool
from orchestrator.service.backends.response_actor import ResponseServices
from orchestrator.service.backends.vad_batcher import VadUnavailable
from orchestrator.service.config import ServiceConfig
from orchestrator.service.metrics import Metrics
from orchestrator.service.sessions.actor import SessionEnd
from orchestrator.service.sessions.services import SessionServices
from orchestrator.session.echo.processors import Canceller, Pcm, Suppressor
from orchestrator.triton.pipeline_client import PipelineChunk
from tests.orchestrator.service.sessions.in_memory import InMemoryClient, in_memory_session


class _DownVad:
    """A VAD whose Triton endpoint is gone: every chunk fails."""

    def __init__(self) -> None:
        self.calls = 0

    def open_stream(self) -> object:
        return object()

    async def probability(self, stream: object, chunk: Any) -> float:
        self.calls += 1
        raise VadUnavailable("no Triton endpoint for vad")

    async def probabilities(self, stream: object, chunks: Any) -> list[float]:
        # Counted per chunk, as `probability` would have been called once for each.
        self.calls += len(chunks)
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
    actor, client = in_memory_session("sess_test", ServiceConfig(), services)
    seen: list[dict[str, Any]] = []

    async def read() -> None:
        async for text in client:
            seen.append(json.loads(text))

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(actor.run)
            nursery.start_soon(read)
            for _ in range(10):
                await client.send(_append(100))
            await client.send(json.dumps({"type": "conversation.context.retrieve"}))
            while not any(e["type"] == "conversation.context" for e in seen) or vad.calls < 20:
                await trio.sleep(0.01)
            client.leave()
    errors = [e for e in seen if e["type"] == "error"]
    assert [e["error"]["code"] for e in errors] == ["vad_unavailable"], errors
    assert seen[0]["type"] == "session.created"


def _services(metrics: Metrics, config: ServiceConfig, *, healthy: bool = False) -> SessionServices:
    pool = EndpointPool(("127.0.0.1:9",), ("cascade",), metrics)
    pool.endpoints[0].healthy = healthy
    return SessionServices(
        metrics=metrics,
        vad=_DownVad(),  # type: ignore[arg-type]
        responses=ResponseServices(
            pool=pool,
            pipeline="cascade",
            default_max_tokens=8,
            first_chunk_timeout_s=config.first_chunk_timeout_s,
            chunk_timeout_s=config.chunk_timeout_s,
        ),
        transcriber=None,
    )


def _event(kind: str, **fields: Any) -> str:
    return json.dumps({"type": kind, **fields})


_MANUAL = _event(
    "session.update", session={"type": "realtime", "audio": {"input": {"turn_detection": None}}}
)


async def _collect(client: InMemoryClient, seen: list[dict[str, Any]]) -> None:
    async for text in client:
        seen.append(json.loads(text))


async def test_a_session_expires_at_max_session_s_with_an_error_then_1000(
    autojump_clock: trio.testing.MockClock,
) -> None:
    metrics = Metrics()
    config = ServiceConfig()
    actor, client = in_memory_session("sess_test", config, _services(metrics, config))
    seen: list[dict[str, Any]] = []
    started = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_collect, client, seen)
        await actor.run()
    assert trio.current_time() - started == pytest.approx(3600)
    assert [e["type"] for e in seen] == ["session.created", "error"]
    assert seen[-1]["error"] == {
        "type": "invalid_request_error",
        "code": "session_expired",
        "message": "Your session hit the maximum duration of 60 minutes.",
        "param": None,
        "event_id": None,
    }
    assert actor.end == SessionEnd(1000, "session expired after 60 minutes", "session_expired")
    assert metrics.session_ends.labels("session_expired")._value.get() == 1


async def test_a_client_that_stops_reading_ends_the_session_with_1008(
    autojump_clock: trio.testing.MockClock,
) -> None:
    metrics = Metrics()
    config = ServiceConfig(send_queue=4, slow_client_timeout_s=10)
    actor, client = in_memory_session("sess_test", config, _services(metrics, config))

    async def flood() -> None:
        for _ in range(100):
            await client.send(_event("conversation.context.retrieve"))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(flood)
        started = trio.current_time()
        await actor.run()
        took = trio.current_time() - started
        nursery.cancel_scope.cancel()
    # One event waited the whole timeout; the outbox never held more than its bound.
    assert 10 <= took < 10.5
    assert actor.end == SessionEnd(
        1008, "client is not reading: 4 events queued (0.0 MiB)", "client_not_reading", False
    )
    assert metrics.session_ends.labels("client_not_reading")._value.get() == 1


async def test_the_outbox_is_bounded_in_bytes_too(autojump_clock: trio.testing.MockClock) -> None:
    config = ServiceConfig(send_queue=1000, send_queue_bytes=3 << 20, slow_client_timeout_s=10)
    actor, client = in_memory_session("sess_test", config, _services(Metrics(), config))
    item = {"id": "item_big", "type": "message", "role": "user"}
    content = [{"type": "input_text", "text": "x" * (1 << 20)}]

    async def flood() -> None:
        await client.send(_event("conversation.item.create", item={**item, "content": content}))
        for _ in range(100):
            await client.send(_event("conversation.item.retrieve", item_id="item_big"))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(flood)
        await actor.run()
        nursery.cancel_scope.cancel()
    # session.created and the item's added/done (1 MiB each, plus their envelopes): a
    # retrieved copy no longer fits in 3 MiB, though the message bound is far away.
    assert actor.end is not None
    assert actor.end.reason == "client is not reading: 3 events queued (2.0 MiB)"


async def test_a_slow_but_reading_client_is_not_cut(autojump_clock: trio.testing.MockClock) -> None:
    config = ServiceConfig(send_queue=2, slow_client_timeout_s=10)
    actor, client = in_memory_session("sess_test", config, _services(Metrics(), config))
    seen: list[dict[str, Any]] = []

    async def slow_reader() -> None:
        async for text in client:
            seen.append(json.loads(text))
            await trio.sleep(5)  # each event is taken within the timeout, never all at once

    async with trio.open_nursery() as nursery:
        nursery.start_soon(actor.run)
        nursery.start_soon(slow_reader)
        for _ in range(10):
            await client.send(_event("conversation.context.retrieve"))
        while len(seen) < 11:
            await trio.sleep(1)
        assert actor.end is None
        client.leave()
    assert [e["type"] for e in seen] == ["session.created"] + ["conversation.context"] * 10


async def test_shut_down_handles_queued_mail_first_then_errors_and_ends_1001() -> None:
    metrics = Metrics()
    config = ServiceConfig()
    actor, client = in_memory_session("sess_test", config, _services(metrics, config))
    seen: list[dict[str, Any]] = []
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_collect, client, seen)
            nursery.start_soon(actor.run)
            await client.send(_event("conversation.context.retrieve"))
            actor.shut_down()
    assert [e["type"] for e in seen] == ["session.created", "conversation.context", "error"]
    assert seen[-1]["error"]["code"] == "server_shutting_down"
    assert seen[-1]["error"]["type"] == "server_error"
    assert actor.end == SessionEnd(1001, "server is shutting down", "server_shutting_down")


class _FakeStream:
    """A pipeline stream that sends `chunks` and then nothing (a hung endpoint)."""

    def __init__(self, chunks: int) -> None:
        self.chunks = chunks
        self.cancelled = False
        self.closed = False

    async def receive(self) -> PipelineChunk:
        if self.chunks == 0:
            await trio.sleep_forever()
        self.chunks -= 1
        return PipelineChunk("tok ", np.zeros(2400, np.float32), False, 0.0)

    async def cancel(self) -> int:
        self.cancelled = True
        return 0


@pytest.fixture
def fake_stream(monkeypatch: pytest.MonkeyPatch) -> _FakeStream:
    stream = _FakeStream(chunks=0)

    @asynccontextmanager
    async def open_stream(url: str, model: str, request: Any) -> AsyncIterator[_FakeStream]:
        try:
            yield stream
        finally:
            stream.closed = True

    monkeypatch.setattr(response_actor, "open_pipeline_stream", open_stream)
    return stream


async def _respond(client: InMemoryClient, seen: list[dict[str, Any]], until: str) -> None:
    await client.send(_MANUAL)
    await client.send(_event("response.create"))
    while not any(e["type"] == until for e in seen):
        await trio.sleep(0.01)


async def test_shut_down_lets_the_answer_go_on_to_the_drains_bound_then_cuts_it_first(
    autojump_clock: trio.testing.MockClock, fake_stream: _FakeStream
) -> None:
    # Core rule 11: the drain waits for the generating answer (here a hung one) up to
    # drain_answer_bound_s, then cuts it with its terminal before the session's end.
    config = ServiceConfig(first_chunk_timeout_s=60, chunk_timeout_s=60)
    actor, client = in_memory_session(
        "sess_test", config, _services(Metrics(), config, healthy=True)
    )
    seen: list[dict[str, Any]] = []
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_collect, client, seen)
            nursery.start_soon(actor.run)
            await _respond(client, seen, "response.created")
            asked = trio.current_time()
            actor.shut_down()
            await trio.sleep(config.drain_answer_bound_s - 0.5)
            assert not any(e["type"] == "response.done" for e in seen), "cut before the bound"
    assert trio.current_time() - asked == pytest.approx(config.drain_answer_bound_s, abs=0.1)
    kinds = [e["type"] for e in seen]
    done = next(e for e in seen if e["type"] == "response.done")
    assert done["response"]["status"] == "cancelled", done
    assert kinds.index("response.done") < kinds.index("error") == len(kinds) - 1
    assert seen[-1]["error"]["code"] == "server_shutting_down"
    # Closing a stream before its final response cancels it on Triton (board and stream,
    # trio_bridge.TritonStream.aclose), whichever of the two cancels reached it first.
    assert fake_stream.cancelled or fake_stream.closed, "the Triton stream was left open"
    # No shared store: the session is over (1001), not to be resumed elsewhere (4001).
    assert actor.end is not None and actor.end.code == 1001


@pytest.mark.parametrize(
    ("chunks", "timeout_s", "said"),
    [(0, 5.0, "sent no output within 5 s"), (2, 2.0, "went silent mid-response for 2 s")],
)
async def test_a_hung_endpoint_fails_the_response_in_time_and_is_marked_down(
    autojump_clock: trio.testing.MockClock,
    fake_stream: _FakeStream,
    chunks: int,
    timeout_s: float,
    said: str,
) -> None:
    fake_stream.chunks = chunks
    config = ServiceConfig(first_chunk_timeout_s=5, chunk_timeout_s=2)
    services = _services(Metrics(), config, healthy=True)
    actor, client = in_memory_session("sess_test", config, services)
    seen: list[dict[str, Any]] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_collect, client, seen)
        nursery.start_soon(actor.run)
        await _respond(client, seen, "response.created")
        created_at = trio.current_time()
        await _respond_done(seen)
        took = trio.current_time() - created_at
        # The session goes on.
        await client.send(_event("conversation.context.retrieve"))
        while seen[-1]["type"] != "conversation.context":
            await trio.sleep(0.01)
        client.leave()
    done = next(e for e in seen if e["type"] == "response.done")["response"]
    assert done["status"] == "failed"
    assert said in done["status_details"]["error"]["message"]
    assert took == pytest.approx(timeout_s, abs=0.1)
    assert not services.responses.pool.endpoints[0].healthy
    assert fake_stream.closed


async def _respond_done(seen: list[dict[str, Any]]) -> None:
    while not any(e["type"] == "response.done" for e in seen):
        await trio.sleep(0.01)


class _SlowVad:
    """A VAD that takes its time and hears speech in every other append: turn after turn."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.calls = 0
        self.max_in_flight = 0

    def open_stream(self) -> object:
        return object()

    async def probability(self, stream: object, chunk: Any) -> float:
        raise AssertionError("the actor asks per append")

    async def probabilities(self, stream: object, chunks: Any) -> list[float]:
        self.calls += 1
        await trio.sleep(self.delay_s)
        return [1.0 if self.calls % 2 else 0.0] * len(chunks)


async def test_no_wait_cycle_when_appends_flood_a_slow_vad() -> None:
    # Was: the actor waited on the full VAD channel while the VAD feeder waited on the full
    # mailbox (its speech events) behind the client's appends: the session hung for good.
    # Now the reader waits for a VAD credit and the actor never waits on the VAD.
    metrics = Metrics()
    config = ServiceConfig(session_mailbox=4, vad_backlog_chunks=4)
    services = _services(metrics, config)
    vad = _SlowVad(0.002)
    services = SessionServices(
        metrics=metrics, vad=vad, responses=services.responses, transcriber=None
    )
    actor, client = in_memory_session("sess_flood", config, services)
    seen: list[dict[str, Any]] = []
    turns = _event(
        "session.update",
        session={
            "type": "realtime",
            "audio": {
                "input": {
                    "turn_detection": {
                        "type": "server_vad",
                        "silence_duration_ms": 64,
                        "create_response": False,
                    }
                }
            },
        },
    )
    backlog: list[int] = []
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(actor.run)
            nursery.start_soon(_collect, client, seen)
            await client.send(turns)
            for _ in range(300):
                await client.send(_append(100))
                backlog.append(actor.input_backlog)
            await client.send(json.dumps({"type": "conversation.context.retrieve"}))
            # The last append's VAD call may still be on its way when the context comes back
            # (the feeder runs beside the actor): wait for it, or the count below races it.
            while not any(e["type"] == "conversation.context" for e in seen) or vad.calls < 300:
                await trio.sleep(0.01)
            client.leave()
    kinds = [e["type"] for e in seen]
    assert "error" not in kinds, [e for e in seen if e["type"] == "error"]
    # Every append reached the VAD and the turns it heard were committed. How many turns
    # depends on how far the input ran ahead of the VAD: a commit takes the whole buffer, and
    # speech the VAD finds later in audio already committed opens no turn.
    assert vad.calls == 300
    started = kinds.count("input_audio_buffer.speech_started")
    assert started >= 10
    assert kinds.count("input_audio_buffer.committed") == started
    # The backlog of appends waiting for the VAD never went past its bound.
    assert max(backlog) <= config.vad_backlog_chunks


# Session resume: the actor carries out its link's decisions (orchestrator/session/resume/link.py).


async def test_a_dropped_connection_leaves_the_session_for_its_grace_then_it_ends(
    autojump_clock: trio.testing.MockClock,
) -> None:
    metrics = Metrics()
    config = ServiceConfig(disconnect_grace_s=30)
    actor, client = in_memory_session("sess_test", config, _services(metrics, config))
    seen: list[dict[str, Any]] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_collect, client, seen)
        started = trio.current_time()
        nursery.start_soon(actor.run)
        await client.send(_event("conversation.context.retrieve"))
        await trio.sleep(1)
        assert actor.connection is not None
        actor.connection.peer_gone(1006)  # no close frame
        assert actor.link.detached
        await trio.sleep(29)
        assert actor.end is None  # still within the grace
    assert trio.current_time() - started == pytest.approx(31, abs=0.1)
    assert actor.end == SessionEnd(1000, "grace_expired", "grace_expired", flush=False)
    assert metrics.session_ends.labels("grace_expired")._value.get() == 1


async def test_a_1000_close_ends_the_session_at_once_with_no_grace(
    autojump_clock: trio.testing.MockClock,
) -> None:
    config = ServiceConfig(disconnect_grace_s=30)
    actor, client = in_memory_session("sess_test", config, _services(Metrics(), config))
    async with trio.open_nursery() as nursery:
        started = trio.current_time()
        nursery.start_soon(actor.run)
        await trio.sleep(1)
        client.leave()
    assert trio.current_time() - started == pytest.approx(1, abs=0.1)
    assert actor.end is None and actor.link.ended


async def test_the_journal_overflowing_in_the_grace_ends_the_session_and_its_stream(
    fake_stream: _FakeStream,
) -> None:
    fake_stream.chunks = 10_000  # a reply far bigger than the journal
    config = ServiceConfig(disconnect_grace_s=30, resume_journal_bytes=256 * 1024)
    metrics = Metrics()
    actor, client = in_memory_session("sess_test", config, _services(metrics, config, healthy=True))
    seen: list[dict[str, Any]] = []
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_collect, client, seen)
            nursery.start_soon(actor.run)
            await _respond(client, seen, "response.output_audio.delta")
            assert actor.connection is not None
            actor.connection.peer_gone(1006)
    assert actor.end is not None and actor.end.cause == "journal_overflow"
    assert metrics.session_ends.labels("journal_overflow")._value.get() == 1
    assert actor.link.journal.bytes <= 256 * 1024
    assert fake_stream.cancelled or fake_stream.closed, "the Triton stream was left open"


async def test_every_event_gets_the_next_seq_and_the_journal_holds_them_in_order() -> None:
    config = ServiceConfig()
    actor, client = in_memory_session("sess_test", config, _services(Metrics(), config))
    seen: list[dict[str, Any]] = []
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_collect, client, seen)
            nursery.start_soon(actor.run)
            for _ in range(3):
                await client.send(_event("conversation.context.retrieve"))
            while len(seen) < 4:
                await trio.sleep(0.01)
            client.leave()
    assert [e["server_event_seq"] for e in seen] == [1, 2, 3, 4]
    assert seen[0]["resume_token"] == actor.link.token
    replay = actor.link.journal.after(0)
    assert replay is not None and [json.loads(e.text) for e in replay] == seen


class _RecordedCanceller:
    """A canceller that hears the near end as it is (and records where and what it heard)."""

    noise_reduction = None

    def __init__(self) -> None:
        self.calls: list[tuple[int, Pcm]] = []

    def process(self, near: Pcm, far: Pcm) -> Pcm:
        self.calls.append((threading.get_ident(), near.copy()))
        return near


class _RecordedProcessors:
    def __init__(self) -> None:
        self.canceller_ = _RecordedCanceller()

    def canceller(self, rate: int, noise_reduction: Any) -> Canceller:
        return self.canceller_

    def suppressor(self, rate: int, kind: Any) -> Suppressor:
        raise AssertionError("noise reduction alone is not asked for")


async def test_echo_dsp_runs_off_the_event_loop_in_input_order() -> None:
    # Was: each append's echo cancellation ran in the core's step on the Trio thread, about
    # 20 ms a second per session: 50 sessions held the event loop for a second every second.
    config = ServiceConfig()
    dsp = _RecordedProcessors()
    services = dataclasses.replace(_services(Metrics(), config), processors=lambda: dsp)
    actor, client = in_memory_session("sess_echo", config, services)
    # core_echo rule 12: only the DSP leaves the loop; the core's step (its Python) stays on
    # it, where it would otherwise wait for the GIL behind the loop at every hand-over.
    stepped_on: list[int] = []
    core_handle = actor.core.handle

    def handle(event: Any, now_ms: int | None = None) -> Any:
        stepped_on.append(threading.get_ident())
        return core_handle(event, now_ms)

    actor.core.handle = handle  # type: ignore[method-assign]
    seen: list[dict[str, Any]] = []
    echo = _event(
        "session.update",
        session={
            "type": "realtime",
            "audio": {"input": {"turn_detection": None, "echo_cancellation": {"type": "server"}}},
        },
    )
    sent = [np.full(2400, i + 1, np.int16) for i in range(20)]
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_collect, client, seen)
            nursery.start_soon(actor.run)
            await client.send(echo)
            for samples in sent:
                await client.send(
                    _event("input_audio_buffer.append", audio=base64.b64encode(samples).decode())
                )
            await client.send(_event("conversation.context.retrieve"))
            while not any(e["type"] == "conversation.context" for e in seen):
                await trio.sleep(0.01)
            client.leave()
    assert not [e for e in seen if e["type"] == "error"]
    calls = dsp.canceller_.calls
    loop_thread = threading.get_ident()
    assert calls and all(thread != loop_thread for thread, _ in calls), "DSP on the event loop"
    assert set(stepped_on) == {loop_thread}, "the core's step left the event loop"
    heard = np.concatenate([near for _, near in calls])
    np.testing.assert_array_equal(heard, np.concatenate(sent))

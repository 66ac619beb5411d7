"""The session host in memory: a resume is judged once (here, `not_first` too), and an honoured
one moves the connection, closes the old one with `session_replaced` then 1000, and discards
the provisional session."""

from __future__ import annotations

import json
from typing import Any

import trio

from orchestrator.service.backends.endpoints import EndpointPool
from orchestrator.service.backends.response_actor import ResponseServices
from orchestrator.service.config import ServiceConfig
from orchestrator.service.metrics import Metrics
from orchestrator.service.sessions.connection import Connection
from orchestrator.service.sessions.host import SessionHost
from orchestrator.service.sessions.services import SessionServices
from orchestrator.session.actions import SessionEnd


class _QuietVad:
    def open_stream(self) -> object:
        return object()

    async def probability(self, stream: object, chunk: Any) -> float:
        return 0.0

    async def probabilities(self, stream: object, chunks: Any) -> list[float]:
        return [0.0] * len(chunks)


def _services(metrics: Metrics) -> SessionServices:
    return SessionServices(
        metrics=metrics,
        vad=_QuietVad(),
        responses=ResponseServices(
            pool=EndpointPool(("127.0.0.1:9",), ("cascade",), metrics),
            pipeline="cascade",
            default_max_tokens=8,
        ),
        transcriber=None,
    )


async def _take(connection: Connection) -> dict[str, Any]:
    item = await connection.outbox.__anext__()
    connection.sent(item)
    decoded: dict[str, Any] = json.loads(item[1])
    return decoded


def _resume(session_id: str, token: str, last_seq: int = 0) -> str:
    return json.dumps(
        {
            "type": "session.resume",
            "event_id": "evt_r",
            "session_id": session_id,
            "resume_token": token,
            "last_server_event_seq": last_seq,
        }
    )


async def test_a_resume_after_the_first_event_fails_not_first_and_is_counted_once() -> None:
    metrics = Metrics()
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            host = SessionHost(ServiceConfig(), _services(metrics), metrics, nursery)
            connection = host.new_connection()
            actor = host.open("sess_a", connection, identity="k", release=lambda: None)
            assert (await _take(connection))["type"] == "session.created"
            await connection.receive(json.dumps({"type": "conversation.context.retrieve"}))
            assert (await _take(connection))["type"] == "conversation.context"
            await connection.receive(_resume("sess_a", actor.link.token))
            failed = await _take(connection)
            assert failed["error"]["code"] == "session_resume_failed"
            assert failed["error"]["message"].startswith("session.resume must be the first")
            assert failed["error"]["event_id"] == "evt_r"
            assert metrics.resumes.labels("not_first")._value.get() == 1
            # The connection goes on as it was.
            assert connection.session is actor and not connection.finished.is_set()
            connection.peer_gone(1000)


async def test_an_honoured_resume_replaces_the_old_connection_and_discards_the_provisional() -> (
    None
):
    metrics = Metrics()
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            host = SessionHost(ServiceConfig(), _services(metrics), metrics, nursery)
            old = host.new_connection()
            actor = host.open("sess_a", old, identity="k", release=lambda: None)
            created = await _take(old)
            assert created["resume_token"] == actor.link.token
            new = host.new_connection()
            provisional = host.open("sess_b", new, identity="k", release=lambda: None)
            first = await _take(new)
            assert first["type"] == "session.created" and first["session"]["id"] == "sess_b"
            await new.receive(_resume("sess_a", actor.link.token, last_seq=0))
            # The old connection: nothing else still queued, `session_replaced`, then 1000.
            assert old.finished.is_set()
            assert old.end == SessionEnd(1000, "session replaced by a resume", "session_replaced")
            replaced = [json.loads(text) async for _, text in old.outbox]
            assert [e["error"]["code"] for e in replaced] == ["session_replaced"]
            assert "server_event_seq" not in replaced[0]
            # The new one: `session.resumed`, then the replay from seq 1, with the original seq.
            resumed = await _take(new)
            assert resumed["type"] == "session.resumed"
            assert resumed["session_id"] == "sess_a" and resumed["replayed_from_seq"] == 1
            assert resumed["resume_token"] == actor.link.token != created["resume_token"]
            replay = await _take(new)
            assert replay == created
            assert new.session is actor and actor.connection is new
            await trio.sleep(0.01)
            assert "sess_b" not in host.sessions and provisional.link.ended
            assert metrics.resumes.labels("resumed")._value.get() == 1
            new.peer_gone(1000)

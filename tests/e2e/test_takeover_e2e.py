"""Conversations outlive their worker (issue 36): real servers, real Triton, a real Redis.

Each session keeps its latest snapshot in the session store at every turn boundary
(orchestrator/service/sessions/checkpoints.py, the core's rule 9).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from websockets.sync.client import connect

from orchestrator.service.config import ServiceConfig
from orchestrator.service.serve import BackgroundServer
from orchestrator.service.store.redis_store import RedisStore
from orchestrator.session.resume import snapshot as snap
from orchestrator.triton import TritonServer
from tests.conftest import free_port
from tests.e2e.realtime_client import RawSession
from tests.e2e.test_conversation_e2e import _ask_text, _manual
from tests.redis_server import RedisServer


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    try:
        yield server.url
    finally:
        server.kill()


def _server(triton: TritonServer, redis_url: str, route: str) -> BackgroundServer:
    return BackgroundServer(
        ServiceConfig(
            port=free_port(),
            triton_urls=(triton.grpc_url,),
            pipeline="null",
            route_id=route,
            session_store=redis_url,
            disconnect_grace_s=5.0,
        )
    )


@pytest.fixture(scope="module")
def worker_a(triton_server: TritonServer, redis_url: str) -> Iterator[BackgroundServer]:
    with _server(triton_server, redis_url, "wa") as running:
        yield running


def _stored(redis_url: str, session_id: str) -> snap.SessionSnapshot | None:
    async def read() -> snap.SessionSnapshot | None:
        store = await RedisStore.connect(redis_url)
        try:
            found = await store.get(session_id)
        finally:
            await store.close()
        return snap.decode(found.data) if found is not None else None

    return trio.run(read)


def _context(session: RawSession) -> list[dict[str, Any]]:
    session.send({"type": "conversation.context.retrieve"})
    items: list[dict[str, Any]] = session.until("conversation.context", timeout_s=10)["items"]
    return items


def _eventually(check: Any, timeout_s: float = 5.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


def test_each_turn_leaves_a_snapshot_of_the_conversation_in_redis(
    worker_a: BackgroundServer, redis_url: str, tmp_path: Path
) -> None:
    with connect(worker_a.url, max_size=None, open_timeout=10) as ws:
        session = RawSession(ws)
        created = session.recv()
        sid = created["session"]["id"]
        _manual(session, max_tokens=4)
        _ask_text(session, "Hello there.")
        done = session.until("response.done", timeout_s=30)
        items = _context(session)

        def latest() -> snap.SessionSnapshot | None:
            stored = _stored(redis_url, sid)
            seen = stored is not None and stored.last_seq >= done["server_event_seq"]
            return stored if seen else None

        stored = _eventually(latest)
        assert stored is not None, "no snapshot after the response's end"
        assert [item.id for item in stored.items] == [item["id"] for item in items]
        assert stored.settings.max_output_tokens == 4
        assert snap.token_matches(stored, created["resume_token"])
        assert stored.journal and stored.journal[-1].seq == stored.last_seq
    # The client left with a 1000 close: the session is over, so is its snapshot.
    assert _eventually(lambda: _stored(redis_url, sid) is None), "snapshot kept after the end"

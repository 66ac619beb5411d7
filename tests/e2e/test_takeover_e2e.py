"""Conversations outlive their worker (issue 36): real servers, real Triton, a real Redis.

Each session keeps its latest snapshot in the session store at every turn boundary
(orchestrator/service/sessions/checkpoints.py, the core's rule 9).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from orchestrator.service.config import ServiceConfig
from orchestrator.service.serve import BackgroundServer
from orchestrator.service.store.redis_store import RedisStore
from orchestrator.session.resume import snapshot as snap
from orchestrator.triton import TritonServer
from tests.conftest import free_port
from tests.e2e.realtime_client import RawSession
from tests.e2e.test_conversation_e2e import _ask_text, _manual
from tests.e2e.test_resume_e2e import _drop, _resume
from tests.redis_server import RedisServer


def _server(
    triton: TritonServer, redis_url: str, route: str, drain_timeout_s: float = 1.0
) -> BackgroundServer:
    return BackgroundServer(
        ServiceConfig(
            port=free_port(),
            triton_urls=(triton.grpc_url,),
            pipeline="null",
            route_id=route,
            session_store=redis_url,
            disconnect_grace_s=5.0,
            # The snapshots' ttl is the grace plus the drain; a lease is renewed every third of
            # it, so a worker whose session was taken over hears it within 2 s. A drain of 1 s
            # lets no answer go on (config.drain_answer_bound_s).
            drain_timeout_s=drain_timeout_s,
        )
    )


@pytest.fixture(scope="module")
def worker_a(triton_server: TritonServer, redis_url: str) -> Iterator[BackgroundServer]:
    with _server(triton_server, redis_url, "wa") as running:
        yield running


@pytest.fixture(scope="module")
def worker_b(triton_server: TritonServer, redis_url: str) -> Iterator[BackgroundServer]:
    with _server(triton_server, redis_url, "wb") as running:
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


class _Nothing:
    last_seq = -1
    live: tuple[str, ...] = ()


snap_none = _Nothing()


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


def _open(server: BackgroundServer, query: str = "") -> tuple[Any, RawSession, dict[str, Any]]:
    ws = connect(server.url + (f"?{query}" if query else ""), max_size=None, open_timeout=10)
    session = RawSession(ws)
    created = session.recv()
    assert created["type"] == "session.created", created
    return ws, session, created


def _seqs(events: list[dict[str, Any]]) -> list[int]:
    return [e["server_event_seq"] for e in events if "server_event_seq" in e]


def _metric(server: BackgroundServer, name: str) -> float:
    text = httpx.get(f"{server.http_url}/metrics", timeout=5).text
    match = re.search(re.escape(name) + r" (\S+)", text)
    return float(match.group(1)) if match else 0.0


def test_a_resume_at_another_worker_takes_the_session_over_with_its_conversation(
    worker_a: BackgroundServer, worker_b: BackgroundServer, redis_url: str
) -> None:
    ws, first, created = _open(worker_a)
    sid, token = created["session"]["id"], created["resume_token"]
    _manual(first, max_tokens=4)
    _ask_text(first, "My name is Ada.")
    done = first.until("response.done", timeout_s=30)
    items = _context(first)
    before = first.events
    last = _seqs(before)[-1]
    # The response's end is a turn boundary: the snapshot holds everything up to it (the
    # context the client asked for after it is no boundary, and need not be in it).
    ended = done["server_event_seq"]
    assert _eventually(lambda: (_stored(redis_url, sid) or snap_none).last_seq >= ended)
    _drop(ws)
    replaced = 'turntaker_session_ends_total{reason="session_replaced"}'
    replaced_before = _metric(worker_a, replaced)

    ws2, second, provisional = _open(worker_b, f"session_id={sid}")
    try:
        assert provisional["session"]["id"] != sid
        _resume(second, sid, token, last)
        resumed = second.until("session.resumed", timeout_s=10)
        assert resumed["session_id"] == sid and resumed["replayed_from_seq"] == last + 1
        assert resumed["resume_token"] != token
        # The conversation went with it: the same items, the same settings.
        assert [i["id"] for i in _context(second)] == [i["id"] for i in items]
        _ask_text(second, "What is my name?")
        answer = second.until("response.done", timeout_s=30)
        assert answer["response"]["status"] in ("completed", "incomplete"), answer
        after = second.events[second.events.index(resumed) + 1 :]
        # One sequence across both workers: nothing repeated, nothing skipped.
        assert _seqs(after)[0] == last + 1
        assert _seqs([*before, *after]) == list(range(1, _seqs(after)[-1] + 1))
        assert done["response"]["id"] != answer["response"]["id"]
    finally:
        ws2.close()
    # Worker A lost its lease: its next renewal is refused, and its copy of the session ends.
    grew = _eventually(lambda: _metric(worker_a, replaced) > replaced_before, timeout_s=8)
    assert grew, "worker A never heard that its session was taken over"


def test_an_answer_the_lost_worker_was_generating_ends_failed_on_the_new_one(
    worker_a: BackgroundServer, worker_b: BackgroundServer, redis_url: str
) -> None:
    ws, first, created = _open(worker_a)
    sid, token = created["session"]["id"], created["resume_token"]
    # 400 tokens of `null`: about 30 s of answer, still generating on A when B takes over.
    _manual(first, max_tokens=400)
    rid = _ask_text(first, "Talk to me for a while.")
    first.until("response.output_audio.delta", timeout_s=30)
    last = _seqs(first.events)[-1]
    assert _eventually(lambda: rid in (_stored(redis_url, sid) or snap_none).live)
    _drop(ws)

    ws2, second, _ = _open(worker_b, f"session_id={sid}")
    try:
        _resume(second, sid, token, last)
        second.until("session.resumed", timeout_s=10)
        ended = second.until("response.done", timeout_s=10)
        assert ended["response"]["id"] == rid
        assert ended["response"]["status"] == "failed", ended["response"]
        # Its reply is in the history as far as it was heard: here, not at all.
        [reply] = [i for i in _context(second) if i.get("role") == "assistant"]
        assert reply["content"] == []
    finally:
        ws2.close()


def test_a_drained_worker_leaves_its_sessions_for_another_to_take_over(
    triton_server: TritonServer, worker_b: BackgroundServer, redis_url: str
) -> None:
    # A rolling restart's step: SIGTERM (here `drain()`) ends the worker's sessions with 4001
    # (resume it), and their snapshots stay in the store for the resume the client makes next.
    with _server(triton_server, redis_url, "wc") as worker_c:
        ws, first, created = _open(worker_c)
        sid, token = created["session"]["id"], created["resume_token"]
        _manual(first, max_tokens=4)
        _ask_text(first, "Remember the number seven.")
        first.until("response.done", timeout_s=30)
        items = _context(first)
        worker_c.drain()
        assert worker_c.wait_stopped(15), "the drain did not end"
        with pytest.raises(ConnectionClosed) as closed:
            while True:
                first.recv(timeout_s=5)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 4001
        assert closed.value.rcvd.reason == "server restarting; resume the session"
        last = _seqs(first.events)[-1]
        ws.close()
    stored = _stored(redis_url, sid)
    assert stored is not None and stored.last_seq == last, "the drain's last events not kept"

    ws2, second, _ = _open(worker_b, f"session_id={sid}")
    try:
        _resume(second, sid, token, last)
        resumed = second.until("session.resumed", timeout_s=10)
        assert resumed["replayed_from_seq"] == last + 1
        assert [i["id"] for i in _context(second)] == [i["id"] for i in items]
    finally:
        ws2.close()


def test_a_drain_lets_the_answer_finish_then_sends_the_client_to_another_worker(
    triton_server: TritonServer, worker_b: BackgroundServer, redis_url: str
) -> None:
    # Issue 36's drain (core rule 11): the answer generating at SIGTERM finishes (within
    # drain_answer_bound_s: 6 s here), the session's last snapshot is written, and only then
    # is the client told, with 4001, to resume at once; the worker it reaches has it all.
    with _server(triton_server, redis_url, "wd", drain_timeout_s=8.0) as worker_d:
        ws, first, created = _open(worker_d)
        sid, token = created["session"]["id"], created["resume_token"]
        _manual(first, max_tokens=20)  # 20 chunks of 80 ms, paced: about 1.8 s
        rid = _ask_text(first, "Tell me a story.")
        first.until("response.output_audio.delta", response_id=rid, timeout_s=30)
        worker_d.drain()
        # Meanwhile a new connection is refused before the upgrade: behind nginx, the next
        # worker gets it (deploy/nginx.conf proxy_next_upstream http_503).
        with pytest.raises(InvalidStatus) as denied:
            connect(worker_d.url, open_timeout=5).close()
        assert denied.value.response.status_code == 503
        done = first.until("response.done", timeout_s=15)["response"]
        assert done["id"] == rid and done["status"] == "completed", done
        error = first.until("error", timeout_s=5)["error"]
        assert error["code"] == "server_restarting", error
        with pytest.raises(ConnectionClosed) as closed:
            while True:
                first.recv(timeout_s=5)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 4001
        last = _seqs(first.events)[-1]
        ws.close()
        # The last snapshot was in the store before the close: read while the worker still
        # runs (its drain waits for nothing else now).
        stored = _stored(redis_url, sid)
        assert stored is not None and stored.last_seq == last, "the close came before the write"
        assert worker_d.wait_stopped(15), "the drain did not end"

    ws2, second, _ = _open(worker_b, f"session_id={sid}")
    try:
        _resume(second, sid, token, last)
        resumed = second.until("session.resumed", timeout_s=10)
        assert resumed["replayed_from_seq"] == last + 1
        reply = [i for i in _context(second) if i.get("role") == "assistant"]
        assert reply and reply[-1]["status"] == "completed", reply
        # Its event ids go on from the first worker's (snapshot.py rule 6): none repeats.
        _ask_text(second, "And then?")
        second.until("response.done", timeout_s=30)
        # (The second connection's `session.created` is its provisional session's own.)
        events = first.events + [e for e in second.events if e["type"] != "session.created"]
        ids = [e["event_id"] for e in events if e.get("event_id")]
        assert len(ids) == len(set(ids)), [i for i in ids if ids.count(i) > 1]
    finally:
        ws2.close()


def test_redis_lost_while_serving_leaves_sessions_going_on_and_says_so(
    triton_server: TritonServer, tmp_path: Path
) -> None:
    redis = RedisServer(tmp_path)
    redis.start()
    try:
        with _server(triton_server, redis.url, "wd") as worker:
            ws, session, _ = _open(worker)
            try:
                _manual(session, max_tokens=4)
                _ask_text(session, "First question.")
                session.until("response.done", timeout_s=30)
                redis.kill()
                _ask_text(session, "Second question, with the store gone.")
                done = session.until("response.done", timeout_s=30)
                assert done["response"]["status"] in ("completed", "incomplete"), done
                failed = 'turntaker_snapshot_writes_total{result="failed"}'
                assert _eventually(lambda: _metric(worker, failed) > 0, timeout_s=10), (
                    "a snapshot that could not be written is not counted"
                )
                assert len(_context(session)) == 4  # both turns, in memory
            finally:
                ws.close()
    finally:
        redis.kill()

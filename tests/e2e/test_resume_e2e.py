"""Session resume end to end (docs/protocol.md "Session resume"): real server, real Triton,
real sockets dropped under the client.

On the `null` pipeline a response streams 80 ms of audio every 80 ms, so a 40-token answer
lasts about 3 s: long enough to drop the connection in the middle of it.
"""

from __future__ import annotations

import json
import logging
import re
import socket
import struct
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from orchestrator.service.config import ServiceConfig
from orchestrator.service.serve import BackgroundServer
from orchestrator.triton import TritonServer
from tests.conftest import free_port
from tests.e2e.realtime_client import RawSession
from tests.e2e.test_conversation_e2e import _ask_text, _manual

TOKENS = 40


@pytest.fixture(scope="module")
def server(triton_server: TritonServer) -> Iterator[BackgroundServer]:
    config = ServiceConfig(
        port=free_port(),
        triton_urls=(triton_server.grpc_url,),
        pipeline="null",
        disconnect_grace_s=3.0,
        api_keys=("alice:key-alice", "bob:key-bob"),
        # A small codec limit, so that the transport limit (twice it, plus 1 MiB) is cheap to
        # pass in a test.
        max_message_bytes=64 * 1024,
    )
    with BackgroundServer(config) as running:
        yield running


def _headers(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@contextmanager
def _session(
    server: BackgroundServer, key: str = "key-alice", query: str = ""
) -> Iterator[tuple[RawSession, dict[str, Any]]]:
    url = server.url + (f"?{query}" if query else "")
    with connect(url, max_size=None, open_timeout=10, additional_headers=_headers(key)) as ws:
        session = RawSession(ws)
        created = session.recv()
        assert created["type"] == "session.created", created
        yield session, created


def _drop(ws: ClientConnection) -> None:
    """Gone without a close frame: the connection reset under the client."""
    sock = ws.socket
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


def _resume(session: RawSession, session_id: str, token: str, last: int) -> None:
    session.send(
        {
            "type": "session.resume",
            "event_id": "evt_resume",
            "session_id": session_id,
            "resume_token": token,
            "last_server_event_seq": last,
        }
    )


def _metric(server: BackgroundServer, name: str, labels: str = "") -> float:
    text = httpx.get(f"{server.http_url}/metrics", headers=_headers("key-alice"), timeout=5).text
    pattern = re.escape(name + (f"{{{labels}}}" if labels else "")) + r" (\S+)"
    match = re.search(pattern, text)
    return float(match.group(1)) if match else 0.0


def _seqs(events: list[dict[str, Any]]) -> list[int]:
    return [e["server_event_seq"] for e in events if "server_event_seq" in e]


def test_every_event_carries_the_next_seq_and_session_created_a_resume_token(
    server: BackgroundServer,
) -> None:
    with _session(server) as (session, created):
        assert created["server_event_seq"] == 1
        token = created["resume_token"]
        assert isinstance(token, str) and len(token) * 6 >= 128
        _manual(session, max_tokens=4)
        _ask_text(session, "Hello.")
        session.until("response.done", timeout_s=30)
        seqs = _seqs(session.events)
        assert seqs == list(range(1, len(seqs) + 1))
        assert len(seqs) == len(session.events)  # every event is in the sequence


def test_a_drop_mid_response_resumes_with_nothing_lost_or_repeated(
    server: BackgroundServer,
) -> None:
    with _session(server) as (first, created):
        sid, token = created["session"]["id"], created["resume_token"]
        _manual(first, max_tokens=TOKENS)
        rid = _ask_text(first, "Talk to me.")
        for _ in range(5):
            first.until("response.output_audio.delta", timeout_s=30)
        before = first.events
        _drop(first.ws)
    time.sleep(0.5)  # the answer goes on meanwhile: its events are journaled
    last = _seqs(before)[-1]
    with _session(server, query=f"session_id={sid}") as (second, provisional):
        assert provisional["session"]["id"] != sid
        _resume(second, sid, token, last)
        resumed = second.until("session.resumed", timeout_s=10)
        assert "server_event_seq" not in resumed
        assert resumed["session_id"] == sid and resumed["replayed_from_seq"] == last + 1
        assert resumed["resume_token"] != token
        done = second.until("response.done", timeout_s=30)
        assert done["response"]["id"] == rid and done["response"]["status"] == "completed"
        after = second.events[second.events.index(resumed) + 1 :]
    events = [*before, *after]
    seqs = _seqs(events)
    assert seqs == list(range(1, len(seqs) + 1)), "a gap or a repeat in server_event_seq"
    ids = [e["event_id"] for e in events]
    assert len(ids) == len(set(ids))
    assert [e["type"] for e in events].count("response.done") == 1
    deltas = [e for e in events if e["type"] == "response.output_audio.delta"]
    assert len(deltas) == TOKENS  # one 80 ms chunk a token: every one arrived exactly once
    assert done["response"]["usage"]["output_tokens"] == TOKENS


def test_the_resumed_session_keeps_its_conversation_and_settings(
    server: BackgroundServer,
) -> None:
    with _session(server) as (first, created):
        sid, token = created["session"]["id"], created["resume_token"]
        _manual(first, max_tokens=3)
        _ask_text(first, "Remember me.")
        first.until("response.done", timeout_s=30)
        last = _seqs(first.events)[-1]
        _drop(first.ws)
    with _session(server, query=f"session_id={sid}") as (second, _):
        _resume(second, sid, token, last)
        second.until("session.resumed", timeout_s=10)
        second.send({"type": "conversation.context.retrieve"})
        context = second.until("conversation.context", timeout_s=10)
        texts = [c.get("text") for item in context["items"] for c in item["content"]]
        assert "Remember me." in texts
        rid = _ask_text(second, "Again.")
        done = second.until("response.done", timeout_s=30)
        assert done["response"]["id"] == rid
        # The settings held: max_output_tokens 3 and no turn detection.
        assert done["response"]["usage"]["output_tokens"] == 3


def test_a_wrong_token_or_unknown_session_fails_and_the_connection_goes_on_afresh(
    server: BackgroundServer,
) -> None:
    with _session(server) as (owner, created):
        sid = created["session"]["id"]
        for target, token in ((sid, "not-the-token"), ("sess_nothere", created["resume_token"])):
            with _session(server, query=f"session_id={target}") as (other, provisional):
                _resume(other, target, token, 1)
                error = other.until("error", timeout_s=10)
                assert error["error"]["code"] == "session_resume_failed"
                assert error["error"]["event_id"] == "evt_resume"
                assert "server_event_seq" not in error
                assert "unknown here, or the token is wrong" in error["error"]["message"]
                # The connection goes on as the new session it was given.
                _manual(other, max_tokens=2)
                _ask_text(other, "Hi.")
                done = other.until("response.done", timeout_s=30)
                assert done["response"]["status"] == "completed"
                assert provisional["session"]["id"] != sid
        # The owner never noticed.
        _manual(owner, max_tokens=2)
        _ask_text(owner, "Still here?")
        assert owner.until("response.done", timeout_s=30)["response"]["status"] == "completed"
    assert _metric(server, "turntaker_session_resumes_total", 'outcome="unknown"') >= 2


def test_another_api_key_cannot_resume_even_with_the_token(server: BackgroundServer) -> None:
    with _session(server) as (owner, created):
        sid, token = created["session"]["id"], created["resume_token"]
        with _session(server, key="key-bob") as (thief, _):
            _resume(thief, sid, token, 1)
            error = thief.until("error", timeout_s=10)
            assert error["error"]["code"] == "session_resume_failed"
            assert "another API key" in error["error"]["message"]
        # The owner's session is untouched, its connection still its own.
        _manual(owner, max_tokens=2)
        _ask_text(owner, "Mine.")
        assert owner.until("response.done", timeout_s=30)["response"]["status"] == "completed"


def test_a_resume_while_connected_takes_the_session_over(server: BackgroundServer) -> None:
    with _session(server) as (old, created):
        sid, token = created["session"]["id"], created["resume_token"]
        with _session(server, query=f"session_id={sid}") as (new, _):
            _resume(new, sid, token, 1)
            new.until("session.resumed", timeout_s=10)
            replaced = old.until("error", timeout_s=10)
            assert replaced["error"]["code"] == "session_replaced"
            assert "server_event_seq" not in replaced
            with pytest.raises(ConnectionClosed) as closed:
                old.recv(timeout_s=10)
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1000
            _manual(new, max_tokens=2)
            _ask_text(new, "Mine now.")
            assert new.until("response.done", timeout_s=30)["response"]["status"] == "completed"


def test_a_1000_close_ends_the_session_at_once(server: BackgroundServer) -> None:
    with _session(server) as (_, created):
        sid, token = created["session"]["id"], created["resume_token"]
    with _session(server, query=f"session_id={sid}") as (again, _):
        _resume(again, sid, token, 1)
        error = again.until("error", timeout_s=10)
        assert error["error"]["code"] == "session_resume_failed"


def test_the_grace_passing_ends_the_session_as_a_client_leaving(server: BackgroundServer) -> None:
    expired = _metric(server, "turntaker_session_ends_total", 'reason="grace_expired"')
    with _session(server) as (session, created):
        sid, token = created["session"]["id"], created["resume_token"]
        _drop(session.ws)
    deadline = time.monotonic() + 10
    while _metric(server, "turntaker_session_ends_total", 'reason="grace_expired"') == expired:
        assert time.monotonic() < deadline, "the grace did not end the session"
        time.sleep(0.2)
    with _session(server, query=f"session_id={sid}") as (again, _):
        _resume(again, sid, token, 1)
        assert again.until("error", timeout_s=10)["error"]["code"] == "session_resume_failed"


def test_a_message_over_the_transport_limit_closes_1009_and_the_session_stays_resumable(
    server: BackgroundServer,
) -> None:
    with _session(server) as (session, created):
        sid, token = created["session"]["id"], created["resume_token"]
        huge = json.dumps({"type": "conversation.item.create", "pad": "x" * (2 << 20)})
        try:
            session.ws.send(huge)
        except ConnectionClosed:
            pass  # closed while it was still being sent
        with pytest.raises(ConnectionClosed) as closed:
            while True:
                session.recv(timeout_s=10)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009
    with _session(server, query=f"session_id={sid}") as (again, _):
        _resume(again, sid, token, 1)
        resumed = again.until("session.resumed", timeout_s=10)
        assert resumed["session_id"] == sid


def test_an_event_ack_frees_the_journal_and_a_resume_from_before_it_fails(
    server: BackgroundServer,
) -> None:
    with _session(server) as (session, created):
        sid, token = created["session"]["id"], created["resume_token"]
        _manual(session, max_tokens=3)
        _ask_text(session, "Hello.")
        session.until("response.done", timeout_s=30)
        last = _seqs(session.events)[-1]
        session.send({"type": "session.event_ack", "server_event_seq": last})
        time.sleep(0.3)
        _drop(session.ws)
    with _session(server, query=f"session_id={sid}") as (again, _):
        _resume(again, sid, token, 1)
        error = again.until("error", timeout_s=10)
        assert error["error"]["code"] == "session_resume_failed"
        assert "no longer journaled" in error["error"]["message"]
    # The failed try left the session in its grace: the right seq still resumes it.
    with _session(server, query=f"session_id={sid}") as (third, _):
        _resume(third, sid, token, last)
        assert third.until("session.resumed", timeout_s=10)["replayed_from_seq"] == last + 1


def test_no_token_reaches_the_logs_or_the_metrics(
    server: BackgroundServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    tokens = []
    with _session(server) as (session, created):
        sid, token = created["session"]["id"], created["resume_token"]
        tokens.append(token)
        _drop(session.ws)
    with _session(server, query=f"session_id={sid}") as (again, _):
        _resume(again, sid, token, 1)
        tokens.append(again.until("session.resumed", timeout_s=10)["resume_token"])
        _resume(again, sid, "wrong", 1)  # not first: refused too
        assert again.until("error", timeout_s=10)["error"]["code"] == "session_resume_failed"
    metrics = httpx.get(f"{server.http_url}/metrics", headers=_headers("key-alice")).text
    assert "turntaker_session_resumes_total" in metrics
    for secret in tokens:
        assert secret not in caplog.text
        assert secret not in metrics


def test_a_key_at_its_session_limit_can_still_resume_its_dropped_session(
    triton_server: TritonServer,
) -> None:
    config = ServiceConfig(
        port=free_port(),
        triton_urls=(triton_server.grpc_url,),
        pipeline="null",
        api_keys=("alice:key-alice",),
        max_sessions_per_key=1,
    )
    with BackgroundServer(config) as limited:
        with _session(limited) as (first, created):
            sid, token = created["session"]["id"], created["resume_token"]
            _drop(first.ws)
        time.sleep(0.3)
        # A new session is refused (the dropped one holds the key's only slot)...
        with connect(limited.url, open_timeout=10, additional_headers=_headers("key-alice")) as ws:
            refused = json.loads(ws.recv(timeout=10))
            assert refused["error"]["code"] == "session_limit_reached"
        # ... but the connection that resumes it is let in.
        with _session(limited, query=f"session_id={sid}") as (again, _):
            _resume(again, sid, token, 1)
            assert again.until("session.resumed", timeout_s=10)["session_id"] == sid
            _manual(again, max_tokens=2)
            _ask_text(again, "Back.")
            assert again.until("response.done", timeout_s=30)["response"]["status"] == "completed"

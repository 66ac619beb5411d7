"""How sessions end when things go wrong, end to end on real servers (issue 7).

- A client that stops reading is cut (1008) once its outbox stays full, and its Triton stream
  is cancelled; the server does not wait for it forever.
- A session ends at `max_session_s` with an `error` (`session_expired`) and close 1000.
- A hung Triton endpoint (SIGSTOP) fails the response within the chunk deadline, is marked
  down, and the session answers again once the endpoint is resumed.
- Draining (BackgroundServer.drain(), and a real SIGTERM to `turntaker serve`): the generating
  response gets its terminal `response.done`, then an `error` (`server_shutting_down`) and
  close 1001; new sessions get 1013; the server exits 0 within the drain timeout.
- A client process that dies mid-response leaves its session in the resume grace (its
  response goes on); when the grace passes unresumed its Triton stream is cancelled and the
  session ends, as if the client had left.

The `null` pipeline streams audio with no compute, so all of this takes seconds.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from orchestrator.service.config import ServiceConfig
from orchestrator.service.serve import BackgroundServer
from orchestrator.service.sessions.actor import pipeline_request_id
from orchestrator.triton import TritonConfig, TritonServer
from tests.conftest import REPO_ROOT, free_port
from tests.e2e.realtime_client import RawSession, raw_session
from tests.e2e.test_conversation_e2e import _ask_text, _manual

pytestmark = pytest.mark.skipif(
    not (REPO_ROOT / "model_repository" / "null").is_dir(), reason="no `null` model"
)

# Long enough never to end by itself during a test: 80 ms of audio per token.
LONG = 4000


@contextmanager
def _orchestrator(url: str, **overrides: Any) -> Iterator[BackgroundServer]:
    config = ServiceConfig(
        port=free_port(),
        triton_urls=(url,),
        pipeline="null",
        health_interval_s=0.2,
        health_timeout_s=0.5,
        **overrides,
    )
    with BackgroundServer(config) as server:
        yield server


def _metric(http_url: str, name: str, labels: str = "") -> float:
    text = httpx.get(f"{http_url}/metrics", timeout=5).text
    pattern = re.escape(name + (f"{{{labels}}}" if labels else "")) + r" (\S+)"
    found = re.search(rf"^{pattern}$", text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def _wait_for(what: str, check: Any, timeout_s: float) -> float:
    """Polls `check()` until true; returns the seconds it took."""
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > timeout_s:
            raise AssertionError(f"{what}: not within {timeout_s} s")
        time.sleep(0.05)
    return time.monotonic() - start


def _streaming(session: RawSession) -> str:
    """A response that streams for minutes, once its first audio has arrived."""
    _manual(session, max_tokens=LONG)
    rid = _ask_text(session, "Talk for a long time.")
    session.until("response.output_audio.delta", response_id=rid, timeout_s=30)
    return rid


@contextmanager
def _small_window_session(url: str) -> Iterator[RawSession]:
    """A session whose client holds little unread data: a small socket receive buffer, and
    websockets stops reading the socket after two unread frames. No compression: the bytes
    queued are the bytes sent."""
    host, port = url.split("//")[1].split("/")[0].split(":")
    sock = socket.create_connection((host, int(port)))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    with connect(
        url, sock=sock, max_size=None, max_queue=2, compression=None, open_timeout=10
    ) as ws:
        session = RawSession(ws)
        assert session.recv()["type"] == "session.created"
        yield session


def _stop_reading(session: RawSession) -> None:
    """Makes the server queue far more than the socket buffers hold, then reads nothing: a
    1 MiB item, and retrieves of it (each answered with the whole item)."""
    text = "x" * (1 << 20)
    item = {"id": "item_big", "type": "message", "role": "user"}
    content = [{"type": "input_text", "text": text}]
    session.send({"type": "conversation.item.create", "item": {**item, "content": content}})
    for _ in range(40):
        session.send({"type": "conversation.item.retrieve", "item_id": "item_big"})


def _stopped(triton: TritonServer, request_id: str, timeout_s: float = 10) -> set[str]:
    """The stages that recorded a stop for `request_id` on the cancel board."""
    with triton.board() as board:
        _wait_for(
            f"a stop record for {request_id}", lambda: bool(board.stops(request_id)), timeout_s
        )
        return {s.stage for s in board.stops(request_id)}


def _closed(ws: ClientConnection, timeout_s: float = 10) -> tuple[int | None, str | None]:
    """Reads until the server closes; its close code and reason."""
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            ws.recv(timeout=max(0.01, deadline - time.monotonic()))
    except ConnectionClosed:
        return ws.close_code, ws.close_reason
    raise AssertionError(f"the server did not close within {timeout_s} s")


def test_a_client_that_stops_reading_is_cut_and_its_stream_cancelled(
    triton_server: TritonServer,
) -> None:
    timeout_s = 1.0
    with _orchestrator(
        triton_server.grpc_url, send_queue=8, slow_client_timeout_s=timeout_s
    ) as server:
        http = server.http_url
        with _small_window_session(server.url) as session:
            rid = _streaming(session)
            assert _metric(http, "turntaker_sessions_active") == 1
            _stop_reading(session)
            took = _wait_for(
                "the session's end",
                lambda: _metric(http, "turntaker_sessions_active") == 0,
                timeout_s + 10,
            )
            assert _metric(http, "turntaker_session_closes_total", 'code="1008"') == 1
            ends = _metric(http, "turntaker_session_ends_total", 'reason="client_not_reading"')
            assert ends == 1
            # Filling the socket buffers and the outbox takes milliseconds; then one timeout.
            assert took < timeout_s + 3, took
            assert "null" in _stopped(triton_server, pipeline_request_id(server.config, rid))
            # The connection was cut under the blocked send: no close frame could get through.
            code, _ = _closed(session.ws)
            assert code != 1000


def test_a_session_expires_with_an_error_and_close_1000(triton_server: TritonServer) -> None:
    with (
        _orchestrator(triton_server.grpc_url, max_session_s=3.0) as server,
        raw_session(server.url) as session,
    ):
        rid = _streaming(session)
        error = session.until("error", timeout_s=10)
        assert error["error"]["code"] == "session_expired"
        assert error["error"]["type"] == "invalid_request_error"
        assert error["error"]["message"] == "Your session hit the maximum duration of 3 seconds."
        done = [e for e in session.events if e["type"] == "response.done"]
        assert [d["response"]["id"] for d in done] == [rid], "no terminal before the close"
        assert done[0]["response"]["status"] == "cancelled"
        assert _closed(session.ws) == (1000, "session expired after 3 seconds")


def _null_triton(log: Path) -> TritonServer:
    config = TritonConfig(
        model_repository=REPO_ROOT / "model_repository",
        http_port=free_port(),
        grpc_port=free_port(),
        metrics_port=free_port(),
        models=("null", "vad", "cancel", "turn"),
        log_file=log,
    )
    return TritonServer(config)


def _ready(server: BackgroundServer) -> dict[str, bool]:
    endpoints: dict[str, bool] = httpx.get(f"{server.http_url}/readyz").json()["endpoints"]
    return endpoints


def test_a_hung_endpoint_fails_the_response_in_time_and_the_session_recovers(
    tmp_path: Path,
) -> None:
    triton = _null_triton(tmp_path / "triton.log")
    triton.start()
    assert triton.pid is not None
    url = triton.config.grpc_url
    try:
        with (
            _orchestrator(url, first_chunk_timeout_s=2.0, chunk_timeout_s=1.0) as server,
            raw_session(server.url) as session,
        ):
            rid = _streaming(session)
            os.killpg(triton.pid, signal.SIGSTOP)
            try:
                stopped_at = time.monotonic()
                done = session.until("response.done", timeout_s=10)["response"]
                took = time.monotonic() - stopped_at
                assert done["id"] == rid and done["status"] == "failed", done
                message = done["status_details"]["error"]["message"]
                assert "went silent mid-response for 1 s" in message, message
                assert took < 1.0 + 1.5, took
                assert _ready(server) == {url: False}
                # While it is down, new responses fail at once and the session goes on.
                _ask_text(session, "Are you there?")
                down = session.until("response.done", timeout_s=5)["response"]
                assert down["status"] == "failed"
                assert "no Triton endpoint is ready" in str(down["status_details"])
            finally:
                os.killpg(triton.pid, signal.SIGCONT)
            _wait_for("the endpoint back up", lambda: _ready(server) == {url: True}, 30)
            _manual(session, max_tokens=3)
            again = _ask_text(session, "Say hello.")
            done = session.until("response.done", timeout_s=30)["response"]
            assert done["id"] == again and done["status"] == "completed", done
    finally:
        os.killpg(triton.pid, signal.SIGCONT)
        triton.stop()


def _refused_while_draining(url: str) -> None:
    with connect(url, open_timeout=10) as ws:
        first = json.loads(ws.recv(timeout=10))
        assert first["type"] == "error", first
        assert first["error"]["code"] == "server_shutting_down"
        assert _closed(ws) == (1013, "server is shutting down")


def _shut_down(session: RawSession, rid: str) -> None:
    """The closing sequence of a drained session with a generating response."""
    done = session.until("response.done", timeout_s=10)["response"]
    assert done["id"] == rid and done["status"] == "cancelled", done
    error = session.until("error", timeout_s=10)["error"]
    assert error["code"] == "server_shutting_down", error
    assert _closed(session.ws) == (1001, "server is shutting down")


def test_drain_closes_sessions_1001_refuses_new_ones_and_cuts_stragglers(
    triton_server: TritonServer,
) -> None:
    drain_s = 3.0
    config = {"drain_timeout_s": drain_s, "slow_client_timeout_s": 30.0, "send_queue": 8}
    with _orchestrator(triton_server.grpc_url, **config) as server:
        with (
            raw_session(server.url) as good,
            _small_window_session(server.url) as stuck,
        ):
            rid = _streaming(good)
            _streaming(stuck)
            _stop_reading(stuck)
            time.sleep(0.5)  # the stuck session's outbox fills
            server.drain()
            began = time.monotonic()
            _shut_down(good, rid)
            # The stuck session holds the drain open: meanwhile, no new sessions.
            response = httpx.get(f"{server.http_url}/readyz")
            assert response.status_code == 503 and response.json()["draining"] is True
            _refused_while_draining(server.url)
            assert server.wait_stopped(drain_s + 5), "serve() did not return after the drain"
            took = time.monotonic() - began
            assert drain_s - 0.5 < took < drain_s + 3, took
            code, _ = _closed(stuck.ws)
            assert code != 1001


_CLIENT = textwrap.dedent(
    """
    import json, sys, time
    from websockets.sync.client import connect

    ws = connect(sys.argv[1], max_size=None)
    def until(kind):
        while True:
            event = json.loads(ws.recv(timeout=30))
            if event["type"] == kind:
                return event
    until("session.created")
    ws.send(json.dumps({"type": "session.update", "session": {"type": "realtime",
        "max_output_tokens": int(sys.argv[2]),
        "audio": {"input": {"turn_detection": None}}}}))
    ws.send(json.dumps({"type": "response.create"}))
    rid = until("response.created")["response"]["id"]
    until("response.output_audio.delta")
    print(rid, flush=True)
    time.sleep(3600)
    """
)


def test_a_client_process_killed_mid_response_has_its_stream_cancelled_after_the_grace(
    triton_server: TritonServer,
) -> None:
    grace_s = 2.0
    with _orchestrator(triton_server.grpc_url, disconnect_grace_s=grace_s) as server:
        client = subprocess.Popen(
            [sys.executable, "-c", _CLIENT, server.url, str(LONG)],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert client.stdout is not None
            rid = client.stdout.readline().strip()
            assert rid.startswith("resp_"), rid
            assert _metric(server.http_url, "turntaker_sessions_active") == 1
        finally:
            client.kill()  # the kernel closes its socket: no close frame
            client.wait()
        lost = time.monotonic()
        # The grace: the session waits for a resume and its response goes on.
        _wait_for(
            "the session in its grace",
            lambda: _metric(server.http_url, "turntaker_sessions_in_grace") == 1,
            5,
        )
        request_id = pipeline_request_id(server.config, rid)
        with triton_server.board() as board:
            assert not board.stops(request_id)
        assert "null" in _stopped(triton_server, request_id, timeout_s=grace_s + 10)
        assert time.monotonic() - lost > grace_s - 0.5
        _wait_for(
            "the session's end",
            lambda: _metric(server.http_url, "turntaker_sessions_active") == 0,
            5,
        )
        assert _metric(server.http_url, "turntaker_sessions_in_grace") == 0
        ends = _metric(server.http_url, "turntaker_session_ends_total", 'reason="grace_expired"')
        assert ends == 1


def test_sigterm_drains_turntaker_serve_and_it_exits_0(
    triton_server: TritonServer, tmp_path: Path
) -> None:
    port = free_port()
    drain_s = 5
    env = {**os.environ, "TURNTAKER_DRAIN_TIMEOUT_S": str(drain_s), "HF_HUB_OFFLINE": "1"}
    log = (tmp_path / "serve.log").open("w")
    command = [str(Path(sys.executable).parent / "turntaker"), "serve", "--port", str(port)]
    command += ["--triton-url", triton_server.grpc_url, "--pipeline", "null"]
    serve = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:

        def up() -> bool:
            assert serve.poll() is None, (tmp_path / "serve.log").read_text()
            try:
                return httpx.get(f"http://127.0.0.1:{port}/readyz").status_code == 200
            except httpx.TransportError:
                return False

        _wait_for("turntaker serve up", up, 60)
        with raw_session(f"ws://127.0.0.1:{port}/v1/realtime") as session:
            rid = _streaming(session)
            serve.send_signal(signal.SIGTERM)
            began = time.monotonic()
            _shut_down(session, rid)
        assert serve.wait(drain_s + 5) == 0, (tmp_path / "serve.log").read_text()
        assert time.monotonic() - began < drain_s
        assert "drained and stopped" in (tmp_path / "serve.log").read_text()
    finally:
        if serve.poll() is None:
            serve.kill()
            serve.wait()
        log.close()

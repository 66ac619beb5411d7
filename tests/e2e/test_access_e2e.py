"""Access control against the real server: keys, origins, limits, over real WebSockets.

A server of its own with keys from a file and from `TURNTAKER_API_KEYS`, on the session's
tritonserver; driven with the official `openai` SDK and with raw `websockets` where a browser's
handshake (subprotocols, Origin) is the point.
"""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import AsyncOpenAI
from prometheus_client.parser import text_string_to_metric_families
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect
from websockets.typing import Origin, Subprotocol

from orchestrator.service.config import load_config
from orchestrator.service.serve import BackgroundServer
from orchestrator.triton import TritonServer
from tests.conftest import free_port

ALICE, BOB, CAROL = "sk-alice-0123456789", "sk-bob-0123456789", "sk-carol-0123456789"
APPEND_RATE = 48_000  # bytes/s: real time for pcm16 at 24 kHz
SESSIONS_PER_KEY = 2
EVIL = Origin("http://evil.example")


@pytest.fixture(scope="module")
def keyed_server(
    triton_server: TritonServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BackgroundServer]:
    keys = tmp_path_factory.mktemp("access") / "keys"
    keys.write_text(f"# test keys\nalice:{ALICE}\n\nbob:{BOB}\n")
    config = load_config(
        env={"TURNTAKER_API_KEYS": f"carol:{CAROL}"},
        overrides={
            "port": free_port(),
            "triton_urls": (triton_server.grpc_url,),
            "api_keys_file": keys,
            "max_sessions_per_key": SESSIONS_PER_KEY,
            "append_bytes_per_s_per_key": APPEND_RATE,
            "append_burst_s": 1.0,
        },
    )
    with BackgroundServer(config) as server:
        yield server


def _open(server: BackgroundServer, key: str | None = None, **options: Any) -> ClientConnection:
    headers = {"Authorization": f"Bearer {key}"} if key is not None else None
    return connect(server.url, additional_headers=headers, open_timeout=10, **options)


def _refusal(ws: ClientConnection) -> tuple[dict[str, Any], int, str]:
    """The error event a refused client reads first, then the close code and reason."""
    error: dict[str, Any] = json.loads(ws.recv(timeout=10))
    with pytest.raises(ConnectionClosed) as closed:
        ws.recv(timeout=10)
    assert closed.value.rcvd is not None, "the server sent no close frame"
    return error, closed.value.rcvd.code, closed.value.rcvd.reason


def _created(ws: ClientConnection) -> dict[str, Any]:
    event: dict[str, Any] = json.loads(ws.recv(timeout=10))
    assert event["type"] == "session.created", event
    return event


def _counter(server: BackgroundServer, name: str, **labels: str) -> float:
    text = httpx.get(
        f"{server.http_url}/metrics", headers={"Authorization": f"Bearer {ALICE}"}
    ).text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())
    )


async def _sdk_first_events(server: BackgroundServer, key: str) -> tuple[Any, Exception | None]:
    """The first event the openai SDK reads, and how the connection ended (None: still open)."""
    client = AsyncOpenAI(api_key=key, base_url=server.http_url + "/v1", max_retries=0)
    async with client.realtime.connect(model="turntaker") as conn:
        first = await asyncio.wait_for(conn.recv(), 10)
        try:
            await asyncio.wait_for(conn.recv(), 2)
        except TimeoutError:
            return first, None
        except ConnectionClosed as closed:
            return first, closed
        return first, None


def _sdk(server: BackgroundServer, key: str) -> tuple[Any, Exception | None]:
    # A thread of its own: the browser tests' Playwright keeps an event loop running in the
    # main thread for the whole session, where asyncio.run() refuses to start.
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, _sdk_first_events(server, key)).result()


def test_the_openai_sdk_with_the_right_key_gets_a_session(keyed_server: BackgroundServer) -> None:
    first, ended = _sdk(keyed_server, ALICE)
    assert first.type == "session.created", first
    assert ended is None


def test_the_openai_sdk_with_a_wrong_key_reads_why_and_is_closed_with_1008(
    keyed_server: BackgroundServer,
) -> None:
    first, ended = _sdk(keyed_server, ALICE + "x")
    assert first.type == "error" and first.error.code == "invalid_api_key", first
    assert isinstance(ended, ConnectionClosed) and ended.rcvd is not None
    assert (ended.rcvd.code, ended.rcvd.reason) == (1008, "invalid API key")


def test_a_browser_key_subprotocol_is_accepted_and_answered_with_realtime(
    keyed_server: BackgroundServer,
) -> None:
    port = keyed_server.config.port
    with _open(
        keyed_server,
        subprotocols=[Subprotocol("realtime"), Subprotocol(f"openai-insecure-api-key.{BOB}")],
        origin=Origin(f"http://127.0.0.1:{port}"),  # the bundled page: same host
    ) as ws:
        assert ws.subprotocol == "realtime"  # never the key one
        _created(ws)


def test_a_missing_or_wrong_key_is_closed_with_1008_and_a_reason(
    keyed_server: BackgroundServer,
) -> None:
    # Loopback is no exemption once keys are configured.
    with _open(keyed_server) as ws:
        error, code, reason = _refusal(ws)
    assert error["type"] == "error" and error["error"]["code"] == "missing_api_key"
    assert code == 1008 and "missing API key" in reason and "Bearer" in reason
    with _open(
        keyed_server,
        subprotocols=[Subprotocol("realtime"), Subprotocol("openai-insecure-api-key.sk-wrong")],
    ) as ws:
        assert ws.subprotocol == "realtime"
        error, code, reason = _refusal(ws)
    assert (error["error"]["code"], code, reason) == ("invalid_api_key", 1008, "invalid API key")


def test_a_foreign_origin_is_refused_even_with_the_right_key(
    keyed_server: BackgroundServer,
) -> None:
    with _open(keyed_server, ALICE, origin=EVIL) as ws:
        error, code, reason = _refusal(ws)
    assert error["error"]["code"] == "origin_not_allowed"
    assert code == 1008 and reason.startswith("origin not allowed")


def test_a_foreign_origin_is_refused_on_the_keyless_loopback_server(
    realtime_server: BackgroundServer,
) -> None:
    # The CSRF case: any web page the local user opens could dial ws://127.0.0.1.
    with connect(realtime_server.url, origin=EVIL, open_timeout=10) as ws:
        error, code, _ = _refusal(ws)
    assert (error["error"]["code"], code) == ("origin_not_allowed", 1008)


def test_too_many_sessions_for_a_key_is_1013_until_one_ends(
    keyed_server: BackgroundServer,
) -> None:
    with ExitStack() as held:
        sessions = [held.enter_context(_open(keyed_server, CAROL)) for _ in range(SESSIONS_PER_KEY)]
        for ws in sessions:
            _created(ws)
        # Another key is not affected.
        with _open(keyed_server, ALICE) as other:
            _created(other)
        with _open(keyed_server, CAROL) as ws:
            error, code, reason = _refusal(ws)
        assert error["error"]["code"] == "session_limit_reached"
        assert code == 1013 and "try again later" in reason
        sessions[0].close()
        # The slot comes back once the server has seen the close.
        deadline = time.monotonic() + 10
        while True:
            with _open(keyed_server, CAROL) as ws:
                event = json.loads(ws.recv(timeout=10))
            if event["type"] == "session.created":
                break
            assert event["error"]["code"] == "session_limit_reached", event
            assert time.monotonic() < deadline, "the closed session's slot never came back"
            time.sleep(0.1)


def test_appends_over_the_key_rate_get_errors_and_the_session_goes_on(
    keyed_server: BackgroundServer,
) -> None:
    quarter_s = base64.b64encode(bytes(APPEND_RATE // 4)).decode()  # 250 ms of silence
    with _open(keyed_server, BOB) as ws:
        _created(ws)
        for n in range(12):  # 3 s of audio at once: the burst is 1 s
            ws.send(
                json.dumps(
                    {"type": "input_audio_buffer.append", "event_id": f"a{n}", "audio": quarter_s}
                )
            )
        ws.send(json.dumps({"type": "conversation.context.retrieve", "event_id": "ctx"}))
        events = []
        while not events or events[-1]["type"] != "conversation.context":
            events.append(json.loads(ws.recv(timeout=10)))
    errors = [e["error"] for e in events if e["type"] == "error"]
    assert errors, "no append was refused"
    assert {e["code"] for e in errors} == {"rate_limit_exceeded"}
    assert {e["type"] for e in errors} == {"invalid_request_error"}
    # Roughly the burst passes (plus what trickles in meanwhile); each refusal names its append.
    assert 6 <= len(errors) <= 9, errors
    assert all(e["event_id"].startswith("a") for e in errors)
    assert _counter(keyed_server, "turntaker_refusals_total", reason="rate_limit_exceeded") >= 6


def test_metrics_need_a_key_and_count_refusals_and_closes(
    keyed_server: BackgroundServer,
) -> None:
    base = keyed_server.http_url
    missing = httpx.get(f"{base}/metrics")
    assert missing.status_code == 401 and missing.headers["www-authenticate"] == "Bearer"
    wrong = httpx.get(f"{base}/metrics", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    assert httpx.get(f"{base}/healthz").status_code == 200  # probes stay open
    before = {
        reason: _counter(keyed_server, "turntaker_refusals_total", reason=reason)
        for reason in ("missing_api_key", "invalid_api_key", "origin_not_allowed")
    }
    closes_1008 = _counter(keyed_server, "turntaker_session_closes_total", code="1008")
    with _open(keyed_server) as ws:
        _refusal(ws)
    with _open(keyed_server, "sk-wrong") as ws:
        _refusal(ws)
    with _open(keyed_server, ALICE, origin=EVIL) as ws:
        _refusal(ws)
    after = {
        reason: _counter(keyed_server, "turntaker_refusals_total", reason=reason)
        for reason in before
    }
    assert after == {reason: count + 1 for reason, count in before.items()}
    assert _counter(keyed_server, "turntaker_session_closes_total", code="1008") == closes_1008 + 3
    assert _counter(keyed_server, "turntaker_admissions_total", key="alice") >= 1
    # The names of keys appear in metrics, never the keys.
    text = httpx.get(f"{base}/metrics", headers={"Authorization": f"Bearer {CAROL}"}).text
    assert 'key="alice"' in text and ALICE not in text and BOB not in text


def _non_loopback_address() -> str | None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.123", 9))  # no packet is sent: this only picks a route
        except OSError:
            return None
        address: str = probe.getsockname()[0]
    return None if address.startswith("127.") else address


def test_without_keys_only_loopback_clients_are_admitted(
    triton_server: TritonServer, tmp_path: Path
) -> None:
    address = _non_loopback_address()
    if address is None:
        pytest.skip("this machine has no non-loopback IPv4 address")
    port = free_port()
    config = load_config(
        env={},
        overrides={"host": "0.0.0.0", "port": port, "triton_urls": (triton_server.grpc_url,)},
    )
    with BackgroundServer(config) as server:
        with connect(f"ws://127.0.0.1:{port}/v1/realtime", open_timeout=10) as ws:
            _created(ws)
        with connect(f"ws://{address}:{port}/v1/realtime", open_timeout=10) as ws:
            error, code, reason = _refusal(ws)
        assert (error["error"]["code"], code) == ("loopback_only", 1008)
        assert "TURNTAKER_API_KEYS" in reason
        assert httpx.get(f"http://{address}:{port}/metrics").status_code == 403
        assert httpx.get(f"http://127.0.0.1:{port}/metrics").status_code == 200
        assert server.config.api_keys == ()

"""The ASGI app: `/v1/realtime` (docs/protocol.md), `/healthz`, `/readyz`, `/metrics`.

A thin I/O layer in the h11/wsproto manner: it moves WebSocket messages between the socket and
a connection (sessions/connection.py), whose session lives in the host (sessions/host.py),
and knows nothing of the protocol beyond text frames. The message limits and close codes under
it are ws_transport.py's.
"""

from __future__ import annotations

import logging
import os
import socket
import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import trio
from starlette.applications import Starlette
from starlette.requests import HTTPConnection, Request
from starlette.responses import FileResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.websockets import WebSocket, WebSocketDisconnect

from orchestrator.protocol.codec import ServerEventEncoder, error_event
from orchestrator.protocol.errors import ProtocolError
from orchestrator.service.access import AccessControl, Admitted, Handshake, Lease, Refused
from orchestrator.service.backends.endpoints import EndpointPool
from orchestrator.service.config import ServiceConfig
from orchestrator.service.metrics import Metrics
from orchestrator.service.sessions.connection import Connection
from orchestrator.service.sessions.host import SessionHost
from orchestrator.service.sessions.services import AppendBudget, SessionServices
from orchestrator.session import ending

log = logging.getLogger("turntaker.session")

STATIC_DIR = Path(__file__).resolve().parent / "static"


@dataclass
class AppState:
    config: ServiceConfig
    metrics: Metrics
    pool: EndpointPool
    services: SessionServices
    access: AccessControl
    # The open sessions, apart from their connections (resume, gauges, draining).
    host: SessionHost
    # Set by `drain()`: new sessions are refused (1013) and /readyz answers 503.
    draining: trio.Event = field(default_factory=trio.Event)
    # The open connections' handlers: a drain waits for their close frames to be written.
    connections: int = 0
    connections_closed: trio.Event = field(default_factory=trio.Event)

    def __post_init__(self) -> None:
        self.metrics.input_backlog.set_function(
            lambda: float(sum(s.input_backlog for s in self.host.sessions.values()))
        )


def build_app(state: AppState) -> Starlette:
    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(request: Request) -> Response:
        endpoints = {e.url: e.healthy for e in state.pool.endpoints}
        draining = state.draining.is_set()
        ready = state.pool.any_healthy and not draining
        return JSONResponse(
            {
                "ready": ready,
                "draining": draining,
                "endpoints": endpoints,
                "models": list(state.pool.models),
            },
            status_code=200 if ready else 503,
        )

    async def metrics(request: Request) -> Response:
        # Open to loopback while no keys are configured; with keys, scrapers send one too.
        who = state.access.authenticate(_handshake(request))
        if isinstance(who, Refused):
            _count_refusal(state.metrics, who)
            challenge = {"WWW-Authenticate": "Bearer"} if who.http_status == 401 else None
            return PlainTextResponse(who.message, status_code=who.http_status, headers=challenge)
        return PlainTextResponse(
            state.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8"
        )

    async def index(request: Request) -> Response:
        return FileResponse(STATIC_DIR / "index.html", media_type="text/html")

    async def realtime(ws: WebSocket) -> None:
        # Browsers cannot set headers and offer the "realtime" subprotocol (plus a key one,
        # never echoed).
        offered = ws.scope.get("subprotocols") or []
        if state.draining.is_set() and state.config.route_id:
            # Behind a balancer (a route id: `--workers`, deploy/): refused before the
            # upgrade, so that the balancer hands the connection, a resume of a session
            # drained here included, to another worker (deploy/nginx.conf
            # `proxy_next_upstream http_503`). A client reaching this process directly gets
            # the 1013 close below, which it can read.
            await _deny_draining(state.metrics, ws)
            return
        decision = state.access.admit(_handshake(ws), _resuming(state, ws))
        # Refusals are accepted and then closed: a close frame's code and reason reach browsers
        # and the openai SDK (a refused handshake is a bare HTTP 403 to both), and the SDK
        # retries 1013 (try again later) but never 1008.
        try:
            await ws.accept(subprotocol="realtime" if "realtime" in offered else None)
        except BaseException:
            if isinstance(decision, Admitted):
                decision.lease.release()  # a slot must not leak when the client is gone
            raise
        if isinstance(decision, Refused):
            await _refuse(state.metrics, ws, decision)
            return
        lease = decision.lease
        if state.draining.is_set():
            # Checked after the accept's await and with none before the session is registered
            # below, so that no session opens unseen by drain().
            lease.release()
            await _refuse_draining(state.metrics, ws)
            return
        state.metrics.admissions.labels(lease.identity.name).inc()
        connection = state.host.new_connection()
        state.host.open(
            new_session_id(state.config),
            connection,
            identity=lease.identity.name,
            release=lease.release,
            append_budget=_append_budget(state.metrics, lease),
        )
        state.connections += 1
        try:
            await _carry(state, ws, connection)
        finally:
            state.connections -= 1
            if state.connections == 0:
                state.connections_closed.set()
                state.connections_closed = trio.Event()

    return Starlette(
        routes=[
            WebSocketRoute("/v1/realtime", realtime),
            Route("/healthz", healthz),
            Route("/readyz", readyz),
            Route("/metrics", metrics),
            Route("/", index),
            Mount("/static", StaticFiles(directory=STATIC_DIR), name="static"),
        ]
    )


async def drain(state: AppState, timeout_s: float) -> None:
    """Graceful shutdown: refuse new sessions, end each open one (its generating response
    cancelled with a terminal `response.done`, then an `error` event `server_shutting_down`,
    then close 1001; one in its grace just ends) and wait up to `timeout_s` for all of them
    and their connections to close."""
    state.draining.set()
    sessions = state.host.sessions
    log.info("draining: %d open session(s), up to %g s", len(sessions), timeout_s)
    state.host.shut_down_all()
    with trio.move_on_after(timeout_s):
        await state.host.empty.wait()
        while state.connections:
            await state.connections_closed.wait()
    if sessions or state.connections:
        log.warning("drain timeout: %d session(s) still open are cut", len(sessions))


def _resuming(state: AppState, ws: WebSocket) -> Callable[[str], bool]:
    """Whether the connection's `?session_id=` names one of an identity's sessions here in its
    grace (access rule 6: such a connection may pass the key's session limit)."""
    wanted = ws.query_params.get("session_id")

    def check(identity: str) -> bool:
        actor = state.host.sessions.get(wanted) if wanted else None
        return actor is not None and actor.link.detached and actor.link.identity == identity

    return check


def new_session_id(config: ServiceConfig) -> str:
    """`sess_<hex>`, or `sess_<route_id>_<hex>` behind a load balancer (deploy/nginx.conf routes
    a resume's `?session_id=` on the route id)."""
    route = f"{config.route_id}_" if config.route_id else ""
    return f"sess_{route}{uuid.uuid4().hex[:16]}"


def _handshake(conn: HTTPConnection) -> Handshake:
    return Handshake(
        client_host=conn.client.host if conn.client is not None else None,
        headers=conn.headers,
        subprotocols=tuple(conn.scope.get("subprotocols") or ()),
    )


def _count_refusal(metrics: Metrics, refused: Refused) -> None:
    key = refused.identity.name if refused.identity is not None else ""
    metrics.refusals.labels(refused.reason, key).inc()


async def _refuse(metrics: Metrics, ws: WebSocket, refused: Refused) -> None:
    """An `error` event (what SDK event loops read), then the close code and reason."""
    _count_refusal(metrics, refused)
    client = ws.client.host if ws.client is not None else "?"
    log.info("refused a session from %s: %s (%s)", client, refused.reason, refused.message)
    error = error_event(ProtocolError(code=refused.reason, message=refused.message))
    with trio.move_on_after(1):
        try:
            await ws.send_text(ServerEventEncoder().encode(error).decode())
            await ws.close(code=refused.close_code, reason=refused.message)
        except Exception:
            pass  # already closed by the peer
    metrics.session_closes.labels(str(refused.close_code)).inc()


async def _deny_draining(metrics: Metrics, ws: WebSocket) -> None:
    """HTTP 503 at the handshake (ending.py rule 9, behind a balancer)."""
    metrics.refusals.labels("server_shutting_down", "").inc()
    denial = PlainTextResponse(
        "server is draining; try another instance", status_code=503, headers={"Retry-After": "1"}
    )
    with trio.move_on_after(1):
        try:
            await ws.send_denial_response(denial)
        except Exception:
            pass  # already gone


async def _refuse_draining(metrics: Metrics, ws: WebSocket) -> None:
    """An `error` event, then the draining refusal's code (orchestrator/session/ending.py)."""
    end = ending.refused_draining()
    metrics.refusals.labels("server_shutting_down", "").inc()
    message = "The server is shutting down; try again shortly."
    error = error_event(ProtocolError(code="server_shutting_down", message=message))
    with trio.move_on_after(1):
        try:
            await ws.send_text(ServerEventEncoder().encode(error).decode())
            await ws.close(code=end.code, reason=end.reason)
        except Exception:
            pass  # already closed by the peer
    metrics.session_closes.labels(str(end.code)).inc()


def _append_budget(metrics: Metrics, lease: Lease) -> AppendBudget:
    def take(nbytes: int) -> bool:
        if lease.take_append(nbytes):
            return True
        metrics.refusals.labels("rate_limit_exceeded", lease.identity.name).inc()
        return False

    return take


async def _carry(state: AppState, ws: WebSocket, connection: Connection) -> None:
    """Moves one connection's messages until the server is done with it (its session ended,
    or another connection took it over) or the client is gone; then closes the socket with
    the server's code. The session itself lives in the host, not here."""
    code, reason = 1000, ""
    try:
        async with trio.open_nursery() as nursery:
            out_done = trio.Event()
            nursery.start_soon(_pump_out, connection, ws, out_done)
            nursery.start_soon(_pump_in, connection, ws)
            # Cancelled or failed: no time for flushing, only for getting the pumps out.
            flush_s, unstick_s = 0.0, _UNSTICK_S
            try:
                await connection.finished.wait()
                end = connection.end
                if end is not None and not end.flush:
                    unstick_s = 0.0  # the client is not reading: a send is stuck for sure
                elif connection.peer_code is None:
                    flush_s = state.config.slow_client_timeout_s
            finally:
                await _settle(ws, nursery.cancel_scope, out_done, flush_s, unstick_s)
        if connection.end is not None:
            code, reason = connection.end.code, connection.end.reason
    except Exception:
        # A bug, not the client's doing: say so with 1011 rather than a silent close.
        log.exception(
            "connection of %s failed", connection.session and connection.session.session_id
        )
        failed = ending.connection_failed()
        code, reason = failed.code, failed.reason
    finally:
        # hypercorn reports 1006 for a close the client starts without a frame; the server's
        # own codes are exact.
        closed = "client" if connection.peer_code is not None else str(code)
        state.metrics.session_closes.labels(closed).inc()
        if connection.peer_code is None:
            connection.peer_gone(1006)  # the socket goes now: the session is told if still ours
        with trio.CancelScope(shield=True), trio.move_on_after(1):
            try:
                await ws.close(code=code, reason=reason)
            except Exception:
                pass  # already closed by the peer


async def _pump_in(connection: Connection, ws: WebSocket) -> None:
    code = 1006
    try:
        while True:
            message = await ws.receive()
            if message["type"] == "websocket.disconnect":
                code = int(message.get("code") or 1005)
                break
            data = message.get("text")
            if data is None:
                data = message.get("bytes") or b""
            await connection.receive(data)
    except WebSocketDisconnect as gone:
        code = gone.code
    finally:
        if connection.end is None:  # not closed by the server: the client's side is gone
            connection.peer_gone(code)


async def _pump_out(connection: Connection, ws: WebSocket, done: trio.Event) -> None:
    """Sends the connection's outbox; `done` once it is sent out or the pump stopped.

    hypercorn (0.18, trio) writes each message with one `send_all` under a shielded cancel
    scope and a per-connection lock, and buffers nothing itself: memory per connection is the
    outbox (bounded in messages), one message in flight and the kernel's socket buffers. But
    a send to a client that stopped reading waits forever and cannot be cancelled; `_settle`
    cuts the connection under it.
    """
    try:
        async for item in connection.outbox:
            try:
                await ws.send_text(item[1])
            except (WebSocketDisconnect, RuntimeError, OSError):
                connection.peer_gone(1006)
                return
            connection.sent(item)
    finally:
        done.set()


# How long stopped pumps get to leave before a send still in progress counts as stuck.
_UNSTICK_S = 0.5


async def _settle(
    ws: WebSocket,
    pumps: trio.CancelScope,
    out_done: trio.Event,
    flush_s: float,
    unstick_s: float,
) -> None:
    """After the actor: let the outbox flush (up to `flush_s`, or until the server's own
    cancellation), stop both pumps, and cut the TCP connection if a send is still stuck
    `unstick_s` later (see _pump_out), which frees the pump and hypercorn's connection task.
    The stopping is shielded: a stuck pump would otherwise hold the session open forever.
    """
    try:
        with trio.move_on_after(flush_s):
            await out_done.wait()
    finally:
        with trio.CancelScope(shield=True):
            await _stop_pumps(ws, pumps, out_done, unstick_s)


async def _stop_pumps(
    ws: WebSocket, pumps: trio.CancelScope, out_done: trio.Event, unstick_s: float
) -> None:
    pumps.cancel()
    with trio.move_on_after(unstick_s):
        await out_done.wait()
    if not out_done.is_set():
        client, server = ws.scope.get("client"), ws.scope.get("server")
        if client is not None and server is not None:
            found = await trio.to_thread.run_sync(
                _cut_connection, (client[0], client[1]), (server[0], server[1])
            )
            log.info("cut the connection of %s:%s (found: %s)", client[0], client[1], found)


def _cut_connection(client: tuple[str, int], server: tuple[str, int]) -> bool:
    """Shuts down this process's TCP socket from `server` to `client` (found by its addresses
    among the open file descriptors, so no server internals are touched), with linger 0 so
    that closing it resets the connection and frees its buffers. A send blocked on it fails
    at once (EPIPE) and reads see the end. Linux (/proc)."""
    for name in os.listdir("/proc/self/fd"):
        try:
            if not os.readlink(f"/proc/self/fd/{name}").startswith("socket:"):
                continue
            dup = os.dup(int(name))
        except OSError:
            continue  # closed meanwhile
        try:
            sock = socket.socket(fileno=dup)
        except OSError:
            os.close(dup)
            continue
        with sock:
            try:
                peer, local = sock.getpeername(), sock.getsockname()
            except OSError:
                continue  # not connected (a listener, or gone)
            if not isinstance(peer, tuple) or (tuple(peer[:2]), tuple(local[:2])) != (
                client,
                server,
            ):
                continue
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already shut down or reset
            return True
    return False

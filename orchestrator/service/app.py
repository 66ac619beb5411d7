"""The ASGI app: `/v1/realtime` (docs/protocol.md), `/healthz`, `/readyz`, `/metrics`.

A thin I/O layer in the h11/wsproto manner: it moves WebSocket messages between the socket and
the session actor and knows nothing of the protocol beyond text frames.

Message sizes (docs/protocol.md rule 7) have two limits:
- `max_message_bytes` (15 MiB): the codec's. A bigger message still reaches the session and is
  answered with an `error` `message_too_large`; the session goes on.
- the transport limit, `transport_max_message_bytes()` (twice that plus a margin): hypercorn's
  own. Only a message beyond it closes the socket, with 1009 and a reason, and it is never held
  in memory whole (`install_transport_limit`). Between the two, every message is answered.
"""

from __future__ import annotations

import logging
import os
import socket
import struct
import uuid
from dataclasses import dataclass, field
from io import BytesIO, StringIO
from pathlib import Path
from typing import Any, Final

import hypercorn.protocol.events as hyper_events
import hypercorn.protocol.h2
import hypercorn.protocol.h11
import hypercorn.protocol.ws_stream as hyper_ws
import trio
from starlette.applications import Starlette
from starlette.requests import HTTPConnection, Request
from starlette.responses import FileResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.websockets import WebSocket, WebSocketDisconnect
from wsproto.connection import ConnectionState
from wsproto.events import CloseConnection, Message, Ping
from wsproto.frame_protocol import CloseReason

from orchestrator.protocol.codec import ServerEventEncoder, error_event
from orchestrator.protocol.errors import ProtocolError
from orchestrator.service.access import AccessControl, Admitted, Handshake, Lease, Refused
from orchestrator.service.config import ServiceConfig
from orchestrator.service.endpoints import EndpointPool
from orchestrator.service.metrics import Metrics
from orchestrator.service.session_actor import SessionActor
from orchestrator.service.session_services import AppendBudget, SessionServices

log = logging.getLogger("turntaker.session")

STATIC_DIR = Path(__file__).resolve().parent / "static"


# Above the codec's limit by at least that limit again, so that every message up to twice it is
# answered (`message_too_large`) rather than cut; the margin keeps "exactly twice" well inside.
TRANSPORT_MARGIN_BYTES: Final = 1024 * 1024


def transport_max_message_bytes(config: ServiceConfig) -> int:
    """hypercorn's WebSocket message limit (UTF-8 bytes of a text message, or bytes)."""
    return 2 * config.max_message_bytes + TRANSPORT_MARGIN_BYTES


def _wire_size(data: str | bytes) -> int:
    # wsproto hands text over decoded; count it as the UTF-8 it arrived as, so that the limit
    # bounds memory and means the same for text and binary messages. Chunks are at most one
    # socket read, so encoding a non-ASCII one costs what copying it does.
    if isinstance(data, bytes) or data.isascii():
        return len(data)
    return len(data.encode("utf-8", "surrogatepass"))


class _BoundedBuffer(hyper_ws.WebsocketBuffer):
    """hypercorn's message buffer, counting bytes and keeping nothing past the limit.

    hypercorn's own counts characters of text and, after its 1009, goes on appending whatever
    the client still sends of that message; this one drops it, so a client streaming a huge
    message costs the server at most the limit.
    """

    def extend(self, event: Message[Any]) -> None:
        data: str | bytes = event.data
        self.length += _wire_size(data)
        if self.length > self.max_length:
            self.value = None  # free what was buffered; length stays over: the rest is dropped
            raise hyper_ws.FrameTooLargeError()
        # A message is all text or all bytes (wsproto's TextMessage / BytesMessage).
        if isinstance(data, str):
            if not isinstance(self.value, StringIO):
                self.value = StringIO()
            self.value.write(data)
        else:
            if not isinstance(self.value, BytesIO):
                self.value = BytesIO()
            self.value.write(data)


class _LimitedWSStream(hyper_ws.WSStream):
    """hypercorn's WebSocket stream (0.17/0.18) with three fixes at its message limit.

    - The buffer is `_BoundedBuffer`: bytes counted, nothing kept past the limit.
    - The 1009 close says why (hypercorn's has no reason; a client should be told).
    - After the 1009 the rest of that read is still handled: hypercorn stops there, so a close
      reply that arrived in the same read as the end of the oversize message was never seen,
      and the connection hung until the client gave up.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.buffer = _BoundedBuffer(self.config.websocket_max_message_size)
        self._refused = False

    async def _handle_events(self) -> None:
        # hypercorn's loop, but `continue` after a too-big message instead of `break`.
        for event in self.connection.events():
            if isinstance(event, Message):
                try:
                    self.buffer.extend(event)
                except hyper_ws.FrameTooLargeError:
                    if not self._refused:  # once: the connection is closing from then on
                        self._refused = True
                        limit = self.config.websocket_max_message_size
                        await self._send_wsproto_event(
                            CloseConnection(
                                code=CloseReason.MESSAGE_TOO_BIG,
                                reason=f"message too big: over the transport limit of "
                                f"{limit} bytes",
                            )
                        )
                    continue
                if event.message_finished and self.app_put is not None:
                    await self.app_put(self.buffer.to_message())
                    self.buffer.clear()
            elif isinstance(event, Ping):
                await self._send_wsproto_event(event.response())
            elif isinstance(event, CloseConnection):
                if self.connection.state == ConnectionState.REMOTE_CLOSING:
                    await self._send_wsproto_event(event.response())
                await self.send(hyper_events.StreamClosed(stream_id=self.stream_id))


def install_transport_limit() -> bool:
    """Make hypercorn's HTTP/1.1 and HTTP/2 WebSocket streams `_LimitedWSStream`s.

    hypercorn has no hook for this, so the protocol modules' `WSStream` name is replaced
    (idempotent, process-wide; other hypercorn servers in the process gain the same fixes).
    Returns False, changing nothing, when this hypercorn lacks what the subclass relies on:
    then an oversize message still gets hypercorn's own 1009, and `test_input_limits_e2e`
    fails loudly.
    """
    # mypy checks the attributes against the installed hypercorn; this catches a later one
    # whose stream no longer has the methods the subclass replaces or calls.
    methods = ("_handle_events", "_send_wsproto_event", "_accept", "handle")
    if not all(callable(getattr(hyper_ws.WSStream, name, None)) for name in methods):
        log.warning("hypercorn's WSStream changed: the transport limit is hypercorn's own")
        return False
    for module in (hypercorn.protocol.h11, hypercorn.protocol.h2):
        setattr(module, "WSStream", _LimitedWSStream)  # noqa: B010 (not re-exported there)
    return True


@dataclass
class AppState:
    config: ServiceConfig
    metrics: Metrics
    pool: EndpointPool
    services: SessionServices
    access: AccessControl
    # The open sessions, by id: for gauges over all of them and for draining on shutdown.
    sessions: dict[str, SessionActor] = field(default_factory=dict)
    # Set by `drain()`: new sessions are refused (1013) and /readyz answers 503.
    draining: trio.Event = field(default_factory=trio.Event)
    # Set once draining and the last session has closed.
    drained: trio.Event = field(default_factory=trio.Event)

    def __post_init__(self) -> None:
        self.metrics.input_backlog.set_function(
            lambda: float(sum(s.input_backlog for s in self.sessions.values()))
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
        decision = state.access.admit(_handshake(ws))
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
        actor = SessionActor(
            f"sess_{uuid.uuid4().hex[:16]}",
            state.config,
            state.services,
            append_budget=_append_budget(state.metrics, lease),
        )
        state.sessions[actor.session_id] = actor
        state.metrics.sessions_total.inc()
        state.metrics.sessions_active.inc()
        code, reason = 1000, ""
        peer = _PeerClose()
        try:
            async with trio.open_nursery() as nursery:
                out_done = trio.Event()
                nursery.start_soon(_pump_out, actor, ws, out_done)
                nursery.start_soon(_pump_in, actor, ws, peer)
                # Cancelled or failed: no time for flushing, only for getting the pumps out.
                flush_s, unstick_s = 0.0, _UNSTICK_S
                try:
                    await actor.run()
                    if actor.end is not None and not actor.end.flush:
                        unstick_s = 0.0  # the client is not reading: a send is stuck for sure
                    else:
                        flush_s = state.config.slow_client_timeout_s
                finally:
                    await _settle(ws, nursery.cancel_scope, out_done, flush_s, unstick_s)
            if actor.end is not None:
                code, reason = actor.end.code, actor.end.reason
                log.info("session %s ended: %s (%d)", actor.session_id, reason, code)
        except Exception:
            # A bug, not the client's doing: say so with 1011 rather than a silent close.
            log.exception("session %s failed", actor.session_id)
            code, reason = 1011, "internal error; the session was closed"
        finally:
            lease.release()
            state.metrics.sessions_active.dec()
            # hypercorn reports 1006 for every close the client starts, whatever its frame
            # said, so those count as "client"; the server's own codes are exact.
            closed = "client" if peer.code is not None else str(code)
            state.metrics.session_closes.labels(closed).inc()
            with trio.CancelScope(shield=True), trio.move_on_after(1):
                try:
                    await ws.close(code=code, reason=reason)
                except Exception:
                    pass  # already closed by the peer
            # After the close frame: a drain waits for it to be written.
            state.sessions.pop(actor.session_id, None)
            if state.draining.is_set() and not state.sessions:
                state.drained.set()

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
    then close 1001) and wait up to `timeout_s` for all of them to close."""
    state.draining.set()
    open_now = list(state.sessions.values())
    log.info("draining: %d open session(s), up to %g s", len(open_now), timeout_s)
    for actor in open_now:
        actor.shut_down()
    if not state.sessions:
        state.drained.set()
    with trio.move_on_after(timeout_s):
        await state.drained.wait()
    if state.sessions:
        log.warning("drain timeout: %d session(s) still open are cut", len(state.sessions))


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


async def _refuse_draining(metrics: Metrics, ws: WebSocket) -> None:
    """1013 (try again later): the openai SDK retries it, and another instance may be up."""
    metrics.refusals.labels("server_shutting_down", "").inc()
    message = "The server is shutting down; try again shortly."
    error = error_event(ProtocolError(code="server_shutting_down", message=message))
    with trio.move_on_after(1):
        try:
            await ws.send_text(ServerEventEncoder().encode(error).decode())
            await ws.close(code=1013, reason="server is shutting down")
        except Exception:
            pass  # already closed by the peer
    metrics.session_closes.labels("1013").inc()


def _append_budget(metrics: Metrics, lease: Lease) -> AppendBudget:
    def take(nbytes: int) -> bool:
        if lease.take_append(nbytes):
            return True
        metrics.refusals.labels("rate_limit_exceeded", lease.identity.name).inc()
        return False

    return take


@dataclass
class _PeerClose:
    """The client's close code, when the client closed first (the metric counts theirs)."""

    code: int | None = None


async def _pump_in(actor: SessionActor, ws: WebSocket, peer: _PeerClose) -> None:
    try:
        while True:
            message = await ws.receive()
            if message["type"] == "websocket.disconnect":
                peer.code = int(message.get("code") or 1005)
                break
            data = message.get("text")
            if data is None:
                data = message.get("bytes") or b""
            await actor.receive(data)
    except WebSocketDisconnect:
        pass
    finally:
        await actor.client_gone()


async def _pump_out(actor: SessionActor, ws: WebSocket, done: trio.Event) -> None:
    """Sends the actor's outbox; `done` once it is sent out or the pump stopped.

    hypercorn (0.18, trio) writes each message with one `send_all` under a shielded cancel
    scope and a per-connection lock, and buffers nothing itself: memory per connection is the
    outbox (bounded in messages), one message in flight and the kernel's socket buffers. But
    a send to a client that stopped reading waits forever and cannot be cancelled; `_settle`
    cuts the connection under it.
    """
    try:
        async for text in actor.outgoing:
            try:
                await ws.send_text(text)
            except (WebSocketDisconnect, RuntimeError, OSError):
                await actor.client_gone()
                return
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

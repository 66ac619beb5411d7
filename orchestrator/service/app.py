"""The ASGI app: `/v1/realtime` (the contract), `/healthz`, `/readyz`, `/metrics`.

A thin I/O layer in the h11/wsproto manner: it moves WebSocket messages between the socket and
the session actor and knows nothing of the protocol beyond text frames.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from pathlib import Path

import trio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.websockets import WebSocket, WebSocketDisconnect

from orchestrator.service.config import ServiceConfig
from orchestrator.service.endpoints import EndpointPool
from orchestrator.service.metrics import Metrics
from orchestrator.service.session_actor import SessionActor, SessionServices

log = logging.getLogger("turntaker.session")

STATIC_DIR = Path(__file__).resolve().parent / "static"


@dataclass
class AppState:
    config: ServiceConfig
    metrics: Metrics
    pool: EndpointPool
    services: SessionServices


def build_app(state: AppState) -> Starlette:
    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(request: Request) -> Response:
        endpoints = {e.url: e.healthy for e in state.pool.endpoints}
        ready = state.pool.any_healthy
        return JSONResponse(
            {"ready": ready, "endpoints": endpoints, "models": list(state.pool.models)},
            status_code=200 if ready else 503,
        )

    async def metrics(request: Request) -> Response:
        return PlainTextResponse(
            state.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8"
        )

    async def index(request: Request) -> Response:
        return FileResponse(STATIC_DIR / "index.html", media_type="text/html")

    async def realtime(ws: WebSocket) -> None:
        # Browsers cannot set headers and offer the "realtime" subprotocol (plus a key one).
        offered = ws.scope.get("subprotocols") or []
        await ws.accept(subprotocol="realtime" if "realtime" in offered else None)
        actor = SessionActor(f"sess_{uuid.uuid4().hex[:16]}", state.config, state.services)
        state.metrics.sessions_total.inc()
        state.metrics.sessions_active.inc()
        code, reason = 1000, ""
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_pump_out, actor, ws)
                nursery.start_soon(_pump_in, actor, ws)
                await actor.run()
                nursery.cancel_scope.cancel()
        except Exception:
            # A bug, not the client's doing: say so with 1011 rather than a silent close.
            log.exception("session %s failed", actor.session_id)
            code, reason = 1011, "internal error; the session was closed"
        finally:
            state.metrics.sessions_active.dec()
            with trio.CancelScope(shield=True), trio.move_on_after(1):
                try:
                    await ws.close(code=code, reason=reason)
                except Exception:
                    pass  # already closed by the peer

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


async def _pump_in(actor: SessionActor, ws: WebSocket) -> None:
    try:
        while True:
            message = await ws.receive()
            if message["type"] == "websocket.disconnect":
                break
            data = message.get("text")
            if data is None:
                data = message.get("bytes") or b""
            await actor.receive(data)
    except WebSocketDisconnect:
        pass
    finally:
        await actor.client_gone()


async def _pump_out(actor: SessionActor, ws: WebSocket) -> None:
    async for text in actor.outgoing:
        try:
            await ws.send_text(text)
        except (WebSocketDisconnect, RuntimeError, OSError):
            await actor.client_gone()
            return

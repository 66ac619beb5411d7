"""`turntaker serve`: the local Triton (unless --triton-url) and the realtime server on Trio."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

import hypercorn.config
import hypercorn.trio
import trio

from orchestrator.service.access import AccessControl, AccessSettings, settings_from_config
from orchestrator.service.app import AppState, build_app, drain
from orchestrator.service.backends.endpoints import EndpointPool
from orchestrator.service.backends.response_actor import ResponseServices
from orchestrator.service.backends.transcriber import TritonTranscriber
from orchestrator.service.backends.turn_predictor import TritonTurnPredictor
from orchestrator.service.backends.vad_batcher import VadBatcher, VadBatcherConfig
from orchestrator.service.config import PIPELINES, ServiceConfig, load_config
from orchestrator.service.loop_lag import LagSink, probe_loop_lag
from orchestrator.service.metrics import Metrics
from orchestrator.service.sessions.host import SessionHost
from orchestrator.service.sessions.services import SessionServices, VadService
from orchestrator.service.store.base import SessionStore, StoreUnavailable
from orchestrator.service.store.factory import open_store
from orchestrator.service.store.writer import SnapshotWriter, WriteReport, WriteResult
from orchestrator.service.ws_transport import install_transport_limit, transport_max_message_bytes
from orchestrator.session.echo.double_talk import compile_now
from orchestrator.triton.launcher import TritonConfig, TritonServer
from turntaker_models.settings import default_cache_dir


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, help="TOML file with ServiceConfig fields")
    parser.add_argument("--host", help="listen address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="listen port (default 8000)")
    parser.add_argument(
        "--triton-url",
        action="append",
        dest="triton_urls",
        help="gRPC HOST:PORT of a running Triton (repeatable); default: start one locally",
    )
    parser.add_argument("--pipeline", choices=list(PIPELINES))
    parser.add_argument("--weights", type=Path, dest="omni_weights", help="Qwen3-Omni folder")
    parser.add_argument("--model-repository", type=Path)
    parser.add_argument(
        "--api-keys-file",
        type=Path,
        help="API keys, one per line (`name:key` or a key; `#` comments); also "
        "TURNTAKER_API_KEYS. Without keys only loopback clients are admitted",
    )
    parser.add_argument(
        "--allow-origin",
        action="append",
        dest="allow_origins",
        help="browser Origin allowed to connect, e.g. http://localhost:8000, or * "
        "(repeatable); default: only pages served by this server's host",
    )
    parser.add_argument("--max-sessions-per-key", type=int, help="open sessions (0: no limit)")
    parser.add_argument(
        "--append-bytes-per-s-per-key", type=int, help="input audio bytes/s (0: no limit)"
    )
    parser.add_argument(
        "--route-id",
        help="this process's name behind a load balancer (letters and digits; session ids "
        "carry it so that resumes are routed back here)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="N > 1: N realtime processes behind nginx on --port, sharing one Triton "
        "(deploy/nginx.conf)",
    )
    parser.add_argument(
        "--worker-respawn-s",
        type=float,
        help="with --workers: restart a dead worker after this long, doubling to 30 s while "
        "it keeps dying (0: never); default 1",
    )
    parser.add_argument(
        "--session-store",
        help="where sessions' snapshots are kept for a takeover: memory (this process, the "
        "default) or redis://HOST:PORT/DB; also TURNTAKER_SESSION_STORE",
    )


def config_from_args(args: argparse.Namespace) -> ServiceConfig:
    overrides = {
        "host": args.host,
        "port": args.port,
        "triton_urls": tuple(args.triton_urls) if args.triton_urls else None,
        "pipeline": args.pipeline,
        "omni_weights": args.omni_weights,
        "model_repository": args.model_repository,
        "api_keys_file": args.api_keys_file,
        "allow_origins": tuple(args.allow_origins) if args.allow_origins else None,
        "max_sessions_per_key": args.max_sessions_per_key,
        "append_bytes_per_s_per_key": args.append_bytes_per_s_per_key,
        "route_id": args.route_id,
        "worker_respawn_s": args.worker_respawn_s,
        "session_store": args.session_store,
    }
    return load_config(file=args.config, overrides=overrides)


def access_settings(config: ServiceConfig) -> AccessSettings:
    """The keys file is read here, once, at start-up (access.py itself does no I/O)."""
    text = config.api_keys_file.read_text() if config.api_keys_file is not None else None
    return settings_from_config(config, text)


# Used where an endpoint has them, on any pipeline, but an endpoint without them is still
# healthy: `asr_partial` (overlap partials; `asr` with PARTIAL serves them otherwise,
# backends/transcriber.py; a server of the `null` pipeline may have either for a bench).
OPTIONAL_MODELS = ("asr_partial",)


def needed_models(config: ServiceConfig) -> tuple[str, ...]:
    """What a Triton started for `config` loads (the optional models included)."""
    # `turn` (Smart Turn) serves semantic_vad on every pipeline.
    if config.pipeline == "null":
        # No speech is understood: input transcription, if a session asks, reports a failure.
        return ("null", "vad", "cancel", "turn")
    return (config.pipeline, "vad", "asr", "asr_partial", "cancel", "turn")


def required_models(config: ServiceConfig) -> tuple[str, ...]:
    """What an endpoint must have ready to be healthy."""
    return tuple(m for m in needed_models(config) if m not in OPTIONAL_MODELS)


@contextmanager
def local_triton(config: ServiceConfig) -> Iterator[TritonServer]:
    """Start Triton from a thread that lives as long as it (the parent-death signal is per
    thread), say where it is, and stop it on the way out."""
    server = TritonServer(
        TritonConfig(
            model_repository=config.model_repository,
            http_port=config.triton_http_port,
            grpc_port=config.triton_grpc_port,
            metrics_port=config.triton_metrics_port,
            models=needed_models(config),
            omni_weights=config.omni_weights,
            model_threads=config.model_threads,
            omni_batching=config.omni_batching,
            omni_max_streams=config.omni_max_streams,
            omni_max_positions=config.omni_max_positions,
            tts_voice=config.tts_voice,
            # The server's own log would drown the realtime server's lines.
            log_file=default_cache_dir() / "tritonserver.log",
        )
    )
    started = threading.Event()
    stop = threading.Event()
    failure: list[BaseException] = []

    def keeper() -> None:
        try:
            server.start()
        except BaseException as error:
            failure.append(error)
            started.set()
            return
        started.set()
        stop.wait()
        server.stop()

    thread = threading.Thread(target=keeper, name="triton-keeper", daemon=True)
    thread.start()
    started.wait()
    if failure:
        raise failure[0]
    print(
        f"turntaker serve: Triton ready in {server.startup_s or 0:.1f} s at "
        f"{server.grpc_url} (log {server.config.log_file})",
        flush=True,
    )
    try:
        yield server
    finally:
        stop.set()
        thread.join()


async def serve(
    config: ServiceConfig,
    *,
    metrics: Metrics | None = None,
    vad: VadService | None = None,
    stop: trio.Event | None = None,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serves until SIGTERM (main thread only: signals reach no other) or until `stop` is
    set, then drains (app.drain: sessions get their closing events and 1001, new ones 1013,
    for up to `drain_timeout_s`), cancels what is left and returns.

    `metrics` and `vad` are for benchmarks: a sample sink, one silero per session.
    """
    metrics = metrics or Metrics()
    stop = trio.Event() if stop is None else stop
    pool = EndpointPool(
        config.triton_urls, required_models(config), metrics, optional=OPTIONAL_MODELS
    )
    await pool.check_all(timeout_s=config.health_timeout_s)
    # Each session's snapshots (orchestrator/service/store/): a store that cannot be reached
    # at start is an error here, before any session. Closed after the last session's end.
    store = await open_store(config.session_store)
    try:
        await _serve(config, metrics, vad, stop, pool, store, task_status)
    finally:
        with trio.CancelScope(shield=True), trio.move_on_after(2.0):
            await store.close()


async def _serve(
    config: ServiceConfig,
    metrics: Metrics,
    vad: VadService | None,
    stop: trio.Event,
    pool: EndpointPool,
    store: SessionStore,
    task_status: trio.TaskStatus[list[str]],
) -> None:
    async with trio.open_nursery() as nursery:
        if threading.current_thread() is threading.main_thread():
            await nursery.start(_stop_on_sigterm, stop)
        nursery.start_soon(pool.watch, config.health_interval_s, config.health_timeout_s)
        lag_sink: LagSink = partial(metrics.observe, "event_loop_lag")
        nursery.start_soon(probe_loop_lag, config.loop_lag_interval_ms / 1000.0, [lag_sink])
        if vad is None:
            batcher = VadBatcher(
                VadBatcherConfig(
                    window_s=config.vad_batch_window_ms / 1000.0,
                    request_timeout_s=config.vad_timeout_s,
                ),
                url=lambda: pool.choose().url,
            )
            nursery.start_soon(batcher.run)
            vad = batcher
        # The echo path's compiled part, compiled (or loaded from numba's cache) on a thread
        # now, not by the first session that turns echo cancellation on (double_talk rule 6).
        nursery.start_soon(partial(trio.to_thread.run_sync, compile_now))
        reports = _SnapshotReports(metrics)
        snapshots = SnapshotWriter(store, ttl_s=config.snapshot_ttl_s, on_report=reports)
        nursery.start_soon(snapshots.run)
        services = SessionServices(
            store=store,
            snapshots=snapshots,
            metrics=metrics,
            vad=vad,
            responses=ResponseServices(
                pool=pool,
                pipeline=config.pipeline,
                default_max_tokens=config.max_output_tokens,
                first_chunk_timeout_s=config.first_chunk_timeout_s,
                chunk_timeout_s=config.chunk_timeout_s,
                text_aligned=config.pipeline != "qwen3_omni",
            ),
            transcriber=TritonTranscriber(pool, timeout_s=config.transcription_timeout_s),
            turn=TritonTurnPredictor(pool, timeout_s=config.turn_timeout_s),
            transcripts_for_pipeline=config.pipeline == "cascade",
        )
        access = AccessControl(access_settings(config), clock=time.monotonic)
        # Sessions run here, apart from the connections that carry them (session resume).
        host = SessionHost(config, services, metrics, nursery)
        reports.reports.append(host.snapshot_written)
        state = AppState(config, metrics, pool, services, access, host)
        app = build_app(state)
        hyper = hypercorn.config.Config()
        hyper.bind = [f"{config.host}:{config.port}"]
        hyper.accesslog = None
        # Twice our own limit and more: a message up to there reaches the session and gets
        # `message_too_large`; only beyond it is the socket closed (1009, with a reason).
        hyper.websocket_max_message_size = transport_max_message_bytes(config)
        install_transport_limit()
        # The listener stays open while draining: new clients get a clear 1013, not a refusal.
        await nursery.start(hypercorn.trio.serve, app, hyper)
        task_status.started([f"http://{config.host}:{config.port}"])
        await stop.wait()
        await drain(state, config.drain_timeout_s)
        # The drained sessions' last snapshots go out before the writer is cancelled: another
        # worker takes those sessions over from them (bounded: a store that hangs is left).
        with trio.move_on_after(2.0):
            await snapshots.wait_idle()
        nursery.cancel_scope.cancel()


class _SnapshotReports:
    """The writer's reports: metrics, then whoever else listens (the host: a session taken
    over elsewhere ends here)."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics
        self.reports: list[Callable[[WriteReport], None]] = []

    def __call__(self, report: WriteReport) -> None:
        self._metrics.snapshot_writes.labels(report.result.value).inc()
        if report.result is WriteResult.WRITTEN:
            self._metrics.snapshot_bytes.observe(report.bytes)
        for listener in self.reports:
            listener(report)


async def _stop_on_sigterm(
    stop: trio.Event, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    """SIGTERM sets `stop`; held until the server's end, so that a second SIGTERM during the
    (bounded) drain does not kill the process half-way."""
    with trio.open_signal_receiver(signal.SIGTERM) as signals:
        task_status.started()
        async for _ in signals:
            print("turntaker serve: SIGTERM: draining", flush=True)
            stop.set()


def run(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    # A bad keys file or origin fails now, not after Triton's minutes of start-up.
    settings = access_settings(config)
    print(f"turntaker serve: access: {_describe(settings)}", flush=True)
    # So does a session store that cannot be reached (Redis down at start).
    try:
        trio.run(_check_store, config.session_store)
    except StoreUnavailable as error:
        print(f"turntaker serve: {error}", file=sys.stderr, flush=True)
        return 2
    if config.local_triton:
        with local_triton(config) as server:
            config = ServiceConfig(**{**config.__dict__, "triton_urls": (server.grpc_url,)})
            return _run_trio(config)
    return _run_trio(config)


async def _check_store(spec: str) -> None:
    store = await open_store(spec)
    await store.close()


def _describe(settings: AccessSettings) -> str:
    who = (
        f"{len(settings.keys)} API key(s) ({', '.join(k.name for k in settings.keys)})"
        if settings.keys
        else "no API keys: loopback clients only"
    )
    origins = ", ".join(settings.allow_origins) or "same-host"
    return f"{who}; origins {origins}"


def _run_trio(config: ServiceConfig) -> int:
    print(
        f"turntaker serve: realtime on ws://{config.host}:{config.port}/v1/realtime "
        f"(pipeline {config.pipeline}); Ctrl-C stops",
        flush=True,
    )
    try:
        trio.run(serve, config)
    except* KeyboardInterrupt:
        # Ctrl-C arrives inside the server's nursery, so it comes wrapped in a group.
        print("turntaker serve: stopped", flush=True)
    else:
        print("turntaker serve: drained and stopped", flush=True)
    return 0


class BackgroundServer:
    """`serve(config)` on its own Trio loop in a thread: for tests and benchmarks that drive it
    from another loop (the openai SDK is asyncio-only)."""

    def __init__(self, config: ServiceConfig) -> None:
        self.config = config
        self.url = f"ws://{config.host}:{config.port}/v1/realtime"
        self.http_url = f"http://{config.host}:{config.port}"
        self._thread: threading.Thread | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._scope: trio.CancelScope | None = None
        self._stop: trio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    def __enter__(self) -> BackgroundServer:
        self._thread = threading.Thread(target=self._main, name="turntaker-serve", daemon=True)
        self._thread.start()
        if not self._ready.wait(60):
            raise TimeoutError("the realtime server did not start within 60 s")
        if self._error is not None:
            raise self._error
        return self

    def drain(self) -> None:
        """What SIGTERM does to `turntaker serve` (signals reach only the main thread): starts
        the graceful drain and returns at once; `wait_stopped()` waits for its end."""
        if self._token is not None and self._stop is not None:
            try:
                self._token.run_sync_soon(self._stop.set)
            except trio.RunFinishedError:
                pass

    def wait_stopped(self, timeout_s: float) -> bool:
        """Whether `serve()` returned within `timeout_s`."""
        if self._thread is None:
            return True
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def __exit__(self, *exc: object) -> None:
        if self._token is not None and self._scope is not None:
            try:
                self._token.run_sync_soon(self._scope.cancel)
            except trio.RunFinishedError:
                pass
        if self._thread is not None:
            self._thread.join(30)

    def _main(self) -> None:
        async def main() -> None:
            self._token = trio.lowlevel.current_trio_token()
            self._stop = trio.Event()
            with trio.CancelScope() as scope:
                self._scope = scope
                async with trio.open_nursery() as nursery:
                    await nursery.start(partial(serve, self.config, stop=self._stop))
                    self._ready.set()

        try:
            trio.run(main)
        except BaseException as error:
            self._error = error
        finally:
            self._ready.set()

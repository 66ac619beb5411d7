"""`turntaker serve`: the local Triton (unless --triton-url) and the realtime server on Trio."""

from __future__ import annotations

import argparse
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import hypercorn.config
import hypercorn.trio
import trio

from orchestrator.service.app import AppState, build_app
from orchestrator.service.config import ServiceConfig, load_config
from orchestrator.service.endpoints import EndpointPool
from orchestrator.service.metrics import Metrics
from orchestrator.service.response_actor import ResponseServices
from orchestrator.service.session_actor import SessionServices
from orchestrator.service.transcriber import TritonTranscriber
from orchestrator.triton.launcher import TritonConfig, TritonServer
from orchestrator.vad_batcher import VadBatcher, VadBatcherConfig
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
    parser.add_argument("--pipeline", choices=["cascade", "qwen3_omni"])
    parser.add_argument("--weights", type=Path, dest="omni_weights", help="Qwen3-Omni folder")
    parser.add_argument("--model-repository", type=Path)


def config_from_args(args: argparse.Namespace) -> ServiceConfig:
    overrides = {
        "host": args.host,
        "port": args.port,
        "triton_urls": tuple(args.triton_urls) if args.triton_urls else None,
        "pipeline": args.pipeline,
        "omni_weights": args.omni_weights,
        "model_repository": args.model_repository,
    }
    return load_config(file=args.config, overrides=overrides)


def needed_models(config: ServiceConfig) -> tuple[str, ...]:
    return (config.pipeline, "vad", "asr", "cancel")


@contextmanager
def local_triton(config: ServiceConfig) -> Iterator[TritonServer]:
    """Start Triton from a thread that lives as long as it (the parent-death signal is per
    thread), and stop it on the way out."""
    server = TritonServer(
        TritonConfig(
            model_repository=config.model_repository,
            http_port=config.triton_http_port,
            grpc_port=config.triton_grpc_port,
            metrics_port=config.triton_metrics_port,
            models=needed_models(config),
            omni_weights=config.omni_weights,
            model_threads=config.model_threads,
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
    try:
        yield server
    finally:
        stop.set()
        thread.join()


async def serve(
    config: ServiceConfig, *, task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED
) -> None:
    metrics = Metrics()
    pool = EndpointPool(config.triton_urls, needed_models(config), metrics)
    await pool.check_all()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(pool.watch, config.health_interval_s)
        batcher = VadBatcher(
            VadBatcherConfig(window_s=config.vad_batch_window_ms / 1000.0),
            url=lambda: pool.choose().url,
        )
        nursery.start_soon(batcher.run)
        services = SessionServices(
            metrics=metrics,
            vad=batcher,
            responses=ResponseServices(
                pool=pool,
                pipeline=config.pipeline,
                default_max_tokens=config.max_output_tokens,
            ),
            transcriber=TritonTranscriber(pool),
            transcripts_for_pipeline=config.pipeline == "cascade",
        )
        app = build_app(AppState(config, metrics, pool, services))
        hyper = hypercorn.config.Config()
        hyper.bind = [f"{config.host}:{config.port}"]
        hyper.accesslog = None
        hyper.websocket_max_message_size = config.max_message_bytes
        await nursery.start(hypercorn.trio.serve, app, hyper)
        task_status.started([f"http://{config.host}:{config.port}"])


def run(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    if config.local_triton:
        with local_triton(config) as server:
            print(
                f"turntaker serve: Triton ready in {server.startup_s or 0:.1f} s at "
                f"{server.grpc_url} (log {server.config.log_file})",
                flush=True,
            )
            config = ServiceConfig(**{**config.__dict__, "triton_urls": (server.grpc_url,)})
            return _run_trio(config)
    return _run_trio(config)


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
            with trio.CancelScope() as scope:
                self._scope = scope
                async with trio.open_nursery() as nursery:
                    await nursery.start(serve, self.config)
                    self._ready.set()

        try:
            trio.run(main)
        except BaseException as error:
            self._error = error
        finally:
            self._ready.set()

"""`turntaker triton`: run the server in the foreground until Ctrl-C, SIGTERM or parent exit."""

from __future__ import annotations

import argparse
import signal
import threading
from pathlib import Path
from types import FrameType

from orchestrator.triton.launcher import TritonConfig, TritonServer, TritonStartError
from turntaker_models.settings import check_null_speed


def _speed(text: str) -> float:
    try:
        return check_null_speed(float(text))
    except ValueError as error:
        # float() says "could not convert string": say what a speed must be instead.
        raise argparse.ArgumentTypeError(f"must be a number above 0, got {text!r}") from error


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model-repository", default="model_repository", type=Path)
    parser.add_argument("--host", default="127.0.0.1", help="address for HTTP, gRPC and metrics")
    parser.add_argument("--http-port", default=8000, type=int)
    parser.add_argument("--grpc-port", default=8001, type=int)
    parser.add_argument("--metrics-port", default=8002, type=int)
    parser.add_argument("--startup-timeout", default=120.0, type=float, help="seconds")
    parser.add_argument("--stop-timeout", default=15.0, type=float, help="seconds before SIGKILL")
    parser.add_argument("--log-file", type=Path, help="server log (default: this terminal)")
    parser.add_argument("--log-verbose", default=0, type=int)
    parser.add_argument(
        "--model",
        dest="models",
        action="append",
        default=[],
        help="load only this model (repeatable; an ensemble brings its steps); default: all",
    )
    parser.add_argument(
        "--omni-weights",
        type=Path,
        help="Qwen3-Omni checkpoint folder (default: tiny random weights built in the cache)",
    )
    parser.add_argument("--model-threads", default=1, type=int, help="threads per model process")
    parser.add_argument(
        "--cancel-board", type=Path, help="cancel board file (default: a fresh one in /dev/shm)"
    )
    parser.add_argument(
        "--null-speed",
        default=1.0,
        type=_speed,
        help="divides every delay of the benchmark model `null` (e.g. 1000; default 1: real time)",
    )
    parser.add_argument(
        "--null-audio",
        type=Path,
        help="a 24 kHz mono 16-bit WAV the benchmark model `null` answers with (default: a tone)",
    )
    parser.add_argument(
        "--null-audio-loop",
        action="store_true",
        help="repeat --null-audio until max_tokens (default: once per response)",
    )


def config_from_args(args: argparse.Namespace) -> TritonConfig:
    return TritonConfig(
        model_repository=args.model_repository,
        host=args.host,
        http_port=args.http_port,
        grpc_port=args.grpc_port,
        metrics_port=args.metrics_port,
        startup_timeout_s=args.startup_timeout,
        stop_timeout_s=args.stop_timeout,
        log_file=args.log_file,
        log_verbose=args.log_verbose,
        models=tuple(args.models),
        omni_weights=args.omni_weights,
        model_threads=args.model_threads,
        board_path=args.cancel_board,
        null_speed=args.null_speed,
        null_audio=args.null_audio,
        null_audio_loop=args.null_audio_loop,
    )


def run_server(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    # SIGINT and SIGTERM both end the wait below; the server's own group never sees Ctrl-C.
    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    server = TritonServer(config)
    try:
        try:
            startup = server.start()
        except TritonStartError as error:
            print(f"turntaker triton: {error}", flush=True)
            return 1
        models = ", ".join(sorted(m["name"] for m in server.models()))
        print(
            f"turntaker triton: ready in {startup:.2f} s; models: {models}\n"
            f"  HTTP    {server.http_url}\n"
            f"  gRPC    {server.grpc_url}\n"
            f"  metrics http://{config.host}:{config.metrics_port}/metrics\n"
            f"  cancel board {server.board_path}",
            flush=True,
        )
        while not stop.wait(0.5):
            if server.pid is not None and not server.running():
                print("turntaker triton: the server exited on its own", flush=True)
                return 1
        print("turntaker triton: stopping", flush=True)
        return 0
    finally:
        code = server.stop()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if code is not None:
            print(f"turntaker triton: server exited with {code}", flush=True)

"""`ServiceConfig`: the one typed configuration object of `turntaker serve`.

Sources, later ones winning: defaults, an optional TOML file (`--config`), environment
variables (`TURNTAKER_*`), command-line flags. Everything below the entry point receives this
object (or a part of it); nothing reads the environment again.
"""

from __future__ import annotations

import os
import tomllib
import uuid
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal

Pipeline = Literal["cascade", "qwen3_omni"]


@dataclass(frozen=True)
class ServiceConfig:
    host: str = "127.0.0.1"
    port: int = 8000
    # Empty: start a local Triton on `model_repository` (ports below).
    triton_urls: tuple[str, ...] = ()
    model_repository: Path = Path("model_repository")
    triton_http_port: int = 8100
    triton_grpc_port: int = 8101
    triton_metrics_port: int = 8102
    pipeline: Pipeline = "cascade"
    omni_weights: Path | None = None
    model_threads: int = 1
    # Model name reported in session.created.
    model: str = "turntaker"
    max_message_bytes: int = 15 * 1024 * 1024
    max_output_tokens: int = 256
    # Bounds of each session's queues (messages, not bytes; messages are size-limited).
    session_mailbox: int = 256
    send_queue: int = 1024
    vad_backlog_chunks: int = 64
    # How often each Triton endpoint's readiness is polled.
    health_interval_s: float = 1.0
    # VAD batcher: wait this long after the first pending chunk for other sessions' chunks.
    vad_batch_window_ms: float = 2.0
    # Prefix of every pipeline request id (the cancel board's key), so ids never collide
    # between orchestrators sharing a Triton; random per process unless set.
    instance_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def local_triton(self) -> bool:
        return not self.triton_urls


_ENV_PREFIX = "TURNTAKER_"


def _coerce(name: str, raw: Any) -> Any:
    kind = {f.name: f.type for f in fields(ServiceConfig)}[name]
    text = str(kind)
    if "tuple" in text:
        if isinstance(raw, str):
            return tuple(u.strip() for u in raw.split(",") if u.strip())
        return tuple(str(u) for u in raw)
    if "Path" in text:
        return None if raw in (None, "") else Path(str(raw))
    if text == "int":
        return int(raw)
    if text == "float":
        return float(raw)
    return raw


def load_config(
    *,
    file: Path | None = None,
    env: dict[str, str] | None = None,
    overrides: dict[str, Any] | None = None,
) -> ServiceConfig:
    """Defaults < TOML file < TURNTAKER_* env vars < explicit overrides (flags)."""
    names = {f.name for f in fields(ServiceConfig)} - {"extra"}
    values: dict[str, Any] = {}
    if file is not None:
        with file.open("rb") as handle:
            table = tomllib.load(handle)
        unknown = set(table) - names
        if unknown:
            raise ValueError(f"{file}: unknown settings {sorted(unknown)}")
        values.update({k: _coerce(k, v) for k, v in table.items()})
    source = os.environ if env is None else env
    for name in names:
        raw = source.get(_ENV_PREFIX + name.upper())
        if raw is not None:
            values[name] = _coerce(name, raw)
    for name, value in (overrides or {}).items():
        if value is not None and name in names:
            values[name] = value
    config = replace(ServiceConfig(), **values)
    if config.pipeline not in ("cascade", "qwen3_omni"):
        raise ValueError(f"unknown pipeline {config.pipeline!r}: cascade or qwen3_omni")
    return config

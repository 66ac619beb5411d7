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
from urllib.parse import urlsplit, urlunsplit

# `null` streams fixed audio with no compute: for benchmarks of the orchestrator itself.
Pipeline = Literal["cascade", "qwen3_omni", "null"]
PIPELINES: tuple[str, ...] = ("cascade", "qwen3_omni", "null")


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
    # Qwen3-Omni's stages batch their streams (turntaker_models/omni/batcher.py); each serves
    # `omni_max_streams` at once, of at most `omni_max_positions` (prompt + answer) each.
    omni_batching: bool = True
    omni_max_streams: int = 32
    omni_max_positions: int = 4096
    # The cascade's voice for responses that name none of ours (OpenAI's names included):
    # Piper's `joe` or a flite voice (turntaker_models/cascade/voices.py).
    tts_voice: str = "joe"
    # Model name reported in session.created.
    model: str = "turntaker"
    max_message_bytes: int = 15 * 1024 * 1024
    max_output_tokens: int = 256
    # Bounds of each session's queues (messages, not bytes; messages are size-limited).
    session_mailbox: int = 256
    send_queue: int = 1024
    # The send queue's bound in bytes too (one message always fits): a few events can be large.
    send_queue_bytes: int = 16 * 1024 * 1024
    vad_backlog_chunks: int = 64
    # How often each Triton endpoint's readiness is polled, and how long one check may take
    # (a server that does not answer in time is down: a hung server must not hang the poll).
    health_interval_s: float = 1.0
    health_timeout_s: float = 1.0
    # Deadlines per stage, so that a hung Triton endpoint fails requests instead of hanging
    # sessions. A response stream fails (and its endpoint is marked down) when its first chunk
    # takes longer than `first_chunk_timeout_s` (prefill included) or the next one longer than
    # `chunk_timeout_s`.
    first_chunk_timeout_s: float = 30.0
    chunk_timeout_s: float = 30.0
    # A batched VAD request (about a millisecond when healthy) and one input transcription.
    vad_timeout_s: float = 1.0
    transcription_timeout_s: float = 60.0
    # One semantic_vad end-of-turn prediction (Smart Turn: tens of ms): past it the session
    # falls back to the silence rule, since an answer that late decides nothing better.
    turn_timeout_s: float = 2.0
    # A client that takes no event for this long while its send queue is full is not reading:
    # its session ends (close 1008) rather than hold the server's memory and Triton streams.
    slow_client_timeout_s: float = 10.0
    # Sessions end after this long, as OpenAI's do after 60 minutes: an `error` event
    # (`session_expired`), then close 1000.
    max_session_s: float = 3600.0
    # Session resume (docs/protocol.md "Session resume"): a socket lost without a 1000 close
    # leaves the session alive this long, its running responses going on and their events
    # journaled; the journal of each session (sent and unsent events, for replay) is bounded
    # in bytes, one event always fitting.
    disconnect_grace_s: float = 30.0
    resume_journal_bytes: int = 8 * 1024 * 1024
    # This process's name behind a load balancer (`turntaker serve --workers N` sets w0..wN-1):
    # session ids carry it (`sess_<route_id>_<hex>`) so that a resume's `?session_id=` can be
    # routed back to the process holding the session (deploy/nginx.conf). Letters and digits.
    route_id: str = ""
    # `turntaker serve --workers N`: a worker that dies is started again after this long,
    # doubling (to 30 s) while it keeps dying within a minute of its start
    # (orchestrator/supervisor/respawn.py); 0: a dead worker stays dead, nginx routes around it.
    worker_respawn_s: float = 1.0
    # On SIGTERM (or `BackgroundServer.drain()`): how long open sessions get to end (an answer
    # finishing, then their closing events and close) before the server cancels whatever is
    # left and exits.
    drain_timeout_s: float = 15.0
    # Within it, how long an answer still generating may go on before the drain cuts it
    # (`drain_answer_bound_s`: never past the drain's own bound, less its end's time).
    drain_answer_s: float = 10.0
    # VAD batcher: wait this long after the first pending chunk for other sessions' chunks.
    vad_batch_window_ms: float = 2.0
    # The event-loop lag probe's period (a sleep that overshoots by more is lag).
    loop_lag_interval_ms: float = 10.0
    # Prefix of every pipeline request id (the cancel board's key), so ids never collide
    # between orchestrators sharing a Triton; random per process unless set.
    instance_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    # Access (orchestrator/service/access.py). No keys from either source: loopback only.
    api_keys_file: Path | None = None
    # `TURNTAKER_API_KEYS`, comma-separated `name:key` or bare keys; kept out of repr (logs).
    api_keys: tuple[str, ...] = field(default=(), repr=False)
    # Exact origins (`*`: any); empty: only pages served from the host the client dialled.
    allow_origins: tuple[str, ...] = ()
    # Per key (or the shared `anonymous` identity of loopback clients); 0: no limit.
    max_sessions_per_key: int = 100
    # pcm16 at 24 kHz is 48 kB/s: 8 MiB/s is the real-time input of about 170 sessions.
    append_bytes_per_s_per_key: int = 8 * 1024 * 1024
    append_burst_s: float = 4.0
    # Where each session's latest snapshot is kept, so that another worker can take the
    # session over (orchestrator/service/store/): `memory` (in this process, the default) or
    # `redis://HOST:PORT/DB` (`rediss://` for TLS). Kept out of repr: a URL may hold a password.
    session_store: str = field(default="memory", repr=False)
    # A session snapshot's bounds (orchestrator/session/resume/snapshot.py rules 3-4): the
    # whole encoded snapshot, the images it keeps and the journal's events it keeps (newest
    # first; both well under the whole, so that a full journal never makes it too large).
    snapshot_max_bytes: int = 12 * 1024 * 1024
    snapshot_image_bytes: int = 4 * 1024 * 1024
    snapshot_journal_bytes: int = 4 * 1024 * 1024

    @property
    def snapshot_ttl_s(self) -> float:
        """How long a snapshot and its lease outlive their last write: the resume grace, and
        the drain's bound for a session ended by one (its client comes back after it)."""
        return self.disconnect_grace_s + self.drain_timeout_s

    @property
    def drain_answer_bound_s(self) -> float:
        """How long a drain lets a generating answer finish: `drain_answer_s`, leaving
        `DRAIN_END_S` of the drain's bound for the session's end (its last snapshot, its
        closing events and close)."""
        return max(0.0, min(self.drain_answer_s, self.drain_timeout_s - DRAIN_END_S))

    @property
    def store_shared(self) -> bool:
        """Whether the session store outlives this process (another worker can take up its
        sessions): Redis is, `memory` is not."""
        return self.session_store != "memory"

    extra: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in _POSITIVE:
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)!r}")
        if self.drain_answer_s < 0:
            raise ValueError(f"drain_answer_s must be >= 0, got {self.drain_answer_s!r}")
        if self.route_id and not self.route_id.isalnum():
            raise ValueError(f"route_id must be letters and digits, got {self.route_id!r}")
        check_session_store(self.session_store)
        if not 0 <= self.worker_respawn_s <= RESPAWN_MAX_S:
            raise ValueError(
                f"worker_respawn_s must be 0 (off) to {RESPAWN_MAX_S:.0f}, "
                f"got {self.worker_respawn_s!r}"
            )

    @property
    def local_triton(self) -> bool:
        return not self.triton_urls


# The longest wait between a dead worker's respawns (respawn.py doubles up to it).
RESPAWN_MAX_S = 30.0
# Of the drain's bound, what a session's end takes after its answer (its last snapshot
# written, its closing events and close): the answer gets the rest at most.
DRAIN_END_S = 2.0


def check_session_store(spec: str) -> None:
    """`memory`, or a Redis URL with a host and at most a database number for its path."""
    if spec == "memory":
        return
    parts = urlsplit(spec)
    try:
        parts.port  # noqa: B018 (a port that is not a number raises here)
    except ValueError:
        good = False
    else:
        database = parts.path.strip("/")
        good = (
            parts.scheme in ("redis", "rediss")
            and bool(parts.hostname)
            and (database == "" or database.isdigit())
        )
    if not good:
        raise ValueError(
            f"session_store must be 'memory' or redis://HOST:PORT/DB, got {redact_url(spec)!r}"
        )


def redact_url(url: str) -> str:
    """The URL as a log may show it: its password, if any, replaced by `***`."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    credentials, _, host = parts.netloc.rpartition("@")
    user = credentials.partition(":")[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


# Deadlines: zero or a negative value would fail every request, or end every session, at once.
_POSITIVE = (
    "health_timeout_s",
    "first_chunk_timeout_s",
    "chunk_timeout_s",
    "vad_timeout_s",
    "transcription_timeout_s",
    "turn_timeout_s",
    "slow_client_timeout_s",
    "max_session_s",
    "drain_timeout_s",
    "disconnect_grace_s",
    "resume_journal_bytes",
    "snapshot_max_bytes",
    "snapshot_journal_bytes",
)


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
    if text == "bool" and isinstance(raw, str):
        return raw.strip().lower() not in ("0", "false", "no", "off", "")
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
    if config.pipeline not in PIPELINES:
        raise ValueError(f"unknown pipeline {config.pipeline!r}: one of {', '.join(PIPELINES)}")
    return config

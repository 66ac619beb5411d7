"""Prometheus metrics of one server instance (its own registry: no process-global state)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from orchestrator.session.echo.verdict import EchoVerdict

# Seconds; barge-in reactions are milliseconds, first audio hundreds of milliseconds.
_LATENCY_BUCKETS = (
    0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.05, 0.1, 0.25, 0.5,
    1, 2.5, 5, 10,
)  # fmt: skip
# Given (metric name, seconds) for every latency observed: exact percentiles for benchmarks.
SampleSink = Callable[[str, float], None]
# Given every echo verdict (a VAD chunk heard over the echo, orchestrator/session/echo/verdict.py):
# for benchmarks that trace a cut to the rule that let it through.
VerdictSink = Callable[[EchoVerdict], None]


@dataclass
class Metrics:
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    sample_sink: SampleSink | None = None
    verdict_sink: VerdictSink | None = None

    def __post_init__(self) -> None:
        r = self.registry
        self.sessions_active = Gauge(
            "turntaker_sessions_active", "Open realtime sessions", registry=r
        )
        self.sessions_total = Counter("turntaker_sessions", "Realtime sessions opened", registry=r)
        self.responses = Counter(
            "turntaker_responses",
            "Responses by terminal status",
            ["status"],
            registry=r,
        )
        self.interruptions = Counter(
            "turntaker_interruptions", "Responses interrupted by the user's speech", registry=r
        )
        self.overlap_decisions = Counter(
            "turntaker_overlap_decisions",
            "Pause mode: overlap.decision events sent, by decision and reason",
            ["decision", "reason"],
            registry=r,
        )
        self.overlap_decisions_untranscribed = Counter(
            "turntaker_overlap_decisions_without_transcript",
            "Pause mode: overlap decisions made with no partial transcript back (duration only)",
            ["decision", "reason"],
            registry=r,
        )
        # Where transcript-less decisions come from: a partial that took longer than the
        # grace (150 ms) leaves the decision to duration.
        self.partial_transcript_latency = Histogram(
            "turntaker_partial_transcript_seconds",
            "Pause mode: from a partial transcript of an overlap asked to its answer back",
            buckets=(0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1, 2.5, 10),
            registry=r,
        )
        self.end_of_turn = Counter(
            "turntaker_end_of_turn_decisions",
            "User turns ended by VAD turn detection, by cause (semantic_vad: model (a sure "
            "pause), unsure, late (its answers not back by the unsure wait), fallback; "
            "server_vad: silence)",
            ["cause"],
            registry=r,
        )
        self.preemptive_responses = Counter(
            "turntaker_preemptive_responses",
            "Preemptive responses started, used (adopted at the commit) and dropped",
            ["outcome"],
            registry=r,
        )
        self.echo_chunks = Counter(
            "turntaker_echo_chunks",
            "VAD chunks heard over the answer's echo (echo cancellation on), by the echo rule "
            'that held each under the threshold (7, 8, 10; one count per rule) or "none"',
            ["held_by"],
            registry=r,
        )
        self.time_to_first_audio = Histogram(
            "turntaker_time_to_first_audio_seconds",
            "From response start to its first audio delta sent",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.barge_in_latency = Histogram(
            "turntaker_barge_in_latency_seconds",
            "From the VAD's speech decision to output_audio_buffer.cleared sent",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.triton_streams = Gauge(
            "turntaker_triton_streams",
            "Open pipeline streams per endpoint",
            ["endpoint"],
            registry=r,
        )
        self.triton_endpoint_up = Gauge(
            "turntaker_triton_endpoint_up",
            "1 when the endpoint is ready",
            ["endpoint"],
            registry=r,
        )

        self.event_loop_lag = Histogram(
            "turntaker_event_loop_lag_seconds",
            "How late the server's event loop wakes a sleeping task (overload shows here first)",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.input_backlog = Gauge(
            "turntaker_input_backlog_chunks",
            "Input audio chunks waiting for turn detection, summed over sessions",
            registry=r,
        )

        self.refusals = Counter(
            "turntaker_refusals",
            "Refused sessions, /metrics requests and appends, by reason and API key name",
            ["reason", "key"],
            registry=r,
        )
        self.admissions = Counter(
            "turntaker_admissions", "Sessions admitted, by API key name", ["key"], registry=r
        )
        self.session_closes = Counter(
            "turntaker_session_closes",
            'Realtime sockets closed (refusals included): the server\'s close code, or "client"',
            ["code"],
            registry=r,
        )
        self.session_ends = Counter(
            "turntaker_session_ends",
            "Sessions the server ended, by reason (client_not_reading, session_expired, "
            "server_shutting_down, grace_expired, journal_overflow)",
            ["reason"],
            registry=r,
        )
        self.resumes = Counter(
            "turntaker_session_resumes",
            "Session resumes (session.resume), by outcome: resumed, or why it failed "
            "(unknown, ended, other_key, not_journaled, not_first)",
            ["outcome"],
            registry=r,
        )
        self.sessions_in_grace = Gauge(
            "turntaker_sessions_in_grace",
            "Sessions whose connection was lost, waiting for a resume (disconnect_grace_s)",
            registry=r,
        )
        self.snapshot_writes = Counter(
            "turntaker_snapshot_writes",
            "Session snapshots offered to the session store, by result (written, stale, fenced, "
            "failed, dropped, replaced: orchestrator/service/store/writer.py)",
            ["result"],
            registry=r,
        )
        self.snapshot_bytes = Histogram(
            "turntaker_snapshot_bytes",
            "Size of each session snapshot written to the session store",
            buckets=(1e3, 4e3, 16e3, 64e3, 256e3, 1e6, 4e6),
            registry=r,
        )
        self.resume_journal_bytes = Gauge(
            "turntaker_resume_journal_bytes",
            "Server events journaled for resume, in bytes, summed over sessions",
            registry=r,
        )

    def observe(self, name: str, seconds: float) -> None:
        """One latency sample into the histogram `name` (an attribute above)."""
        histogram: Histogram = getattr(self, name)
        histogram.observe(seconds)
        if self.sample_sink is not None:
            self.sample_sink(name, seconds)

    def echo_verdict(self, verdict: EchoVerdict) -> None:
        for rule in verdict.held_by or ("none",):
            self.echo_chunks.labels(str(rule)).inc()
        if self.verdict_sink is not None:
            self.verdict_sink(verdict)

    def render(self) -> bytes:
        return generate_latest(self.registry)

"""Prometheus metrics of one server instance (its own registry: no process-global state)."""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

# Seconds; barge-in reactions are milliseconds, first audio hundreds of milliseconds.
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


@dataclass
class Metrics:
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

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

    def render(self) -> bytes:
        return generate_latest(self.registry)

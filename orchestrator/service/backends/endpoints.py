"""Triton endpoints: health-checked, each new response to the healthy one with fewest streams.

Rules:
- A response is placed on a healthy endpoint with the fewest open streams (ties: the order
  given). With none healthy, `NoHealthyEndpoint` is raised and the response fails at once with
  a clear reason; the session stays open.
- An endpoint is unhealthy from its first failed health check or a failed stream on it, and
  healthy again at its next successful check (server ready and the needed models ready). A
  check that takes longer than its timeout failed: a hung server is down, not waited for.
- Streams already open on an endpoint are not moved; they end (or fail) where they are.
- Optional models (`asr_partial`) are asked for at each check but do not make an endpoint
  unhealthy: `Endpoint.optional` holds those ready at its last successful check, and a caller
  that prefers one falls back to what every endpoint has when it is not there.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import trio
import tritonclient.grpc as grpcclient

from orchestrator.service.metrics import Metrics


class NoHealthyEndpoint(RuntimeError):
    """No Triton endpoint is ready to take a new stream."""


@dataclass
class Endpoint:
    url: str
    healthy: bool = False
    streams: int = 0
    # The pool's optional models that were ready here at the last successful check.
    optional: frozenset[str] = frozenset()


def _ready(
    url: str, models: tuple[str, ...], optional: tuple[str, ...], timeout_s: float
) -> frozenset[str] | None:
    """None when the server or one of `models` is not ready; else which of `optional` are."""
    client = grpcclient.InferenceServerClient(url)
    try:
        if not client.is_server_ready(client_timeout=timeout_s):
            return None
        if not all(client.is_model_ready(m, client_timeout=timeout_s) for m in models):
            return None
        return frozenset(m for m in optional if _model_ready(client, m, timeout_s))
    except Exception:
        return None
    finally:
        client.close()


def _model_ready(client: grpcclient.InferenceServerClient, model: str, timeout_s: float) -> bool:
    try:
        return bool(client.is_model_ready(model, client_timeout=timeout_s))
    except Exception:
        return False  # not in that server's repository, or it did not say: not there


class EndpointPool:
    """`models`: what an endpoint must have to be healthy; `optional`: what is used where an
    endpoint has it (see Endpoint.optional)."""

    def __init__(
        self,
        urls: tuple[str, ...],
        models: tuple[str, ...],
        metrics: Metrics,
        optional: tuple[str, ...] = (),
    ) -> None:
        if not urls:
            raise ValueError("at least one Triton endpoint is needed")
        self.endpoints = [Endpoint(u) for u in urls]
        self.models = models
        self.optional = optional
        self._metrics = metrics

    def choose(self) -> Endpoint:
        healthy = [e for e in self.endpoints if e.healthy]
        if not healthy:
            raise NoHealthyEndpoint(
                "no Triton endpoint is ready: " + ", ".join(e.url for e in self.endpoints)
            )
        return min(healthy, key=lambda e: e.streams)

    @contextmanager
    def lease(self, endpoint: Endpoint) -> Iterator[Endpoint]:
        endpoint.streams += 1
        self._metrics.triton_streams.labels(endpoint.url).set(endpoint.streams)
        try:
            yield endpoint
        finally:
            endpoint.streams -= 1
            self._metrics.triton_streams.labels(endpoint.url).set(endpoint.streams)

    def mark_failed(self, endpoint: Endpoint) -> None:
        self._set(endpoint, False)

    @property
    def any_healthy(self) -> bool:
        return any(e.healthy for e in self.endpoints)

    async def check_all(self, timeout_s: float = 1.0) -> None:
        """One check of every endpoint; each check answers within `timeout_s` or fails."""

        async def check(endpoint: Endpoint) -> None:
            found: frozenset[str] | None = None
            # Each gRPC call has the deadline too, but a check makes several: the whole check
            # gets it, so a hung server is down after `timeout_s`, not after all of them.
            with trio.move_on_after(timeout_s):
                found = await trio.to_thread.run_sync(
                    _ready,
                    endpoint.url,
                    self.models,
                    self.optional,
                    timeout_s,
                    abandon_on_cancel=True,
                )
            if found is not None:
                endpoint.optional = found
            self._set(endpoint, found is not None)

        async with trio.open_nursery() as nursery:
            for endpoint in self.endpoints:
                nursery.start_soon(check, endpoint)

    async def watch(self, interval_s: float, timeout_s: float = 1.0) -> None:
        """Poll every endpoint forever (run it in the server's nursery)."""
        while True:
            await self.check_all(timeout_s=timeout_s)
            await trio.sleep(interval_s)

    def _set(self, endpoint: Endpoint, healthy: bool) -> None:
        endpoint.healthy = healthy
        self._metrics.triton_endpoint_up.labels(endpoint.url).set(1 if healthy else 0)

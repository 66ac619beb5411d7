"""TritonTranscriber's routing, without a server: partials go to `asr_partial` where the
endpoint's last health check found it ready, else to `asr` with PARTIAL; turns always to
`asr`. And the health check's optional models: asked for, never required."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from orchestrator.service.backends import endpoints, transcriber
from orchestrator.service.backends.endpoints import EndpointPool
from orchestrator.service.backends.transcriber import TritonTranscriber
from orchestrator.service.config import ServiceConfig
from orchestrator.service.metrics import Metrics
from orchestrator.service.serve import OPTIONAL_MODELS, needed_models, required_models


class _Result:
    def as_numpy(self, name: str) -> Any:
        assert name == "TEXT"
        return np.array([b"yeah"], dtype=np.object_)


class _Unary:
    def __init__(self, calls: list[tuple[str, list[str]]]) -> None:
        self._calls = calls

    async def infer(self, model: str, inputs: list[Any]) -> _Result:
        self._calls.append((model, [i.name() for i in inputs]))
        return _Result()


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, list[str]]]:
    seen: list[tuple[str, list[str]]] = []

    @asynccontextmanager
    async def fake_open_unary(url: str, timeout_s: float | None = None) -> AsyncIterator[_Unary]:
        yield _Unary(seen)

    monkeypatch.setattr(transcriber, "open_unary", fake_open_unary)
    return seen


def _pool(optional: frozenset[str]) -> EndpointPool:
    pool = EndpointPool(("127.0.0.1:9",), ("asr",), Metrics(), optional=("asr_partial",))
    pool.endpoints[0].healthy = True
    pool.endpoints[0].optional = optional
    return pool


AUDIO = np.zeros(8000, np.float32)


async def test_partials_go_to_asr_partial_where_the_endpoint_has_it(
    calls: list[tuple[str, list[str]]],
) -> None:
    stt = TritonTranscriber(_pool(frozenset({"asr_partial"})))
    assert await stt.transcribe(AUDIO, partial=True) == "yeah"
    assert await stt.transcribe(AUDIO) == "yeah"
    assert calls == [
        ("asr_partial", ["AUDIO", "AUDIO_LENGTHS"]),
        ("asr", ["AUDIO", "AUDIO_LENGTHS"]),
    ]


async def test_partials_fall_back_to_asr_with_the_flag_without_asr_partial(
    calls: list[tuple[str, list[str]]],
) -> None:
    stt = TritonTranscriber(_pool(frozenset()))
    await stt.transcribe(AUDIO, partial=True)
    await stt.transcribe(AUDIO)
    assert calls == [
        ("asr", ["AUDIO", "AUDIO_LENGTHS", "PARTIAL"]),
        ("asr", ["AUDIO", "AUDIO_LENGTHS"]),
    ]


class _Client:
    """A tritonserver whose ready models are `models`."""

    def __init__(self, models: set[str]) -> None:
        self.models = models

    def is_server_ready(self, client_timeout: float) -> bool:
        return True

    def is_model_ready(self, name: str, client_timeout: float) -> bool:
        if name == "broken":
            raise RuntimeError("the server did not say")
        return name in self.models

    def close(self) -> None:
        pass


@pytest.mark.parametrize(
    ("models", "healthy", "optional"),
    [
        ({"asr", "asr_partial"}, True, {"asr_partial"}),
        ({"asr"}, True, set()),  # an older server: still healthy, partials on `asr`
        ({"asr_partial"}, False, set()),  # a required model missing: down
    ],
)
async def test_health_check_asks_for_optional_models_without_requiring_them(
    monkeypatch: pytest.MonkeyPatch, models: set[str], healthy: bool, optional: set[str]
) -> None:
    fake = SimpleNamespace(InferenceServerClient=lambda url: _Client(models))
    monkeypatch.setattr(endpoints, "grpcclient", fake)
    pool = EndpointPool(("a:1",), ("asr",), Metrics(), optional=("asr_partial", "broken"))
    await pool.check_all(timeout_s=5.0)
    (endpoint,) = pool.endpoints
    assert endpoint.healthy is healthy
    assert endpoint.optional == optional


def test_serve_loads_asr_partial_but_does_not_require_it() -> None:
    config = ServiceConfig(pipeline="cascade")
    assert "asr_partial" in needed_models(config)
    assert "asr_partial" not in required_models(config)
    assert "asr_partial" in OPTIONAL_MODELS
    assert set(required_models(config)) | set(OPTIONAL_MODELS) == set(needed_models(config))
    # The null pipeline loads no speech models; a bench's server of it may still have them.
    assert "asr_partial" not in needed_models(ServiceConfig(pipeline="null"))

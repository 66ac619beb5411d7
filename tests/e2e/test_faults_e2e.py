"""Triton failing under a live session (rule 8) and the multi-endpoint path.

These tests own their tritonservers (they kill them), separate from the session's shared one.
They run the `null` pipeline: what they test is the realtime server's side (a stream that
fails when its Triton dies, health checks, the choice of endpoint), which is the same code
for every pipeline (backends/response_actor.py, backends/endpoints.py; the only
pipeline-dependent switch, transcripts for the cascade, concerns audio input, and these
sessions speak text). A server of `null` loads 4 light models (~10 s to start here) where the
cascade loads 7 (asr, llm, tts among them; ~22 s), and each test starts two servers.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import tritonclient.grpc as grpcclient

from orchestrator.service.config import Pipeline, ServiceConfig
from orchestrator.service.serve import BackgroundServer, needed_models
from orchestrator.triton import TritonConfig, TritonServer
from tests.conftest import REPO_ROOT, free_port, free_ports
from tests.e2e.realtime_client import ENDED, RawSession, raw_session
from tests.e2e.test_conversation_e2e import _ask_text, _manual

PIPELINE: Pipeline = "null"
# What the realtime server needs ready on an endpoint to call it healthy, no more.
MODELS = needed_models(ServiceConfig(pipeline=PIPELINE))
# Tokens of an answer that is waited out: which endpoint served it and how it ended is all
# that is looked at, and `null` plays each token's 80 ms in real time (24 would be ~2 s).
SHORT = 4


def _triton_config(log: Path, grpc_port: int | None = None) -> TritonConfig:
    http, grpc, metrics = free_ports(3)
    return TritonConfig(
        model_repository=REPO_ROOT / "model_repository",
        http_port=http,
        grpc_port=grpc_port or grpc,
        metrics_port=metrics,
        models=MODELS,
        log_file=log,
    )


def _kill(server: TritonServer) -> None:
    """A crash, not a shutdown: SIGKILL to the server and its stubs."""
    assert server.pid is not None
    os.killpg(server.pid, signal.SIGKILL)
    server.stop()


@contextmanager
def _orchestrator(*urls: str) -> Iterator[BackgroundServer]:
    config = ServiceConfig(
        port=free_port(), triton_urls=urls, health_interval_s=0.2, pipeline=PIPELINE
    )
    with BackgroundServer(config) as server:
        yield server


def _wait_ready(server: BackgroundServer, want: dict[str, bool], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    seen: object = None
    while time.monotonic() < deadline:
        seen = httpx.get(f"{server.http_url}/readyz").json()["endpoints"]
        if seen == want:
            return
        time.sleep(0.1)
    raise AssertionError(f"endpoints {seen}, wanted {want}")


def _answer(session: RawSession, text: str) -> dict[str, object]:
    rid = _ask_text(session, text)
    done = session.until("response.done", timeout_s=90)
    assert done["response"]["id"] == rid
    return dict(done["response"])


def test_rule8_triton_killed_mid_response_fails_it_and_the_session_recovers(
    tmp_path: Path,
) -> None:
    config = _triton_config(tmp_path / "t1.log")
    triton = TritonServer(config)
    triton.start()
    try:
        with _orchestrator(config.grpc_url) as server, raw_session(server.url) as session:
            _wait_ready(server, {config.grpc_url: True})
            _manual(session, max_tokens=200)
            rid = _ask_text(session, "Tell me a very long story about the sea.")
            session.until("response.output_audio.delta", response_id=rid, timeout_s=60)
            _kill(triton)
            done = session.until("response.done", timeout_s=30)
            assert done["response"]["id"] == rid
            assert done["response"]["status"] == "failed", done["response"]
            assert done["response"]["status_details"]["error"]["message"]
            # The session is still there and answers.
            session.send({"type": "conversation.context.retrieve"})
            session.until("conversation.context", timeout_s=10)
            _wait_ready(server, {config.grpc_url: False})
            down = _answer(session, "Are you there?")
            assert down["status"] == "failed"
            assert "no Triton endpoint is ready" in str(down["status_details"])
            triton = TritonServer(config)
            triton.start()
            _wait_ready(server, {config.grpc_url: True})
            # `null` speaks one 80 ms chunk per token in real time: the first answer's 200
            # tokens only had to outlast the kill; this one is waited out, so SHORT.
            _manual(session, max_tokens=SHORT)
            again = _answer(session, "Say hello.")
            assert again["status"] in ENDED, again
    finally:
        triton.stop()


def test_two_endpoints_one_killed_new_responses_go_to_the_other(tmp_path: Path) -> None:
    first = TritonServer(_triton_config(tmp_path / "a.log"))
    second = TritonServer(_triton_config(tmp_path / "b.log"))
    try:
        # Both load their models at once.
        first.launch()
        second.launch()
        first.wait_ready()
        second.wait_ready()
        with _orchestrator(first.grpc_url, second.grpc_url) as server:
            _wait_ready(server, {first.grpc_url: True, second.grpc_url: True})
            with raw_session(server.url) as session:
                _manual(session, max_tokens=SHORT)
                assert _answer(session, "Say hello.")["status"] in ENDED
                _kill(first)
                _wait_ready(server, {first.grpc_url: False, second.grpc_url: True})
                before = _pipeline_requests(second)
                for question in ("Name a fruit.", "Say a number."):
                    assert _answer(session, question)["status"] in ENDED
                assert _pipeline_requests(second) - before == 2
    finally:
        first.stop()
        second.stop()


def _pipeline_requests(server: TritonServer) -> int:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    stats = client.get_inference_statistics(PIPELINE, as_json=True)["model_stats"][0]
    return int(stats.get("inference_stats", {}).get("success", {}).get("count", 0))

"""The `turn` model (Smart Turn v3.2) on a real tritonserver, and TritonTurnPredictor against it:
complete vs cut turns, dynamic batching of many sessions, a bad request failing alone."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import numpy.typing as npt
import pytest
import trio
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from orchestrator.service.backends.endpoints import EndpointPool, NoHealthyEndpoint
from orchestrator.service.backends.turn_predictor import TritonTurnPredictor
from orchestrator.service.metrics import Metrics
from orchestrator.triton import TritonServer
from tests.turntaker_models.turn_speech import SENTENCES, complete_turn, cut_turn
from turntaker_models.contract import INPUT_SAMPLE_RATE
from turntaker_models.turn_window import WINDOW_SAMPLES, window

Rows = npt.NDArray[np.float32]


@pytest.fixture
def client(triton_server: TritonServer) -> Iterator[grpcclient.InferenceServerClient]:
    with grpcclient.InferenceServerClient(triton_server.grpc_url) as c:
        yield c


def _infer(client: grpcclient.InferenceServerClient, rows: Rows) -> Rows:
    """One request of `rows` windows [n, 128000]; the probabilities [n]."""
    rows = np.ascontiguousarray(rows, np.float32)
    tensor = grpcclient.InferInput("AUDIO", list(rows.shape), "FP32")
    tensor.set_data_from_numpy(rows)
    result = client.infer("turn", [tensor])
    found = result.as_numpy("PROBABILITY")
    assert found is not None and found.shape == (rows.shape[0], 1), found
    return np.asarray(found, np.float32).reshape(-1)


def _infer_alone(url: str, row: Rows) -> float:
    with grpcclient.InferenceServerClient(url) as c:
        return float(_infer(c, row[None])[0])


def _at_once(url: str, rows: list[Rows]) -> list[float | str]:
    """One request per row, each on its own client (a session), all released together so the
    dynamic batcher sees them at once; each answer, or the error message."""
    clients = [grpcclient.InferenceServerClient(url) for _ in rows]
    barrier = threading.Barrier(len(rows))

    def send(i: int) -> float | str:
        tensor = grpcclient.InferInput("AUDIO", [1, WINDOW_SAMPLES], "FP32")
        tensor.set_data_from_numpy(np.ascontiguousarray(rows[i][None], np.float32))
        barrier.wait(timeout=30)
        try:
            found = clients[i].infer("turn", [tensor]).as_numpy("PROBABILITY")
        except InferenceServerException as error:
            return str(error)
        assert found is not None and found.shape == (1, 1), found
        return float(found[0, 0])

    try:
        with ThreadPoolExecutor(max_workers=len(rows)) as pool:
            return list(pool.map(send, range(len(rows))))
    finally:
        for c in clients:
            c.close()


def _batch_counts(client: grpcclient.InferenceServerClient) -> dict[int, int]:
    stats = client.get_inference_statistics("turn", as_json=True)
    batches = stats["model_stats"][0].get("batch_stats", [])
    return {int(b["batch_size"]): int(b["compute_infer"].get("count", 0)) for b in batches}


def _session_windows() -> list[Rows]:
    """Eight sessions' windows: both sentences whole and cut, each also quieter with noise."""
    rng = np.random.default_rng(5)
    turns = [f(s) for s in SENTENCES for f in (complete_turn, cut_turn)]
    out = [window(t) for t in turns]
    for t in turns:
        noisy = 0.7 * t + (0.003 * rng.standard_normal(len(t))).astype(np.float32)
        out.append(window(noisy.astype(np.float32)))
    return out


def test_turn_ready(triton_server: TritonServer) -> None:
    states = {m["name"]: m.get("state") for m in triton_server.models()}
    assert states.get("turn") == "READY", states


def test_a_complete_question_scores_high_and_its_cut_low(
    client: grpcclient.InferenceServerClient,
) -> None:
    """At pipecat's threshold (0.5), for each sentence: whole complete, cut mid-phrase not.
    Synthetic speech is a weak judge (tests/turntaker_models/turn_speech.py)."""
    for sentence in SENTENCES:
        whole, cut = _infer(
            client, np.stack([window(complete_turn(sentence)), window(cut_turn(sentence))])
        )
        assert whole > 0.5 > cut, (sentence, whole, cut)


def test_every_row_of_a_request_is_answered_in_order(
    client: grpcclient.InferenceServerClient,
) -> None:
    rows = _session_windows()[:4]
    together = _infer(client, np.stack(rows))
    alone = np.array([_infer(client, row[None])[0] for row in rows])
    np.testing.assert_allclose(together, alone, rtol=0, atol=1e-5)
    # Whole, cut, whole, cut: the order came back as sent.
    assert together[0] > 0.5 > together[1] and together[2] > 0.5 > together[3], together


def test_concurrent_sessions_are_batched_and_get_what_they_get_alone(
    triton_server: TritonServer, client: grpcclient.InferenceServerClient
) -> None:
    url = triton_server.grpc_url
    sessions = _session_windows()
    alone = [_infer_alone(url, row) for row in sessions]
    before = _batch_counts(client)
    batched = _at_once(url, sessions)
    after = _batch_counts(client)
    multi = sum(n - before.get(size, 0) for size, n in after.items() if size > 1)
    assert multi > 0, f"dynamic batching never formed a batch larger than 1: {after}"
    assert all(isinstance(p, float) for p in batched), batched
    np.testing.assert_allclose([float(p) for p in batched], alone, rtol=0, atol=1e-5)


def test_a_wrong_length_is_refused_while_a_request_in_flight_succeeds(
    triton_server: TritonServer, client: grpcclient.InferenceServerClient
) -> None:
    """Triton itself refuses another shape (dims [128000]), naming both shapes."""
    # Eight rows keep the good request busy (~25 ms a row) while the bad one comes and goes.
    rows = np.stack(_session_windows())
    want = _infer(client, rows)
    got: list[Rows] = []

    def good() -> None:
        with grpcclient.InferenceServerClient(triton_server.grpc_url) as c:
            got.append(_infer(c, rows))

    worker = threading.Thread(target=good)
    worker.start()
    with pytest.raises(InferenceServerException, match=r"AUDIO.*128000.*16000"):
        _infer(client, np.zeros((1, INPUT_SAMPLE_RATE), np.float32))
    worker.join(timeout=30)
    assert got, "the good request got no answer"
    np.testing.assert_allclose(got[0], want, rtol=0, atol=1e-5)


def test_a_non_finite_request_fails_alone_in_its_batch(
    triton_server: TritonServer, client: grpcclient.InferenceServerClient
) -> None:
    url = triton_server.grpc_url
    sessions = _session_windows()
    alone = [_infer_alone(url, row) for row in sessions]
    bad = sessions[0].copy()
    bad[1234] = np.nan

    before = _batch_counts(client)
    answers = _at_once(url, [*sessions, bad])
    after = _batch_counts(client)
    assert sum(n - before.get(s, 0) for s, n in after.items() if s > 1) > 0, after
    failure = answers[-1]
    assert isinstance(failure, str), failure
    assert "turn: window 0 holds a non-finite sample (nan) at 1234" in failure, failure
    assert all(isinstance(p, float) for p in answers[:-1]), answers
    np.testing.assert_allclose([float(p) for p in answers[:-1]], alone, rtol=0, atol=1e-5)
    # And the model goes on answering.
    assert abs(_infer(client, sessions[0][None])[0] - alone[0]) <= 1e-5


# TritonTurnPredictor ------------------------------------------------------------------------


async def _ready_pool(url: str) -> EndpointPool:
    pool = EndpointPool((url,), ("turn",), Metrics())
    await pool.check_all(timeout_s=5.0)
    assert pool.any_healthy, "the server or its `turn` model is not ready"
    return pool


async def test_predictor_windows_the_turn_and_returns_the_models_probability(
    client: grpcclient.InferenceServerClient, triton_server: TritonServer
) -> None:
    predictor = TritonTurnPredictor(await _ready_pool(triton_server.grpc_url))
    for sentence in SENTENCES:
        whole, cut = complete_turn(sentence), cut_turn(sentence)
        with trio.fail_after(30):
            p_whole, p_cut = await predictor.predict(whole), await predictor.predict(cut)
        # The raw turn (any length) goes through the model's own window rule.
        direct = _infer(client, np.stack([window(whole), window(cut)]))
        np.testing.assert_allclose([p_whole, p_cut], direct, rtol=0, atol=1e-5)
        assert p_whole > 0.5 > p_cut, (sentence, p_whole, p_cut)
    # A turn longer than 8 s: only its last 8 s count.
    long = np.concatenate([np.full(9 * INPUT_SAMPLE_RATE, 0.05, np.float32), whole])
    with trio.fail_after(30):
        assert (
            abs(await predictor.predict(long) - await predictor.predict(long[-WINDOW_SAMPLES:]))
            <= 1e-6
        )


async def test_predictor_sessions_at_once_get_what_they_get_alone(
    triton_server: TritonServer,
) -> None:
    predictor = TritonTurnPredictor(await _ready_pool(triton_server.grpc_url))
    turns = [f(s) for s in SENTENCES for f in (complete_turn, cut_turn)] * 2
    alone = [await predictor.predict(t) for t in turns]
    together: list[float] = [0.0] * len(turns)

    async def one(i: int) -> None:
        together[i] = await predictor.predict(turns[i])

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            for i in range(len(turns)):
                nursery.start_soon(one, i)
    np.testing.assert_allclose(together, alone, rtol=0, atol=1e-5)


async def test_predictor_raises_on_a_refused_request(triton_server: TritonServer) -> None:
    predictor = TritonTurnPredictor(await _ready_pool(triton_server.grpc_url))
    audio = complete_turn(SENTENCES[0])
    audio[100] = np.inf
    with trio.fail_after(30), pytest.raises(InferenceServerException, match="non-finite"):
        await predictor.predict(audio)


async def test_predictor_raises_without_a_healthy_endpoint() -> None:
    pool = EndpointPool(("127.0.0.1:9",), ("turn",), Metrics())  # never checked: none healthy
    with pytest.raises(NoHealthyEndpoint):
        await TritonTurnPredictor(pool).predict(complete_turn(SENTENCES[0]))


async def test_predictor_raises_when_no_server_answers() -> None:
    # Marked healthy, but nothing listens there: the call fails within its deadline.
    pool = EndpointPool(("127.0.0.1:9",), ("turn",), Metrics())
    pool.endpoints[0].healthy = True
    predictor = TritonTurnPredictor(pool, timeout_s=1.0)
    with trio.fail_after(10), pytest.raises(InferenceServerException):
        await predictor.predict(complete_turn(SENTENCES[0]))

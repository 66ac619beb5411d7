"""orchestrator/service/backends/vad_batcher.py against a real tritonserver's `vad`."""

from __future__ import annotations

import socket
from pathlib import Path

import numpy as np
import pytest
import trio
import tritonclient.grpc as grpcclient

from orchestrator.service.backends.vad_batcher import (
    VadBatcher,
    VadBatcherConfig,
    VadStream,
    VadUnavailable,
    open_vad_batcher,
)
from orchestrator.triton import TritonServer
from tests.triton.tts_client import flite_speech
from tests.triton.vad_client import CHUNK, Audio, speech_probabilities

SESSIONS = 16


def _closed_port_url() -> str:
    # Bound then closed: nothing listens there for the test's short life.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"127.0.0.1:{port}"


def _vad_counts(url: str) -> tuple[int, int]:
    with grpcclient.InferenceServerClient(url) as client:
        stats = client.get_inference_statistics("vad", as_json=True)["model_stats"][0]
    return int(stats.get("inference_count", 0)), int(stats.get("execution_count", 0))


def _sessions(tmp_path: Path) -> list[Audio]:
    speech = flite_speech(tmp_path, "Is anybody there? I think someone just said something.")
    rng = np.random.default_rng(5)
    sessions = []
    for i in range(SESSIONS):
        noise = (0.01 * rng.standard_normal(len(speech) + 8000)).astype(np.float32)
        audio = noise.copy()
        # Each session its own layout: speech starts later and is louder session by session.
        start = 500 * i
        audio[start : start + len(speech)] += speech * (0.4 + 0.05 * i)
        sessions.append(audio)
    return sessions


async def test_sixteen_sessions_batched_equal_one_request_per_chunk(
    triton_server: TritonServer, tmp_path: Path
) -> None:
    url = triton_server.grpc_url
    sessions = _sessions(tmp_path)

    def reference() -> list[Audio]:
        with grpcclient.InferenceServerClient(url) as client:
            return [speech_probabilities(client, audio) for audio in sessions]

    alone = await trio.to_thread.run_sync(reference)
    assert max(float(p.max()) for p in alone) > 0.5, "the reference found no speech"

    batched: list[Audio | None] = [None] * SESSIONS
    inferences0, executions0 = _vad_counts(url)
    with trio.fail_after(120):
        async with open_vad_batcher(VadBatcherConfig(window_s=0.002), url) as batcher:

            async def session(i: int) -> None:
                stream = batcher.open_stream()
                audio = sessions[i]
                probs = [
                    await batcher.probability(stream, audio[s : s + CHUNK])
                    for s in range(0, len(audio) - CHUNK + 1, CHUNK)
                ]
                batched[i] = np.asarray(probs, np.float32)

            async with trio.open_nursery() as nursery:
                for i in range(SESSIONS):
                    nursery.start_soon(session, i)
            stats = batcher.stats
    inferences1, executions1 = _vad_counts(url)
    print(f"{stats}; triton rows {inferences1 - inferences0} in {executions1 - executions0} runs")

    for i, probs in enumerate(batched):
        assert probs is not None
        np.testing.assert_array_equal(probs, alone[i], err_msg=f"session {i}")
    rows = sum(len(p) for p in alone)
    assert stats.rows == rows and stats.failed_requests == 0
    # Our requests carried several sessions' rows...
    assert stats.rows / stats.requests > 4, stats
    # ...and Triton saw them as batches (rows per model execution).
    ran = executions1 - executions0
    assert inferences1 - inferences0 == rows
    assert (inferences1 - inferences0) / ran > 4, (inferences1 - inferences0, ran)


async def test_triton_failure_raises_vad_unavailable_and_the_batcher_goes_on(
    triton_server: TritonServer,
) -> None:
    # The first request goes to a closed port, the later ones to the real server.
    urls = iter([_closed_port_url()])

    def choose() -> str:
        return next(urls, triton_server.grpc_url)

    silence = np.zeros(CHUNK, np.float32)
    with trio.fail_after(30):
        async with open_vad_batcher(VadBatcherConfig(), choose) as batcher:
            stream = batcher.open_stream()
            other = batcher.open_stream()
            failures: list[BaseException] = []

            async def call(s: VadStream) -> None:
                try:
                    await batcher.probability(s, silence)
                except VadUnavailable as error:
                    failures.append(error)

            # Both in the failing request: both callers get the exception.
            async with trio.open_nursery() as nursery:
                nursery.start_soon(call, stream)
                nursery.start_soon(call, other)
            assert len(failures) == 2
            assert batcher.stats.failed_requests == 1
            # The batcher task survived: the next tick works.
            p = await batcher.probability(stream, silence)
            assert 0.0 <= p < 0.5


async def test_a_batcher_at_a_closed_port_keeps_failing_cleanly() -> None:
    silence = np.zeros(CHUNK, np.float32)
    with trio.fail_after(30):
        async with open_vad_batcher(VadBatcherConfig(), _closed_port_url()) as batcher:
            stream = batcher.open_stream()
            for _ in range(3):
                with pytest.raises(VadUnavailable):
                    await batcher.probability(stream, silence)
            assert batcher.stats.failed_requests == 3


async def test_one_stream_used_by_two_tasks_at_once_is_refused(
    triton_server: TritonServer,
) -> None:
    silence = np.zeros(CHUNK, np.float32)
    # A long window keeps the first call pending while the second one tries.
    config = VadBatcherConfig(window_s=0.2)
    with trio.fail_after(30):
        async with open_vad_batcher(config, triton_server.grpc_url) as batcher:
            stream = batcher.open_stream()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(batcher.probability, stream, silence)
                await trio.sleep(0.01)
                with pytest.raises(trio.BusyResourceError):
                    await batcher.probability(stream, silence)


async def test_cancelled_call_leaves_the_stream_usable(triton_server: TritonServer) -> None:
    silence = np.zeros(CHUNK, np.float32)
    speechlike = np.random.default_rng(3).standard_normal(CHUNK).astype(np.float32) * 0.3
    # A long window: the first call is surely cancelled before its chunk is sent.
    with trio.fail_after(30):
        async with open_vad_batcher(VadBatcherConfig(window_s=0.5), triton_server.grpc_url) as b:
            stream = b.open_stream()
            with trio.move_on_after(0.01) as scope:
                await b.probability(stream, speechlike)
            assert scope.cancelled_caught
            # Waits for the dropped chunk's turn, then runs from the untouched (fresh) state.
            again = await b.probability(stream, silence)
            fresh = await b.probability(b.open_stream(), silence)
            assert again == fresh


async def test_callers_get_vad_unavailable_once_the_batcher_stopped(
    triton_server: TritonServer,
) -> None:
    batcher = VadBatcher(VadBatcherConfig(window_s=10.0), triton_server.grpc_url)
    silence = np.zeros(CHUNK, np.float32)
    failures: list[VadUnavailable] = []

    async def caller() -> None:
        try:
            await batcher.probability(batcher.open_stream(), silence)
        except VadUnavailable as error:
            failures.append(error)

    with trio.fail_after(10):
        async with trio.open_nursery() as callers:
            async with trio.open_nursery() as server:
                await server.start(batcher.run)
                # Pending in the long window when the batcher stops.
                callers.start_soon(caller)
                await trio.sleep(0.05)
                server.cancel_scope.cancel()
        assert len(failures) == 1
        with pytest.raises(VadUnavailable):
            await batcher.probability(batcher.open_stream(), silence)


async def test_wrong_chunk_size_is_refused(triton_server: TritonServer) -> None:
    async with open_vad_batcher(VadBatcherConfig(), triton_server.grpc_url) as batcher:
        with pytest.raises(ValueError, match="512"):
            await batcher.probability(batcher.open_stream(), np.zeros(480, np.float32))


# K chunks per row -------------------------------------------------------------------------
def _chunks(audio: Audio) -> list[Audio]:
    return [audio[s : s + CHUNK] for s in range(0, len(audio) - CHUNK + 1, CHUNK)]


def _appends(chunks: list[Audio], sizes: list[int]) -> list[list[Audio]]:
    """`chunks` cut into appends of the given sizes, cycled."""
    out, start, i = [], 0, 0
    while start < len(chunks):
        out.append(chunks[start : start + sizes[i % len(sizes)]])
        start += sizes[i % len(sizes)]
        i += 1
    return out


async def test_probabilities_of_k_chunks_equal_k_probability_calls(
    triton_server: TritonServer, tmp_path: Path
) -> None:
    chunks = _chunks(_sessions(tmp_path)[3])
    # max_chunks_per_row=5: the 8-chunk appends go as a 5-chunk row, then a 3-chunk one.
    config = VadBatcherConfig(max_chunks_per_row=5)
    with trio.fail_after(60):
        async with open_vad_batcher(config, triton_server.grpc_url) as batcher:
            stream = batcher.open_stream()
            one = [await batcher.probability(stream, chunk) for chunk in chunks]
            assert max(one) > 0.5, "no speech found"
            rows0, chunks0 = batcher.stats.rows, batcher.stats.chunks
            stream = batcher.open_stream()
            many: list[float] = []
            for append in _appends(chunks, [3, 4, 3, 1, 8]):
                probs = await batcher.probabilities(stream, append)
                assert len(probs) == len(append)
                many += probs
            rows, sent = batcher.stats.rows - rows0, batcher.stats.chunks - chunks0
            assert await batcher.probabilities(stream, []) == []
    np.testing.assert_allclose(many, one, rtol=0, atol=1e-5)
    assert sent == len(chunks)
    assert rows < len(chunks) / 2, (rows, len(chunks))


async def test_rows_of_different_k_in_flight_together(
    triton_server: TritonServer, tmp_path: Path
) -> None:
    url = triton_server.grpc_url
    sessions = _sessions(tmp_path)

    def reference() -> list[Audio]:
        with grpcclient.InferenceServerClient(url) as client:
            return [speech_probabilities(client, audio) for audio in sessions]

    alone = await trio.to_thread.run_sync(reference)
    batched: list[Audio | None] = [None] * SESSIONS
    # Rows of every K at once: several requests per collection, and leftovers of other K.
    config = VadBatcherConfig(window_s=0.005, max_rows=6, max_requests_in_flight=2)
    with trio.fail_after(120):
        async with open_vad_batcher(config, url) as batcher:

            async def session(i: int) -> None:
                stream = batcher.open_stream()
                probs: list[float] = []
                for append in _appends(_chunks(sessions[i]), [1 + i % 5, 3, 4]):
                    probs += await batcher.probabilities(stream, append)
                batched[i] = np.asarray(probs, np.float32)

            async with trio.open_nursery() as nursery:
                for i in range(SESSIONS):
                    nursery.start_soon(session, i)
            stats = batcher.stats
    assert stats.failed_requests == 0
    assert stats.chunks == sum(len(p) for p in alone) and stats.rows < stats.chunks
    for i, probs in enumerate(batched):
        assert probs is not None
        np.testing.assert_allclose(probs, alone[i], rtol=0, atol=1e-5, err_msg=f"session {i}")


async def test_a_cancelled_row_in_flight_still_updates_the_state(
    triton_server: TritonServer, tmp_path: Path
) -> None:
    chunks = _chunks(_sessions(tmp_path)[0])[20:24]
    with trio.fail_after(30):
        async with open_vad_batcher(VadBatcherConfig(window_s=0), triton_server.grpc_url) as b:
            reference = b.open_stream()
            await b.probabilities(reference, chunks[:3])
            want = await b.probability(reference, chunks[3])
            # Sensitive: from a fresh state the answer differs.
            assert abs(await b.probability(b.open_stream(), chunks[3]) - want) > 0.01

            stream = b.open_stream()
            sent = b.stats.requests
            answered: list[list[float]] = []

            async def row() -> None:
                answered.append(await b.probabilities(stream, chunks[:3]))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(row)
                # Cancelled once its row is in a request, before the answer (a round trip
                # takes milliseconds; this wakes at the first scheduling after the send).
                while b.stats.requests == sent:
                    await trio.sleep(0)
                nursery.cancel_scope.cancel()
            assert not answered
            # The next call waits for that row and continues from the state it left.
            assert await b.probability(stream, chunks[3]) == pytest.approx(want, abs=1e-5)


async def test_a_cancelled_row_never_sent_is_dropped(
    triton_server: TritonServer, tmp_path: Path
) -> None:
    chunks = _chunks(_sessions(tmp_path)[0])[20:24]
    with trio.fail_after(30):
        async with open_vad_batcher(VadBatcherConfig(window_s=0.5), triton_server.grpc_url) as b:
            stream = b.open_stream()
            with trio.move_on_after(0.01) as scope:
                await b.probabilities(stream, chunks[:3])
            assert scope.cancelled_caught
            again = await b.probabilities(stream, chunks[3:])
            fresh = await b.probabilities(b.open_stream(), chunks[3:])
            assert again == fresh
            # Sensitive: had the row been sent, the answer would differ.
            after_row = b.open_stream()
            await b.probabilities(after_row, chunks[:3])
            assert abs((await b.probabilities(after_row, chunks[3:]))[0] - fresh[0]) > 0.01


async def test_wrong_chunk_size_in_a_row_is_refused(triton_server: TritonServer) -> None:
    good, bad = np.zeros(CHUNK, np.float32), np.zeros(480, np.float32)
    async with open_vad_batcher(VadBatcherConfig(), triton_server.grpc_url) as batcher:
        stream = batcher.open_stream()
        with pytest.raises(ValueError, match="512"):
            await batcher.probabilities(stream, [good, bad, good])
        # Nothing was sent: the stream is still fresh and free.
        assert batcher.stats.rows == 0
        assert len(await batcher.probabilities(stream, [good, good])) == 2

"""The `null` benchmark model on a real tritonserver: the pipeline contract with no compute.

Chunks of CHUNK_MS at 24 kHz with a text delta each, max_tokens of them, then the final flag;
text only when audio=false; fifty streams at once on one instance; every cancel path (board
and stream, board alone, stream alone) records a stop for `null` and ends the stream; bad input
is a clear error; the launcher's null_speed reaches the model.

Timing is checked only loosely (a noisy two-core machine): the first chunk is not immediate,
and nothing is absurdly late. TURNTAKER_TEST_MODELS=null,cancel is enough.
"""

from __future__ import annotations

import argparse
import queue
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from orchestrator.triton import TritonConfig, TritonServer
from orchestrator.triton.cli import add_arguments, config_from_args
from orchestrator.triton.pipeline_client import (
    PipelineChunk,
    PipelineError,
    PipelineRequest,
    PipelineStream,
    cancel_on_board,
    pipeline_inputs,
)
from tests.conftest import REPO_ROOT, free_port
from turntaker_models.cancel_board import StopRecord
from turntaker_models.contract import (
    OUTPUT_SAMPLE_RATE,
    Conversation,
    GenerationParameters,
    Message,
    TextPart,
)

# The defaults in model_repository/null/config.pbtxt.
FIRST_CHUNK_S = 0.234
CHUNK_SAMPLES = 80 * OUTPUT_SAMPLE_RATE // 1000
STOP_WAIT_S = 5.0


def request(max_tokens: int, audio: bool = True, request_id: str | None = None) -> PipelineRequest:
    return PipelineRequest(
        request_id=f"null-{uuid.uuid4()}" if request_id is None else request_id,
        conversation=Conversation([Message("user", [TextPart("Hello?")])]),
        parameters=GenerationParameters(max_tokens=max_tokens, audio=audio),
    )


def run(server: TritonServer, req: PipelineRequest) -> list[PipelineChunk]:
    with PipelineStream(server.grpc_url, "null") as stream:
        stream.start(req)
        return list(stream.chunks(timeout_s=30.0))


def data(chunks: list[PipelineChunk]) -> list[PipelineChunk]:
    return [c for c in chunks if c.text or c.audio.size]


def wait_for_stop(server: TritonServer, request_id: str) -> list[StopRecord]:
    deadline = time.monotonic() + STOP_WAIT_S
    with server.board() as board:
        while time.monotonic() < deadline:
            if stops := board.stops(request_id):
                return stops
            time.sleep(0.005)
        return board.stops(request_id)


def test_null_streams_max_tokens_chunks_then_the_final_flag(triton_server: TritonServer) -> None:
    req = request(max_tokens=6)
    sent_at = time.monotonic()
    chunks = run(triton_server, req)
    got = data(chunks)
    assert [c.text for c in got] == [f"tok{i} " for i in range(6)]
    for chunk in got:
        assert chunk.audio.shape == (CHUNK_SAMPLES,) and chunk.audio.dtype == np.float32
        assert 0 < float(np.abs(chunk.audio).max()) <= 1.0
    # Every data response carries both outputs; the last response is the empty final one.
    assert len(chunks) == 7 and chunks[-1].final
    assert not chunks[-1].text and not chunks[-1].audio.size
    assert not any(c.final for c in chunks[:-1])
    first_s = got[0].received_at - sent_at
    print(f"null: first chunk after {first_s * 1e3:.0f} ms (configured {FIRST_CHUNK_S * 1e3:.0f})")
    # Not immediate (the model waits FIRST_CHUNK_MS before anything), and not absurdly late.
    assert FIRST_CHUNK_S - 0.01 <= first_s < 10.0
    # The stream went out paced, not all at once: its chunks span the intervals between them.
    assert got[-1].received_at - got[0].received_at > 0.2


def test_null_text_only_without_audio(triton_server: TritonServer) -> None:
    chunks = run(triton_server, request(max_tokens=4, audio=False))
    assert "".join(c.text for c in chunks) == "tok0 tok1 tok2 tok3 "
    assert not any(c.audio.size for c in chunks)
    assert chunks[-1].final


def test_null_fifty_streams_at_once_all_complete(triton_server: TritonServer) -> None:
    with ExitStack() as stack:
        streams = [
            stack.enter_context(PipelineStream(triton_server.grpc_url, "null")) for _ in range(50)
        ]
        began = time.monotonic()
        for stream in streams:
            stream.start(request(max_tokens=4))
        results = [list(stream.chunks(timeout_s=30.0)) for stream in streams]
    elapsed = time.monotonic() - began
    print(f"null: 50 streams of 4 chunks in {elapsed:.2f} s")
    for chunks in results:
        assert [c.text for c in data(chunks)] == ["tok0 ", "tok1 ", "tok2 ", "tok3 "]
        assert all(c.audio.size == CHUNK_SAMPLES for c in data(chunks))
        assert chunks[-1].final
    # One after the other they would take 50 x 0.47 s; together, about one stream's time.
    assert elapsed < 15.0


@pytest.mark.parametrize("how", ["pipeline", "board", "stream"])
def test_null_cancel_stops_the_stream_and_records_a_stop(
    triton_server: TritonServer, how: str
) -> None:
    """`pipeline`: PipelineStream.cancel() (board write, then stream cancel); `board`: the board
    write alone, the stream kept open to see the final flag and nothing after the cancel;
    `stream`: the gRPC stream cancel alone, which reaches a model called directly."""
    req = request(max_tokens=1000)
    stream = PipelineStream(triton_server.grpc_url, "null")
    with stream:
        stream.start(req)
        chunks = stream.chunks(timeout_s=30.0)
        for _ in range(2):
            assert not next(chunks).final
        if how == "pipeline":
            stream.cancel()
        elif how == "stream":
            stream.close()
        else:
            cancelled_at = cancel_on_board(stream._client, [req.request_id])
            after = list(chunks)
            assert after and after[-1].final
            late = [c for c in data(after) if c.received_at * 1e9 > cancelled_at]
            # One chunk may have left just before the board write; never a second one.
            assert len(late) <= 1, f"{len(late)} chunks after the cancel"
    stops = wait_for_stop(triton_server, req.request_id)
    assert [s.stage for s in stops] == ["null"], stops
    # The stream is gone for good: no second stop record turns up later.
    time.sleep(0.2)
    with triton_server.board() as board:
        assert len(board.stops(req.request_id)) == 1
    # And the model serves the next request as before.
    assert len(data(run(triton_server, request(max_tokens=2)))) == 2


def stream_error(server: TritonServer, inputs: list[grpcclient.InferInput]) -> str:
    """Streams one raw request on `null`; the error it ends with ("" if none)."""
    answers: queue.Queue[tuple[str, bool]] = queue.Queue()

    def callback(result: Any = None, error: Any = None) -> None:
        if error is not None:
            # An error response is the request's last one (it carries the final flag).
            answers.put((str(error), True))
            return
        final = result.get_response().parameters.get("triton_final_response")
        answers.put(("", bool(final and final.bool_param)))

    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        client.start_stream(callback=callback)
        client.async_stream_infer(
            "null", inputs, request_id="bad", enable_empty_final_response=True
        )
        message, final = answers.get(timeout=30.0)
        while not final:
            message, final = answers.get(timeout=30.0)
        return message
    finally:
        # The request has ended: a cancel now would pin the model in the server.
        client.stop_stream(cancel_requests=False)
        client.close()


@pytest.mark.parametrize(
    ("raw", "message"),
    [(b"{not json", "null: PARAMETERS"), (b'{"max_tokens": 0}', "max_tokens must be at least 1")],
)
def test_null_bad_parameters_are_a_clear_error(
    triton_server: TritonServer, raw: bytes, message: str
) -> None:
    inputs = pipeline_inputs(request(max_tokens=3))
    inputs[4].set_data_from_numpy(np.array([raw], dtype=np.object_))
    assert message in stream_error(triton_server, inputs)


def test_null_empty_request_id_is_a_clear_error(triton_server: TritonServer) -> None:
    with pytest.raises(PipelineError, match="REQUEST_ID must be a non-empty id"):
        run(triton_server, request(max_tokens=3, request_id=""))


def test_null_speed_must_be_above_zero() -> None:
    for bad in (0.0, -2.0):
        with pytest.raises(ValueError, match="null speed must be a finite number above 0"):
            TritonConfig(model_repository=REPO_ROOT / "model_repository", null_speed=bad)
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert config_from_args(parser.parse_args(["--null-speed", "1000"])).null_speed == 1000.0
    assert config_from_args(parser.parse_args([])).null_speed == 1.0
    for bad_arg in ("0", "-1", "fast"):
        with pytest.raises(SystemExit):
            parser.parse_args(["--null-speed", bad_arg])


@pytest.fixture(scope="module")
def fast_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonServer]:
    """A server of its own with `null` a hundred times faster (the launcher's null_speed)."""
    config = TritonConfig(
        model_repository=REPO_ROOT / "model_repository",
        http_port=free_port(),
        grpc_port=free_port(),
        metrics_port=free_port(),
        log_file=tmp_path_factory.mktemp("null-fast") / "tritonserver.log",
        models=("null", "cancel"),
        null_speed=100.0,
    )
    with TritonServer(config) as server:
        yield server


def test_null_speed_reaches_the_model_through_the_launcher(fast_server: TritonServer) -> None:
    log = fast_server.config.log_file
    assert log is not None
    # The model reports its pacing once loaded: the delays divided by the speed.
    assert "null: first chunk after 2.340 ms" in log.read_text(errors="replace")
    began = time.monotonic()
    chunks = run(fast_server, request(max_tokens=50))
    elapsed = time.monotonic() - began
    assert len(data(chunks)) == 50 and chunks[-1].final
    # At speed 1 this stream takes 0.234 + 49 x 0.08 = 4.15 s; at 100, about 40 ms.
    assert elapsed < 3.0, f"{elapsed:.2f} s: the speed did not reach the model"

"""The `llm` model on a real tritonserver: streaming, determinism, sentences, cancel, errors."""

from __future__ import annotations

import queue
import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from orchestrator.triton import TritonServer
from orchestrator.triton.pipeline_client import cancel_on_board
from turntaker_models.contract import (
    Conversation,
    GenerationParameters,
    Message,
    TextPart,
    encode,
)

QUESTION = "What is the capital of France?"
LONG_QUESTION = "Tell me a long story about a dog who learns to fly."


@dataclass(frozen=True)
class LlmChunk:
    text: str
    sentence: str
    final: bool
    received_at: float


class LlmStream:
    """One gRPC stream to `llm` (the sync client carries one stream per connection)."""

    def __init__(self, url: str) -> None:
        self.client = grpcclient.InferenceServerClient(url)
        self.items: queue.Queue[LlmChunk | Exception] = queue.Queue()
        self.open = False
        self.finished = False

    def start(
        self,
        request_id: str,
        conversation: bytes,
        parameters: GenerationParameters,
        transcripts: list[str] | None = None,
    ) -> None:
        def callback(result: Any = None, error: Any = None) -> None:
            if error is not None:
                self.items.put(Exception(str(error)))
                return
            response = result.get_response()
            names = {o.name for o in response.outputs}
            text = result.as_numpy("TEXT_DELTA")[0].decode() if "TEXT_DELTA" in names else ""
            sentence = result.as_numpy("SENTENCE")[0].decode() if "SENTENCE" in names else ""
            final = response.parameters.get("triton_final_response")
            final_flag = bool(final and final.bool_param)
            self.items.put(LlmChunk(text, sentence, final_flag, time.monotonic()))

        inputs = [
            _strings("REQUEST_ID", [request_id.encode()]),
            _strings("CONVERSATION", [conversation]),
            _strings("PARAMETERS", [encode(parameters)]),
        ]
        if transcripts is not None:
            inputs.append(_strings("TRANSCRIPTS", [t.encode() for t in transcripts]))
        self.client.start_stream(callback=callback)
        self.open = True
        self.client.async_stream_infer(
            "llm", inputs, request_id=request_id, enable_empty_final_response=True
        )

    def chunks(self, timeout_s: float = 30.0) -> Iterator[LlmChunk]:
        while True:
            item = self.items.get(timeout=timeout_s)
            if isinstance(item, Exception):
                raise item
            yield item
            if item.final:
                self.finished = True
                return

    def close(self) -> None:
        if self.open:
            self.open = False
            # Cancelling a stream whose request already ended leaves the model referenced in
            # tritonserver 2.51: it then never unloads and a SIGTERM hangs until the SIGKILL.
            self.client.stop_stream(cancel_requests=not self.finished)
        self.client.close()


def _strings(name: str, values: list[bytes]) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput(name, [len(values)], "BYTES")
    tensor.set_data_from_numpy(np.array(values, dtype=np.object_))
    return tensor


def ask(question: str) -> bytes:
    return encode(Conversation([Message("user", [TextPart(question)])]))


def run_llm(
    server: TritonServer, conversation: bytes, parameters: GenerationParameters
) -> list[LlmChunk]:
    stream = LlmStream(server.grpc_url)
    try:
        stream.start(f"llm-{uuid.uuid4()}", conversation, parameters)
        return list(stream.chunks())
    finally:
        stream.close()


def squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


def test_llm_streams_a_deterministic_english_answer(triton_server: TritonServer) -> None:
    params = GenerationParameters(max_tokens=40, temperature=0.0)
    first = run_llm(triton_server, ask(QUESTION), params)
    second = run_llm(triton_server, ask(QUESTION), params)
    deltas = [c.text for c in first if c.text]
    text = "".join(deltas)
    assert len(deltas) >= 3, deltas
    assert text == "".join(c.text for c in second), "greedy decoding is not deterministic"
    words = re.findall(r"[A-Za-z']+", text)
    assert len(words) >= 3 and "paris" in text.lower(), text
    sentences = [c.sentence for c in first if c.sentence]
    assert sentences, f"no SENTENCE in {text!r}"
    assert squash("".join(sentences)) == squash(text)


def test_llm_sampling_follows_the_seed(triton_server: TritonServer) -> None:
    question = ask("Say something about the sea.")

    def sample(seed: int) -> str:
        params = GenerationParameters(max_tokens=16, temperature=1.0, top_p=0.9, seed=seed)
        return "".join(c.text for c in run_llm(triton_server, question, params))

    assert sample(1) == sample(1)
    assert len({sample(s) for s in (1, 2, 3)}) > 1, "different seeds gave the same text"


def test_llm_bad_conversation_is_a_clear_error(triton_server: TritonServer) -> None:
    with pytest.raises(Exception, match="CONVERSATION is not JSON"):
        run_llm(triton_server, b"{not json", GenerationParameters(max_tokens=4))
    with pytest.raises(Exception, match="no user message"):
        run_llm(triton_server, b'{"messages": []}', GenerationParameters(max_tokens=4))
    chunks = run_llm(triton_server, ask(QUESTION), GenerationParameters(max_tokens=8))
    assert "".join(c.text for c in chunks).strip()


@pytest.mark.parametrize("how", ["stream", "board"])
def test_llm_stops_on_cancel(triton_server: TritonServer, how: str) -> None:
    request_id = f"llm-cancel-{how}-{uuid.uuid4()}"
    stream = LlmStream(triton_server.grpc_url)
    with triton_server.board() as board:
        try:
            stream.start(request_id, ask(LONG_QUESTION), GenerationParameters(max_tokens=400))
            chunks = stream.chunks()
            for _ in range(3):
                next(chunks)
            if how == "board":
                cancelled_at = cancel_on_board(stream.client, [request_id])
                # The board alone stops it; the stream stays open and gets the final flag.
                rest = list(chunks)
                assert rest[-1].final and len(rest) < 50, len(rest)
            else:
                cancelled_at = time.monotonic_ns()
                stream.close()
        finally:
            stream.close()
        deadline = time.monotonic() + 5.0
        while not board.stops(request_id) and time.monotonic() < deadline:
            time.sleep(0.01)
        stops = board.stops(request_id)
    assert [s.stage for s in stops] == ["llm"], stops
    delay_ms = (stops[0].t_ns - cancelled_at) / 1e6
    print(f"llm cancel ({how}) -> stop: {delay_ms:.1f} ms")
    # One decode step is ~50 ms on one core; allow a loaded machine ten of them.
    assert delay_ms < 500, delay_ms
    chunks_after = run_llm(triton_server, ask(QUESTION), GenerationParameters(max_tokens=8))
    assert "".join(c.text for c in chunks_after).strip()


def test_llm_serves_streams_side_by_side(triton_server: TritonServer) -> None:
    params = GenerationParameters(max_tokens=24)
    streams = [LlmStream(triton_server.grpc_url) for _ in range(2)]
    try:
        for i, stream in enumerate(streams):
            stream.start(f"llm-side-{i}-{uuid.uuid4()}", ask(QUESTION), params)
        first, second = ([*s.chunks()] for s in streams)
    finally:
        for stream in streams:
            stream.close()
    # Both got the same greedy answer, and the one instance decoded them at the same time.
    assert "".join(c.text for c in first) == "".join(c.text for c in second)
    assert second[0].received_at < first[-1].received_at

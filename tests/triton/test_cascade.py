"""The `cascade` ensemble (asr -> llm -> tts) on a real tritonserver: a spoken question gets a
streamed text and spoken answer; cancels through the board stop every step; errors come back
clearly; a text-only conversation (no audio parts) works.

The launcher loads an ensemble's steps with it, so TURNTAKER_TEST_MODELS=cascade,cancel is
enough.
"""

from __future__ import annotations

import queue
import re
import time
import uuid
from pathlib import Path
from typing import Any

import jiwer
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from scipy.signal import resample_poly

from orchestrator.triton import TritonServer
from orchestrator.triton.pipeline_client import (
    PipelineChunk,
    PipelineRequest,
    PipelineStream,
    cancel_on_board,
    pipeline_inputs,
)
from tests.triton.test_vad import flite_speech
from tests.triton.tts_client import TtsStream, loud_runs
from turntaker_models.cancel_board import StopRecord
from turntaker_models.cascade.llm import SentenceCutter
from turntaker_models.contract import (
    OUTPUT_SAMPLE_RATE,
    AudioPart,
    Conversation,
    GenerationParameters,
    Message,
    TextPart,
)

QUESTION = "What is the capital of France?"
LONG_QUESTION = "Tell me a long story about a dog who learns to fly."
STOP_WAIT_S = 5.0


def spoken(tmp_path: Path, text: str) -> PipelineRequest:
    audio = flite_speech(tmp_path, text)
    return PipelineRequest(
        request_id=f"cascade-{uuid.uuid4()}",
        conversation=Conversation([Message("user", [AudioPart(0)])]),
        audio=(audio,),
        parameters=GenerationParameters(max_tokens=40),
    )


def written(text: str, parameters: GenerationParameters) -> PipelineRequest:
    return PipelineRequest(
        request_id=f"cascade-{uuid.uuid4()}",
        conversation=Conversation([Message("user", [TextPart(text)])]),
        parameters=parameters,
    )


def run(server: TritonServer, request: PipelineRequest) -> list[PipelineChunk]:
    with PipelineStream(server.grpc_url, "cascade") as stream:
        stream.start(request)
        return list(stream.chunks(timeout_s=30.0))


def transcribe(server: TritonServer, audio_24k: np.ndarray) -> str:
    audio = resample_poly(audio_24k, 2, 3).astype(np.float32)
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        a = grpcclient.InferInput("AUDIO", [audio.shape[0]], "FP32")
        a.set_data_from_numpy(audio)
        n = grpcclient.InferInput("AUDIO_LENGTHS", [1], "INT32")
        n.set_data_from_numpy(np.array([audio.shape[0]], np.int32))
        text = client.infer("asr", [a, n]).as_numpy("TEXT")
    return str(text[0].decode())


def normalise(text: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9' ]+", " ", text.lower()).split())


def wait_for_stops(server: TritonServer, request_id: str, stages: set[str]) -> list[StopRecord]:
    deadline = time.monotonic() + STOP_WAIT_S
    with server.board() as board:
        while time.monotonic() < deadline:
            stops = board.stops(request_id)
            if stages <= {s.stage for s in stops}:
                return stops
            time.sleep(0.005)
        return board.stops(request_id)


def test_cascade_is_an_ensemble(triton_server: TritonServer) -> None:
    with grpcclient.InferenceServerClient(triton_server.grpc_url) as client:
        config = client.get_model_config("cascade").config
        steps = [s.model_name for s in config.ensemble_scheduling.step]
        assert config.platform == "ensemble" and steps == ["asr", "llm", "tts"]
        assert client.is_model_ready("cascade")


def latencies(chunks: list[PipelineChunk], sent_at: float) -> str:
    first_text = min(c.received_at for c in chunks if c.text) - sent_at
    first_audio = min((c.received_at for c in chunks if c.audio.size), default=float("nan"))
    audio_ms = (first_audio - sent_at) * 1e3
    return f"first text {first_text * 1e3:.0f} ms, first audio {audio_ms:.0f} ms"


def test_cascade_answers_a_spoken_question(triton_server: TritonServer, tmp_path: Path) -> None:
    request = spoken(tmp_path, QUESTION)
    sent_at = time.monotonic()
    chunks = run(triton_server, request)
    print(f"cascade spoken question: {latencies(chunks, sent_at)}")
    text = "".join(c.text for c in chunks)
    audio = np.concatenate([c.audio for c in chunks])
    assert "paris" in text.lower(), text
    assert audio.shape[0] > OUTPUT_SAMPLE_RATE // 2, "less than half a second of speech"
    first_text = min(c.received_at for c in chunks if c.text)
    last_audio = max(c.received_at for c in chunks if c.audio.size)
    assert first_text < last_audio, "the text did not stream with the audio: it all came last"
    heard = transcribe(triton_server, audio)
    error = jiwer.wer(normalise(text), normalise(heard))
    assert error <= 0.35, (text, heard, error)


def llm_text(server: TritonServer, request: PipelineRequest) -> str:
    """The llm's answer to `request` called directly (greedy: the same as in the ensemble)."""
    texts: queue.Queue[tuple[str, bool] | str] = queue.Queue()

    def callback(result: Any = None, error: Any = None) -> None:
        if error is not None:
            texts.put(str(error))
            return
        response = result.get_response()
        final = response.parameters.get("triton_final_response")
        names = {o.name for o in response.outputs}
        text = result.as_numpy("TEXT_DELTA")[0].decode() if "TEXT_DELTA" in names else ""
        texts.put((text, bool(final and final.bool_param)))

    inputs = pipeline_inputs(request)
    llm_inputs = [i for i in inputs if i.name() in ("REQUEST_ID", "CONVERSATION", "PARAMETERS")]
    client = grpcclient.InferenceServerClient(server.grpc_url)
    out: list[str] = []
    try:
        client.start_stream(callback=callback)
        client.async_stream_infer(
            "llm", llm_inputs, request_id="direct", enable_empty_final_response=True
        )
        while True:
            item = texts.get(timeout=60.0)
            assert not isinstance(item, str), item
            out.append(item[0])
            if item[1]:
                return "".join(out)
    finally:
        client.stop_stream(cancel_requests=False)
        client.close()


def test_cascade_streams_text_before_the_end(triton_server: TritonServer) -> None:
    request = written("Tell me about dogs.", GenerationParameters(max_tokens=48))
    sent_at = time.monotonic()
    chunks = run(triton_server, request)
    print(f"cascade written question: {latencies(chunks, sent_at)}")
    # Every delta came through tts, in order: the text is exactly the llm's own.
    assert "".join(c.text for c in chunks) == llm_text(triton_server, request)
    texts = [c for c in chunks if c.text]
    audios = [c for c in chunks if c.audio.size]
    assert len(texts) >= 10 and audios, (len(texts), len(audios))
    end = chunks[-1].received_at
    # Tokens come ~50 ms apart: the first text is out long before the answer is done.
    assert end - texts[0].received_at > 0.5
    # Audio of the first sentence arrives while the llm is still writing the rest.
    assert audios[0].received_at < texts[-1].received_at


def test_cascade_text_only_without_audio(triton_server: TritonServer) -> None:
    # Zero-size AUDIO and AUDIO_LENGTHS (asr answers TEXT [0]), and audio=false: tts only
    # passes the text on.
    chunks = run(triton_server, written(QUESTION, GenerationParameters(max_tokens=24, audio=False)))
    assert "paris" in "".join(c.text for c in chunks).lower()
    assert not any(c.audio.size for c in chunks)
    assert chunks[-1].final


def first_error(server: TritonServer, inputs: list[grpcclient.InferInput]) -> str:
    """Streams one raw request on `cascade`; the error it ends with ("" if none)."""
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
            "cascade", inputs, request_id="bad", enable_empty_final_response=True
        )
        message, final = answers.get(timeout=30.0)
        while not final:
            message, final = answers.get(timeout=30.0)
        return message
    finally:
        # The request has ended: a cancel now would pin the model in the server.
        client.stop_stream(cancel_requests=False)
        client.close()


def test_cascade_bad_conversation_is_a_clear_error(triton_server: TritonServer) -> None:
    request = written(QUESTION, GenerationParameters(max_tokens=8))
    inputs = pipeline_inputs(request)
    inputs[1].set_data_from_numpy(np.array([b"{not json"], dtype=np.object_))
    assert "CONVERSATION is not JSON" in first_error(triton_server, inputs)
    chunks = run(triton_server, written(QUESTION, GenerationParameters(max_tokens=8, audio=False)))
    assert "".join(c.text for c in chunks).strip()


@pytest.mark.parametrize("how", ["pipeline", "board"])
def test_cascade_cancel_stops_every_step(triton_server: TritonServer, how: str) -> None:
    """`pipeline`: PipelineStream.cancel() (board write, then the stream cancel, which does not
    reach the steps); `board`: the board write alone, the stream kept open to see that nothing
    more comes and that the stream still ends with the final flag."""
    request = written(LONG_QUESTION, GenerationParameters(max_tokens=300))
    stream = PipelineStream(triton_server.grpc_url, "cascade")
    with stream:
        stream.start(request)
        chunks = stream.chunks(timeout_s=30.0)
        # Cancel once tts is speaking, so that both llm and tts have work to stop.
        while not next(chunks).audio.size:
            pass
        if how == "pipeline":
            cancelled_at = stream.cancel()
        else:
            cancelled_at = cancel_on_board(stream._client, [request.request_id])
            after = list(chunks)
            assert after and after[-1].final
            late = [
                c
                for c in after
                if (c.text or c.audio.size) and c.received_at * 1e9 > cancelled_at + 50e6
            ]
            assert not late, f"{len(late)} chunks more than 50 ms after the cancel"
    stops = wait_for_stops(triton_server, request.request_id, {"llm", "tts"})
    stages = {s.stage for s in stops}
    assert {"llm", "tts"} <= stages, stops
    last_stop_ms = (max(s.t_ns for s in stops) - cancelled_at) / 1e6
    detail = ", ".join(f"{s.stage} {(s.t_ns - cancelled_at) / 1e6:.1f} ms" for s in stops)
    print(f"cascade cancel ({how}) -> last stop {last_stop_ms:.1f} ms ({detail})")
    assert last_stop_ms < 1000, detail
    # Nothing runs on for the cancelled id: no second stop record turns up later.
    time.sleep(0.2)
    with triton_server.board() as board:
        assert len(board.stops(request.request_id)) == len(stops)
    chunks_after = run(triton_server, written(QUESTION, GenerationParameters(max_tokens=8)))
    assert "".join(c.text for c in chunks_after).strip()


def test_cascade_stream_cancel_alone_does_not_reach_the_llm(triton_server: TritonServer) -> None:
    """Why the board exists (upstream server#6739): a gRPC stream cancel of the ensemble request
    does not reach its decoupled steps. The llm, which would record a stop within one token
    (~50 ms) if it saw a cancel, records none for a second; the board write afterwards does
    stop it, which shows it was still generating."""
    request = written(LONG_QUESTION, GenerationParameters(max_tokens=300, audio=False))
    with PipelineStream(triton_server.grpc_url, "cascade") as stream:
        stream.start(request)
        chunks = stream.chunks(timeout_s=30.0)
        for _ in range(3):
            assert not next(chunks).final
        stream.close()  # the request has not ended: this is a stream cancel
        time.sleep(1.0)
        with triton_server.board() as board:
            assert not board.stops(request.request_id), "a stream cancel reached a step"
        cancelled_at = cancel_on_board(stream._client, [request.request_id])
    stops = wait_for_stops(triton_server, request.request_id, {"llm"})
    assert "llm" in {s.stage for s in stops}, "the llm was no longer generating"
    assert all(s.t_ns >= cancelled_at for s in stops)


def test_cascade_text_conversation_with_audio_on_has_no_audio_segments(
    triton_server: TritonServer,
) -> None:
    # A text-only conversation that asks for speech: zero audio segments, TRANSCRIPTS [0].
    chunks = run(triton_server, written(QUESTION, GenerationParameters(max_tokens=24)))
    assert "paris" in "".join(c.text for c in chunks).lower()
    assert sum(c.audio.size for c in chunks) > OUTPUT_SAMPLE_RATE // 2
    assert chunks[-1].final


def test_cascade_text_rides_with_the_chunk_where_its_audio_ends(
    triton_server: TritonServer,
) -> None:
    """Rule 5, the pipeline side, through the whole ensemble: of a reply of two pieces or
    more, the first piece's text (its first clause, at most six words: the llm's
    SentenceCutter) arrives with a chunk whose cumulative end is at or after that piece's
    sound has ended (measured from the piece spoken alone), within the piece's own audio, word
    by word rather than all with its first chunk; and the text of the whole reply is exactly
    the llm's."""
    request = written("Tell me about dogs.", GenerationParameters(max_tokens=48))
    chunks = run(triton_server, request)
    text = "".join(c.text for c in chunks)
    assert text == llm_text(triton_server, request)
    cutter = SentenceCutter(first_clause=True)
    sentences = [*cutter.feed(text), cutter.flush()]
    assert len([s for s in sentences if s]) >= 2, f"want two sentences or more: {text!r}"
    first = sentences[0]
    with TtsStream(triton_server.grpc_url) as tts:
        alone = tts.speak(f"alone-{uuid.uuid4()}", first).audio
    audio = np.concatenate([c.audio for c in chunks])
    # flite is deterministic: the reply's audio starts with exactly the first piece's.
    np.testing.assert_array_equal(audio[: alone.shape[0]], alone)
    sound_end = loud_runs(alone)[-1][1]

    said, end, carried_at, text_ends = "", 0, None, []
    for chunk in chunks:
        end += chunk.audio.size
        if chunk.text:
            assert chunk.audio.size, f"text {chunk.text!r} came without audio"
            text_ends.append(end)
        said += chunk.text
        if carried_at is None and said.strip().startswith(first):
            carried_at = end
    assert carried_at is not None
    assert sound_end <= carried_at <= alone.shape[0], (sound_end, carried_at, alone.shape[0])
    first_audio = next(c for c in chunks if c.audio.size)
    assert not first_audio.text, "the first chunk carried text"
    assert sum(1 for e in text_ends if e <= alone.shape[0]) >= min(3, len(first.split()))


def test_cascade_answer_max_tokens_cut_ends_with_its_end_reason_after_its_audio(
    triton_server: TritonServer,
) -> None:
    # END_REASON travels llm -> tts (contract.py): 3 tokens cannot finish this answer, so the
    # llm says why it stopped, and tts passes that on after the audio of the words before it.
    chunks = run(triton_server, written(LONG_QUESTION, GenerationParameters(max_tokens=3)))
    reasons = [i for i, c in enumerate(chunks) if c.end_reason]
    assert [chunks[i].end_reason for i in reasons] == ["max_output_tokens"]
    assert max(i for i, c in enumerate(chunks) if c.audio.size) < reasons[0]
    whole = run(triton_server, written(QUESTION, GenerationParameters(max_tokens=64)))
    assert not any(c.end_reason for c in whole), "an answer the model ended has no end reason"

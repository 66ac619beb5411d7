"""The `qwen3_omni` ensemble (thinker -> talker -> code2wav) on a real tritonserver.

Tiny random weights (built into the cache on first load): the text is gibberish and the audio
near-silent, so these tests check the streaming contract, lengths, determinism, cancellation
and errors, not quality. Timings are printed (run with -s to see them).
"""

from __future__ import annotations

import queue
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import tritonclient.grpc as grpcclient

from orchestrator.triton import TritonServer
from orchestrator.triton.pipeline_client import (
    PipelineError,
    PipelineRequest,
    PipelineStream,
    pipeline_inputs,
)
from tests.turntaker_models.omni.images import data_url, encoded, image_url
from turntaker_models.contract import (
    OUTPUT_SAMPLE_RATE,
    AudioPart,
    Conversation,
    GenerationParameters,
    ImagePart,
    Message,
    TextPart,
)
from turntaker_models.omni.prompt_journal import read_entries

MODEL = "qwen3_omni"
# Code2Wav: n frames of 1920 samples (80 ms at 24 kHz) decode to n*1920 - 555 samples.
FRAME_SAMPLES = 1920
TRIM = 555
FIRST_CHUNK = 2 * FRAME_SAMPLES - TRIM
HELLO = Conversation([Message("user", [TextPart("Hello there")])])


@dataclass(frozen=True)
class Run:
    text: str
    chunks: list[npt.NDArray[np.float32]]
    first_text_s: float | None
    first_audio_s: float | None
    total_s: float

    @property
    def audio(self) -> npt.NDArray[np.float32]:
        return np.concatenate(self.chunks) if self.chunks else np.zeros(0, np.float32)


def run(server: TritonServer, request: PipelineRequest, timeout_s: float = 60.0) -> Run:
    with PipelineStream(server.grpc_url, MODEL) as stream:
        began = time.monotonic()
        stream.start(request)
        text = ""
        chunks = []
        first_text = first_audio = None
        for chunk in stream.chunks(timeout_s=timeout_s):
            if chunk.text:
                text += chunk.text
                first_text = first_text or chunk.received_at - began
            if chunk.audio.size:
                assert chunk.audio.dtype == np.float32 and chunk.audio.ndim == 1
                chunks.append(chunk.audio)
                first_audio = first_audio or chunk.received_at - began
        return Run(text, chunks, first_text, first_audio, time.monotonic() - began)


def tone(seconds: float = 1.0, hz: float = 220.0) -> npt.NDArray[np.float32]:
    t = np.arange(int(16000 * seconds)) / 16000
    return (0.1 * np.sin(2 * np.pi * hz * t)).astype(np.float32)


def whole_frames(samples: int) -> int:
    assert (samples + TRIM) % FRAME_SAMPLES == 0, f"{samples} samples is not n*1920 - 555"
    return (samples + TRIM) // FRAME_SAMPLES


def test_stages_ready(triton_server: TritonServer) -> None:
    states = {m["name"]: m.get("state") for m in triton_server.models()}
    for name in ("thinker", "talker", "code2wav", MODEL):
        assert states.get(name) == "READY", states


def test_streams_text_and_audio_deterministically(triton_server: TritonServer) -> None:
    params = GenerationParameters(max_tokens=8)
    first = run(triton_server, PipelineRequest("omni-a", HELLO, parameters=params))
    second = run(triton_server, PipelineRequest("omni-b", HELLO, parameters=params))
    print(
        f"\nqwen3_omni tiny: first text {first.first_text_s:.3f} s, first audio "
        f"{first.first_audio_s:.3f} s, done {first.total_s:.3f} s; second run "
        f"{second.first_text_s:.3f} / {second.first_audio_s:.3f} / {second.total_s:.3f} s; "
        f"{first.audio.shape[0] / OUTPUT_SAMPLE_RATE:.2f} s of audio"
    )
    assert first.text, "no text streamed"
    assert first.chunks, "no audio streamed"
    audio = first.audio
    assert np.isfinite(audio).all() and np.abs(audio).max() <= 1.0
    frames = whole_frames(audio.shape[0])
    # The talker's cap: 5 codec tokens per text token it heard (7: the 8th is the final) + 25.
    assert 1 <= frames <= 5 * 7 + 25
    if frames >= 2:
        assert first.chunks[0].shape[0] == FIRST_CHUNK
    # Greedy decoding: the same text and the same samples (to float rounding) every time.
    assert second.text == first.text
    assert second.audio.shape == audio.shape
    # Random tiny weights speak very quietly: compare relative to the signal's scale.
    scale = float(np.abs(audio).max())
    assert scale > 0
    assert float(np.abs(second.audio - audio).max()) <= 1e-5 * scale


def test_concurrent_streams_keep_their_own_state(triton_server: TritonServer) -> None:
    # Interleaved streams share each stage's model but not its per-REQUEST_ID state: each one
    # must give exactly what it gives alone.
    params = GenerationParameters(max_tokens=8)
    other = Conversation([Message("user", [TextPart("Read me the news.")])])
    alone = run(triton_server, PipelineRequest("omni-alone", HELLO, parameters=params))
    requests = [
        PipelineRequest(f"omni-together-{i}", HELLO if i % 2 == 0 else other, parameters=params)
        for i in range(4)
    ]
    with ThreadPoolExecutor(len(requests)) as pool:
        together = list(pool.map(lambda r: run(triton_server, r), requests))
    for result in together[0::2]:
        assert result.text == alone.text
        assert result.audio.shape == alone.audio.shape
        scale = float(np.abs(alone.audio).max())
        assert float(np.abs(result.audio - alone.audio).max()) <= 1e-5 * scale
    assert together[1].text == together[3].text
    assert together[1].audio.shape == together[3].audio.shape


def test_text_only_gives_the_same_text_and_no_audio(triton_server: TritonServer) -> None:
    spoken = run(triton_server, PipelineRequest("omni-spoken", HELLO, (), GenerationParameters(8)))
    quiet = run(
        triton_server,
        PipelineRequest("omni-quiet", HELLO, (), GenerationParameters(8, audio=False)),
    )
    assert quiet.text == spoken.text
    assert not quiet.chunks


def test_audio_input(triton_server: TritonServer) -> None:
    conversation = Conversation(
        [
            Message("system", [TextPart("Be brief.")]),
            Message("user", [TextPart("Hi")]),
            Message("assistant"),  # an unheard turn
            Message("user", [AudioPart(0), TextPart("what was that?")]),
        ]
    )
    result = run(
        triton_server,
        PipelineRequest("omni-audio-in", conversation, [tone()], GenerationParameters(6)),
    )
    assert result.text
    assert result.chunks
    assert np.isfinite(result.audio).all()
    whole_frames(result.audio.shape[0])


def _journal(server: TritonServer, request_id: str) -> dict[str, Any]:
    path = server.config.prompt_log
    assert path is not None, "the session's server keeps no prompt journal"
    matching = read_entries(path, request_id)
    assert len(matching) == 1, f"{len(matching)} journal lines for {request_id}"
    return matching[0]


def test_image_input_and_its_journal_line(triton_server: TritonServer) -> None:
    conversation = Conversation(
        [
            Message("system", [TextPart("Be brief.")]),
            Message("user", [ImagePart(image_url(64, 48, "PNG")), TextPart("What is it?")]),
            Message("assistant"),  # an unheard turn
            Message("user", [AudioPart(0), ImagePart(image_url(40, 90, "JPEG"))]),
        ]
    )
    params = GenerationParameters(6)
    first = run(triton_server, PipelineRequest("omni-image-a", conversation, [tone()], params))
    second = run(triton_server, PipelineRequest("omni-image-b", conversation, [tone()], params))
    assert first.text and first.chunks
    assert np.isfinite(first.audio).all()
    whole_frames(first.audio.shape[0])
    # Greedy: the vision tower's features and the positions are the same every time.
    assert second.text == first.text
    assert second.audio.shape == first.audio.shape
    entry = _journal(triton_server, "omni-image-a")
    assert [m["role"] for m in entry["messages"]] == ["system", "user", "assistant", "user"]
    assert entry["messages"][1]["parts"] == [
        {"type": "image", "tokens": 4, "grid": [1, 4, 4]},
        {"type": "text", "text": "What is it?"},
    ]
    assert entry["messages"][2] == {"role": "assistant", "parts": []}
    audio, image = entry["messages"][3]["parts"]
    assert audio["type"] == "audio" and audio["tokens"] == 13  # 1 s: 100 mel frames -> 13
    assert image == {"type": "image", "tokens": 3, "grid": [1, 6, 2]}
    assert entry["tokens"] > 4 + 13 + 3


PNG = encoded(64, 48, "PNG")


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("data:image/png;base64,@@@", "qwen3_omni: image 1: the data URL's base64 is invalid"),
        (data_url(b"not an image", "image/png"), "qwen3_omni: image 1 is not a PNG or JPEG"),
        (data_url(encoded(8, 8, "GIF"), "image/gif"), "qwen3_omni: image 1 is not a PNG or JPEG"),
        (data_url(PNG[:-40], "image/png"), "qwen3_omni: image 1 is truncated or corrupt"),
        (image_url(1000, 4), "qwen3_omni: image 1 is 1000x4"),
    ],
)
def test_bad_image_fails_the_request_and_the_next_one_works(
    triton_server: TritonServer, url: str, expected: str
) -> None:
    bad = Conversation([Message("user", [ImagePart(image_url()), TextPart("and"), ImagePart(url)])])
    with pytest.raises(PipelineError) as caught:
        run(triton_server, PipelineRequest("omni-bad-image", bad, (), GenerationParameters(4)))
    assert expected in str(caught.value)
    after = run(
        triton_server, PipelineRequest("omni-after-bad", HELLO, (), GenerationParameters(4))
    )
    assert after.text and after.chunks


def test_cancel_mid_stream(triton_server: TritonServer) -> None:
    board = triton_server.board()
    request_id = "omni-cancel"
    conversation = Conversation([Message("user", [TextPart("Read me the news.")])])
    params = GenerationParameters(max_tokens=400)
    try:
        with PipelineStream(triton_server.grpc_url, MODEL) as stream:
            stream.start(PipelineRequest(request_id, conversation, parameters=params))
            for chunk in stream.chunks(timeout_s=60):
                if chunk.audio.size:
                    break
            cancelled_at = stream.cancel()
            # The stream ends: the rest of what was queued, then the final flag or the cancel.
            try:
                for _ in stream.chunks(timeout_s=10):
                    pass
            except PipelineError:
                pass
        deadline = time.monotonic() + 5.0
        stages: dict[str, int] = {}
        while time.monotonic() < deadline:
            stages = {r.stage: r.t_ns for r in board.stops(request_id)}
            if {"thinker", "talker", "code2wav"} <= set(stages):
                break
            time.sleep(0.05)
        # 400 tokens take the thinker far longer than the first audio chunk: it was busy, and
        # so was the talker (it speaks each token as it comes).
        assert {"thinker", "talker"} <= set(stages), stages
        assert all(t >= cancelled_at for t in stages.values())
        worst_ms = (max(stages.values()) - cancelled_at) / 1e6
        print(
            "\nqwen3_omni cancel: stops "
            + ", ".join(f"{s} {(t - cancelled_at) / 1e6:.2f} ms" for s, t in stages.items())
            + f"; last stop {worst_ms:.2f} ms after the cancel"
        )
        assert worst_ms < 1000
        # Each stage stopped once.
        assert len(board.stops(request_id)) == len(stages)
    finally:
        board.close()
    # The next request on the same stages works.
    after = run(triton_server, PipelineRequest("omni-after", HELLO, (), GenerationParameters(4)))
    assert after.text and after.chunks


def _raw_stream(server: TritonServer, inputs: list[Any]) -> str:
    """The error message a raw request's stream ends with ("" when it ends normally)."""
    items: queue.Queue[tuple[Any, Any]] = queue.Queue()
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.start_stream(callback=lambda result=None, error=None: items.put((result, error)))
        client.async_stream_infer(MODEL, inputs, enable_empty_final_response=True)
        try:
            while True:
                result, error = items.get(timeout=30)
                if error is not None:
                    return str(error)
                final = result.get_response().parameters.get("triton_final_response")
                if final is not None and final.bool_param:
                    return ""
        finally:
            client.stop_stream()


@pytest.mark.parametrize(
    ("conversation", "expected"),
    [
        (b"{not json", "CONVERSATION is not JSON"),
        (b'{"messages": []}', "no messages"),
        (b'{"messages": [{"role": "user", "content": [{"type": "audio", "audio": 3}]}]}', "audio"),
    ],
)
def test_bad_conversation_is_an_error(
    triton_server: TritonServer, conversation: bytes, expected: str
) -> None:
    inputs = pipeline_inputs(PipelineRequest("omni-bad", HELLO))
    raw = grpcclient.InferInput("CONVERSATION", [1], "BYTES")
    raw.set_data_from_numpy(np.array([conversation], dtype=np.object_))
    inputs = [raw if i.name() == "CONVERSATION" else i for i in inputs]
    message = _raw_stream(triton_server, inputs)
    assert expected in message, message


def test_an_answer_max_tokens_cut_carries_its_end_reason_through_the_ensemble(
    triton_server: TritonServer,
) -> None:
    # END_REASON travels thinker -> talker -> code2wav (contract.py): the tiny random thinker
    # never ends on its own within 4 tokens, so max_tokens ends it, and the stream says so once.
    request = PipelineRequest("omni-cut", HELLO, parameters=GenerationParameters(max_tokens=4))
    with PipelineStream(triton_server.grpc_url, MODEL) as stream:
        stream.start(request)
        chunks = list(stream.chunks(timeout_s=60.0))
    assert [c.end_reason for c in chunks if c.end_reason] == ["max_output_tokens"]
    assert any(c.audio.size for c in chunks) and chunks[-1].final

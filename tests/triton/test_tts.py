"""The `tts` model on a real tritonserver: streamed 24 kHz speech, the text pass-through, order,
errors, cancels."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from orchestrator.triton import TritonServer
from tests.triton.tts_client import (
    TTS_RATE,
    Spoken,
    TtsStream,
    to_asr_rate,
    transcribe,
    word_error_rate,
)
from turntaker_models.contract import GenerationParameters
from turntaker_models.tts import CHUNK_SAMPLES, FIRST_CHUNK_SAMPLES

SENTENCE = "The library opens early on weekdays, and closes late on weekends."
# Many clauses: about forty seconds of speech, so a cancel surely lands mid-sentence.
LONG_SENTENCE = " ".join(
    ["The river winds slowly through the valley, past the old mill and the quiet farms,"] * 10
)
MAX_WER = 0.2


def _id() -> str:
    return f"tts-test-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def stream(triton_server: TritonServer) -> Iterator[TtsStream]:
    with TtsStream(triton_server.grpc_url) as s:
        yield s


@pytest.fixture
def client(triton_server: TritonServer) -> Iterator[grpcclient.InferenceServerClient]:
    with grpcclient.InferenceServerClient(triton_server.grpc_url) as c:
        yield c


def _assert_speech(spoken: Spoken, words: int) -> None:
    assert not spoken.errors, spoken.errors
    audio = spoken.audio
    assert audio.dtype == np.float32
    assert np.isfinite(audio).all()
    assert np.abs(audio).max() <= 1.0
    assert float(np.sqrt(np.mean(audio.astype(np.float64) ** 2))) > 0.01, "silent"
    seconds = audio.shape[0] / TTS_RATE
    # flite speaks about 2.5-3.5 words a second; leave room for pauses at clause seams.
    assert 0.15 * words <= seconds <= 0.8 * words, (seconds, words)


def test_tts_ready(triton_server: TritonServer) -> None:
    states = {m["name"]: m.get("state") for m in triton_server.models()}
    assert states.get("tts") == "READY", states


def test_tts_streams_small_then_bounded_24khz_chunks(stream: TtsStream) -> None:
    spoken = stream.speak(_id(), SENTENCE)
    _assert_speech(spoken, len(SENTENCE.split()))
    sizes = [c.shape[0] for c in spoken.chunks]
    assert len(sizes) > 3
    assert sizes[0] <= FIRST_CHUNK_SAMPLES, "first chunk small, for early playback"
    assert max(sizes) <= CHUNK_SAMPLES
    assert spoken.first_chunk_s is not None and spoken.first_chunk_s < 1.0


@pytest.mark.parametrize("voice", ["default", "kal", "awb", "rms"])
def test_tts_speech_transcribes_back_to_the_sentence(
    stream: TtsStream, client: grpcclient.InferenceServerClient, voice: str
) -> None:
    spoken = stream.speak(_id(), SENTENCE, GenerationParameters(voice=voice))
    _assert_speech(spoken, len(SENTENCE.split()))
    (text,) = transcribe(client, [to_asr_rate(spoken.audio)])
    assert word_error_rate(SENTENCE, text) <= MAX_WER, text


def test_tts_maps_openai_and_unknown_voices_to_flite_voices(stream: TtsStream) -> None:
    def audio(voice: str) -> np.ndarray:
        return stream.speak(_id(), "Hello there.", GenerationParameters(voice=voice)).audio

    default = audio("default")
    # flite is deterministic: the same voice gives the very same samples.
    np.testing.assert_array_equal(audio("no-such-voice"), default)
    np.testing.assert_array_equal(audio("alloy"), audio("slt"))
    assert audio("echo").shape != default.shape, "echo should be a male flite voice"


@pytest.mark.parametrize("sentence", ["", "   ", "..."])
def test_tts_empty_sentence_ends_stream_without_audio(stream: TtsStream, sentence: str) -> None:
    spoken = stream.speak(_id(), sentence)
    assert spoken.final_at is not None and not spoken.chunks and not spoken.errors


def test_tts_audio_false_sends_only_the_final_flag(stream: TtsStream) -> None:
    spoken = stream.speak(_id(), SENTENCE, GenerationParameters(audio=False))
    assert spoken.final_at is not None and not spoken.chunks and not spoken.errors


def test_tts_sentences_of_one_request_keep_their_order(stream: TtsStream) -> None:
    request_id = _id()
    sentences = [LONG_SENTENCE[:160], "Short one.", "And then a third sentence follows."]
    sent_at = time.monotonic()
    tags = [stream.send(request_id, s) for s in sentences]
    spoken = stream.collect(tags, sent_at)
    positions = [tags.index(tag) for tag in stream.order]
    assert positions == sorted(positions), "responses of later sentences overtook earlier ones"
    for tag, sentence in zip(tags, sentences, strict=True):
        _assert_speech(spoken[tag], len(sentence.split()))


@pytest.mark.parametrize(
    ("sentence", "parameters", "message"),
    [
        ("Hi.", b"{bad", "tts: PARAMETERS: JSON is malformed"),
        ("Hi.", b'{"voice": 3}', "tts: PARAMETERS"),
        ("word " * 1000, b"{}", "tts: SENTENCE has 5000 characters"),
    ],
)
def test_tts_bad_request_gives_one_final_error(
    stream: TtsStream, sentence: str, parameters: bytes, message: str
) -> None:
    spoken = stream.speak(_id(), sentence, parameters)
    assert spoken.final_at is not None and not spoken.chunks
    assert len(spoken.errors) == 1 and message in spoken.errors[0], spoken.errors
    # The worker lives on.
    _assert_speech(stream.speak(_id(), "Still here."), 2)


def test_tts_board_cancel_stops_mid_sentence(
    triton_server: TritonServer, stream: TtsStream
) -> None:
    request_id = _id()
    cancelled_at: list[float] = []
    with triton_server.board() as board:

        def cancel_once(tag: str, spoken: Spoken) -> None:
            if not cancelled_at:
                board.cancel(request_id)
                cancelled_at.append(time.monotonic())

        spoken = stream.speak(request_id, LONG_SENTENCE, on_chunk=cancel_once)
        assert spoken.final_at is not None and not spoken.errors
        words = len(LONG_SENTENCE.split())
        assert spoken.audio.shape[0] / TTS_RATE < 0.25 * 0.15 * words, "did not stop early"
        assert spoken.final_at - cancelled_at[0] < 0.5
        stops = board.stops(request_id)
        at = board.cancelled_at(request_id)
        assert [s.stage for s in stops] == ["tts"]
        assert at is not None and 0 <= stops[0].t_ns - at < 500_000_000
    # A cancelled id leaves no state behind that could hurt the next request.
    _assert_speech(stream.speak(_id(), SENTENCE), len(SENTENCE.split()))


class _Stop(Exception):
    pass


def test_tts_stream_cancel_stops_and_records(triton_server: TritonServer) -> None:
    request_id = _id()
    with TtsStream(triton_server.grpc_url) as s:

        def stop(tag: str, spoken: Spoken) -> None:
            s.cancel_stream()
            raise _Stop

        with pytest.raises(_Stop):
            s.speak(request_id, LONG_SENTENCE, on_chunk=stop)
    with triton_server.board() as board:
        deadline = time.monotonic() + 2.0
        while not board.stops(request_id) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert [r.stage for r in board.stops(request_id)] == ["tts"]
        assert not board.cancelled(request_id), "a stream cancel is not a board cancel"
    with TtsStream(triton_server.grpc_url) as s:
        _assert_speech(s.speak(_id(), "Still here."), 2)


def test_tts_passes_text_on_before_speaking(stream: TtsStream) -> None:
    """The `cascade` pass-through: TEXT_DELTA first (with an empty AUDIO_CHUNK), then audio."""
    spoken = stream.speak_with_text(_id(), " early on weekdays.", SENTENCE)
    assert spoken.texts == [" early on weekdays."] and not spoken.errors
    assert spoken.text_times[0] <= spoken.chunk_times[0]
    _assert_speech(spoken, len(SENTENCE.split()))


@pytest.mark.parametrize(("sentence", "audio"), [("", True), (SENTENCE, False)])
def test_tts_text_alone_passes_through_at_once(
    stream: TtsStream, sentence: str, audio: bool
) -> None:
    """No sentence (most llm steps), or audio=false: the text, final, and nothing else."""
    spoken = stream.speak_with_text(_id(), "Hello", sentence, GenerationParameters(audio=audio))
    assert spoken.texts == ["Hello"] and not spoken.chunks and not spoken.errors
    assert spoken.final_at is not None and spoken.final_at - spoken.sent_at < 0.5


def test_tts_text_does_not_wait_behind_queued_audio(stream: TtsStream) -> None:
    """Text of a later request of the same id overtakes the audio queued before it; text keeps
    its own order; audio keeps its order."""
    request_id = _id()
    sent_at = time.monotonic()
    tags = [
        stream.send(request_id, LONG_SENTENCE[:240], text="one "),
        stream.send(request_id, "", text="two "),
        stream.send(request_id, "Short one.", text="three "),
        stream.send(request_id, "", text="four"),
    ]
    spoken = stream.collect(tags, sent_at)
    texts = [(spoken[t].text_times[0], spoken[t].texts[0]) for t in tags]
    assert [text for _, text in sorted(texts)] == ["one ", "two ", "three ", "four"]
    first, third = spoken[tags[0]], spoken[tags[2]]
    # Every text is out long before the first sentence's audio is done.
    assert max(at for at, _ in texts) < first.chunk_times[-1]
    assert first.chunk_times[-1] <= third.chunk_times[0], "audio of a later sentence overtook"
    for tag in tags:
        assert not spoken[tag].errors and spoken[tag].final_at is not None


def test_tts_cancelled_id_passes_no_text(triton_server: TritonServer, stream: TtsStream) -> None:
    request_id = _id()
    with triton_server.board() as board:
        board.cancel(request_id)
    spoken = stream.speak_with_text(request_id, "late text", "")
    assert not spoken.texts and not spoken.chunks and spoken.final_at is not None

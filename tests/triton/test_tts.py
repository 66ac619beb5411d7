"""The `tts` model on a real tritonserver: streamed 24 kHz speech, text sent with the chunk where
its audio ends (docs/protocol.md rule 5), order, errors, cancels."""

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
    llm_steps,
    loud_runs,
    to_asr_rate,
    transcribe,
    word_error_rate,
)
from turntaker_models.cascade.speech import CHUNK_SAMPLES, FIRST_CHUNK_SAMPLES
from turntaker_models.contract import GenerationParameters

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
    # Both engines speak about 2.5-3.5 words a second; leave room for pauses at clause seams.
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


@pytest.mark.parametrize("voice", ["default", "slt", "kal", "awb", "rms"])
def test_tts_speech_transcribes_back_to_the_sentence(
    stream: TtsStream, client: grpcclient.InferenceServerClient, voice: str
) -> None:
    spoken = stream.speak(_id(), SENTENCE, GenerationParameters(voice=voice))
    _assert_speech(spoken, len(SENTENCE.split()))
    (text,) = transcribe(client, [to_asr_rate(spoken.audio)])
    assert word_error_rate(SENTENCE, text) <= MAX_WER, text


def test_tts_maps_openai_and_unknown_voices_to_the_default_voice(stream: TtsStream) -> None:
    def audio(voice: str) -> np.ndarray:
        return stream.speak(_id(), "Hello there.", GenerationParameters(voice=voice)).audio

    default = audio("default")
    # Both engines are deterministic: the same voice gives the very same samples.
    np.testing.assert_array_equal(audio("no-such-voice"), default)
    np.testing.assert_array_equal(audio("alloy"), audio("joe"))
    np.testing.assert_array_equal(audio("echo"), default)
    assert audio("slt").shape != default.shape, "slt is flite's voice, by its name"


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


def test_tts_text_that_is_not_the_sentences_words_rides_on_its_last_chunk(
    stream: TtsStream,
) -> None:
    """Rule 5, the fallback: text tts cannot line up with the sentence's words (a caller other
    than `cascade`) goes out whole with the sentence's last chunk, never before."""
    spoken = stream.speak_with_text(_id(), " early on weekdays.", SENTENCE)
    assert spoken.texts == [" early on weekdays."] and not spoken.errors
    assert [said for _, said, _ in stream.timeline if said] == [" early on weekdays."]
    last = stream.timeline[-1]
    assert last[1] == " early on weekdays." and last[2] > 0, "not on the last chunk"
    _assert_speech(spoken, len(SENTENCE.split()))


@pytest.mark.parametrize("sentence", ["", SENTENCE])
def test_tts_text_alone_passes_through_at_once_without_audio(
    stream: TtsStream, sentence: str
) -> None:
    """audio=false: the text, final, and nothing else, at once."""
    spoken = stream.speak_with_text(_id(), "Hello", sentence, GenerationParameters(audio=False))
    assert spoken.texts == ["Hello"] and not spoken.chunks and not spoken.errors
    assert spoken.final_at is not None and spoken.final_at - spoken.sent_at < 0.5


def test_tts_text_waits_for_its_sentences_audio(stream: TtsStream) -> None:
    """A delta without its sentence (most llm steps) ends its request at once, text held."""
    spoken = stream.speak_with_text(_id(), "Hello", "")
    assert not spoken.texts and not spoken.chunks and not spoken.errors
    assert spoken.final_at is not None and spoken.final_at - spoken.sent_at < 0.5


FIRST = "The library opens early on weekdays."
SECOND = "It closes late on weekends."


def test_tts_two_sentence_reply_text_rides_where_its_audio_ends(stream: TtsStream) -> None:
    """Rule 5, the pipeline side, on the real server: fed as `cascade` feeds it, the first
    sentence's text arrives with the chunk whose cumulative end is at or after that
    sentence's sound has ended (measured from its audio alone), within its own audio, and
    not with its first chunk; the second sentence's text never rides on the first's audio."""
    request_id = _id()
    reply = f"{FIRST} {SECOND}"
    sent_at = time.monotonic()
    tags = [stream.send(request_id, sentence, text=delta) for delta, sentence in llm_steps(reply)]
    spoken = stream.collect(tags, sent_at)
    assert not any(s.errors for s in spoken.values())
    timeline = stream.timeline
    assert "".join(said for _, said, _ in timeline) == reply, "text lost or reordered"
    ends = np.cumsum([samples for _, _, samples in timeline])
    audio = np.concatenate([c for tag in tags for c in spoken[tag].chunks])

    alone = stream.speak(_id(), FIRST).audio
    first_length = alone.shape[0]
    # flite is deterministic: the reply starts with exactly the first sentence's audio.
    np.testing.assert_array_equal(audio[:first_length], alone)
    first_sound_end = loud_runs(alone)[-1][1]

    said = ""
    carried_end = None
    text_chunks = []
    for (_, piece, samples), end in zip(timeline, ends, strict=True):
        if piece:
            assert samples > 0, f"text {piece!r} came without audio"
            text_chunks.append(int(end))
        said += piece
        if carried_end is None and said.strip().startswith(FIRST):
            carried_end = int(end)
    assert carried_end is not None
    assert first_sound_end <= carried_end <= first_length, (
        first_sound_end,
        carried_end,
        first_length,
    )
    assert timeline[0][1] == "", "the first 50 ms chunk carried text"
    starts = [int(end) - samples for (_, _, samples), end in zip(timeline, ends, strict=True)]
    second_first = starts.index(first_length)
    assert timeline[second_first][1] == "", "the second sentence's first chunk carried text"
    # Word by word: the first sentence's text came on several chunks.
    assert sum(1 for end in text_chunks if end <= first_length) >= 4
    # Nothing of the second sentence before the first sentence's audio was over.
    second_start = len(FIRST)
    so_far = ""
    for (_, piece, _), end in zip(timeline, ends, strict=True):
        so_far += piece
        if len(so_far.strip()) > second_start:
            assert end > first_length
            break


def test_tts_cancelled_id_passes_no_text(triton_server: TritonServer, stream: TtsStream) -> None:
    request_id = _id()
    with triton_server.board() as board:
        board.cancel(request_id)
    spoken = stream.speak_with_text(request_id, "late text", "")
    assert not spoken.texts and not spoken.chunks and spoken.final_at is not None

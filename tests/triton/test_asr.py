"""The `asr` model on a real tritonserver: accuracy on synthetic voices, segments, bad input."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from orchestrator.triton import TritonServer
from tests.triton.tts_client import (
    ASR_RATE,
    festival_speech,
    flite_speech,
    raw_asr_inputs,
    transcribe,
    word_error_rate,
)

MAX_WER = 0.2
# No digits: Whisper writes numbers as digits or words at whim, which says nothing about ASR.
FLITE_SENTENCE = "Please book a table for two near the window tomorrow evening."
FESTIVAL_SENTENCES = (
    "The weather is lovely today and the garden looks beautiful.",
    "Could you remind me to call my sister after lunch?",
    "Turn off the lights in the kitchen when you leave the house.",
)


@pytest.fixture
def client(triton_server: TritonServer) -> Iterator[grpcclient.InferenceServerClient]:
    with grpcclient.InferenceServerClient(triton_server.grpc_url) as c:
        yield c


def test_asr_ready(triton_server: TritonServer) -> None:
    states = {m["name"]: m.get("state") for m in triton_server.models()}
    assert states.get("asr") == "READY", states


@pytest.mark.parametrize("voice", ["slt", "kal", "awb", "rms"])
def test_asr_transcribes_flite_voices(
    client: grpcclient.InferenceServerClient, tmp_path: Path, voice: str
) -> None:
    (text,) = transcribe(client, [flite_speech(tmp_path, FLITE_SENTENCE, voice)])
    assert text == text.strip()
    assert word_error_rate(FLITE_SENTENCE, text) <= MAX_WER, text


def test_asr_transcribes_festival_sentences(
    client: grpcclient.InferenceServerClient, tmp_path: Path
) -> None:
    # Festival's voice is another synthesiser than flite's: not tuned to one engine's quirks.
    for sentence in FESTIVAL_SENTENCES:
        (text,) = transcribe(client, [festival_speech(tmp_path, sentence)])
        assert word_error_rate(sentence, text) <= MAX_WER, (sentence, text)


def test_asr_two_segments_give_two_transcripts_in_order(
    client: grpcclient.InferenceServerClient, tmp_path: Path
) -> None:
    first = "Good morning, what is on my calendar today?"
    second = "Send a message to the team about the meeting."
    texts = transcribe(
        client, [flite_speech(tmp_path, first, "awb"), flite_speech(tmp_path, second, "slt")]
    )
    assert len(texts) == 2
    assert word_error_rate(first, texts[0]) <= MAX_WER, texts
    assert word_error_rate(second, texts[1]) <= MAX_WER, texts


def test_asr_accepts_no_audio_for_text_only_conversations(
    client: grpcclient.InferenceServerClient,
) -> None:
    result = client.infer("asr", raw_asr_inputs(np.zeros(0, np.float32), np.zeros(0, np.int32)))
    text = result.as_numpy("TEXT")
    assert text is not None and text.shape == (0,)


def test_asr_gives_empty_text_for_empty_and_tiny_segments(
    client: grpcclient.InferenceServerClient, tmp_path: Path
) -> None:
    speech = flite_speech(tmp_path, "Hello there.", "slt")
    texts = transcribe(client, [np.zeros(0, np.float32), speech, np.zeros(40, np.float32)])
    assert texts[0] == "" and texts[2] == ""
    assert word_error_rate("hello there", texts[1]) <= MAX_WER, texts


def test_asr_white_noise_gives_no_words(client: grpcclient.InferenceServerClient) -> None:
    # Whisper's no-speech filter drops the noise segment: the transcript is really empty.
    rng = np.random.default_rng(7)
    for amplitude in (0.01, 0.1):
        noise = (amplitude * rng.standard_normal(3 * ASR_RATE)).astype(np.float32)
        assert transcribe(client, [noise]) == [""], amplitude


@pytest.mark.parametrize(
    ("samples", "lengths", "message"),
    [
        (100, [50], "AUDIO has 100 samples but AUDIO_LENGTHS add up to 50"),
        (100, [60, 60], "AUDIO has 100 samples but AUDIO_LENGTHS add up to 120"),
        (100, [150, -50], "AUDIO_LENGTHS[1] is -50; lengths must be >= 0"),
        (0, [10], "AUDIO has 0 samples but AUDIO_LENGTHS add up to 10"),
    ],
)
def test_asr_rejects_lengths_that_do_not_match_the_audio(
    client: grpcclient.InferenceServerClient, samples: int, lengths: list[int], message: str
) -> None:
    inputs = raw_asr_inputs(np.zeros(samples, np.float32), np.array(lengths, np.int32))
    with pytest.raises(InferenceServerException, match=re.escape("asr: " + message)):
        client.infer("asr", inputs)
    # The model is still there for the next caller.
    assert transcribe(client, [np.zeros(10, np.float32)]) == [""]


def _partial(client: grpcclient.InferenceServerClient, speech: np.ndarray) -> str:
    inputs = raw_asr_inputs(speech.astype(np.float32), np.array([speech.shape[0]], np.int32))
    flag = grpcclient.InferInput("PARTIAL", [1], "BOOL")
    flag.set_data_from_numpy(np.array([True]))
    result = client.infer("asr", [*inputs, flag])
    (text,) = result.as_numpy("TEXT").reshape(-1)
    return str(text.decode())


@pytest.mark.parametrize("voice", ["kal", "awb"])
def test_asr_partial_decode_hears_backchannels_and_a_sentence(
    client: grpcclient.InferenceServerClient, tmp_path: Path, voice: str
) -> None:
    # The overlap decision's fast path (PARTIAL: an 8 s window, greedy) must still hear what
    # was said: a backchannel as itself, a sentence within the usual error rate. Whisper may
    # repeat a short word on a short window ("Right Right"): the words, not their count. A
    # partial Whisper is unsure of abstains ("") rather than invent words.
    heard = 0
    for word in ("yeah", "okay", "right"):
        text = _partial(client, flite_speech(tmp_path, word, voice))
        words = set(re.findall(r"[a-z]+", text.lower()))
        assert words <= {word, "yes", "ok"}, f"a backchannel read as other words: {text!r}"
        heard += bool(words)
    assert heard >= 1, "the fast partial must hear backchannels, not only abstain"
    sentence = "Can you say that again?"
    text = _partial(client, flite_speech(tmp_path, sentence, voice))
    assert word_error_rate(sentence, text) <= MAX_WER, text

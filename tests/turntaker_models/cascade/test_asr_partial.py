"""Whisper tiny.en for `asr_partial` (turntaker_models/cascade/asr.py `partial_transcriber`),
in process: its English-only prompt, words heard in real human speech, hums, laughs and coughs
abstaining (""), clips longer than the window. Whisper-base's prompt stays as it was.

The recordings are Debian packages (asterisk's prompts, hedgewars' voices): a missing one is a
failure naming its package, never a skip (bench/human_speech.py)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import numpy as np
import pytest

from bench.human_speech import asterisk
from bench.partial_asr import HEDGEWARS, ogg
from tests.triton.tts_client import word_error_rate
from turntaker_models.cascade.asr import (
    PARTIAL_WINDOW_S,
    TINY_EN_PARTIAL_UNSURE,
    Transcriber,
    partial_transcriber,
)
from turntaker_models.cascade.whisper_assets import whisper_model_dir
from turntaker_models.contract import INPUT_SAMPLE_RATE
from turntaker_models.settings import ModelSettings

RATE = INPUT_SAMPLE_RATE


@pytest.fixture(scope="module")
def tiny() -> Iterator[Transcriber]:
    yield partial_transcriber()


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z']+", text.lower())


def _tokens(transcriber: Transcriber) -> list[str]:
    tokenizer = transcriber.model.hf_tokenizer
    return [tokenizer.id_to_token(i) for i in transcriber._partial_prompt]


def test_tiny_en_prompt_has_no_language_or_task(tiny: Transcriber) -> None:
    # An English-only model was trained without them (faster-whisper's Tokenizer leaves them
    # out for a `.en` model); with them it reads the task token as text.
    assert not tiny.model.model.is_multilingual
    assert _tokens(tiny) == ["<|startoftranscript|>", "<|notimestamps|>"]
    assert tiny.unsure == TINY_EN_PARTIAL_UNSURE and tiny.partial_only


def test_whisper_base_prompt_keeps_language_and_task() -> None:
    base = Transcriber(whisper_model_dir(ModelSettings.from_env().cache_dir))
    assert _tokens(base) == [
        "<|startoftranscript|>",
        "<|en|>",
        "<|transcribe|>",
        "<|notimestamps|>",
    ]


def test_tiny_en_partial_hears_a_human_voice(tiny: Transcriber) -> None:
    thanks = asterisk("auth-thankyou", RATE).audio
    assert _words(tiny.transcribe(thanks, partial=True)) == ["thank", "you"]
    # tiny.en mishears "and dial" ("in dialogue"): the sentence within the usual error rate.
    sentence = "please check the number and dial again"
    text = tiny.transcribe(asterisk("check-number-dial-again", RATE).audio, partial=True)
    assert _words(text)[:4] == ["please", "check", "the", "number"], text
    assert word_error_rate(sentence, text) <= 0.3, text


def test_tiny_en_partial_hears_the_first_word_of_a_sentence(tiny: Transcriber) -> None:
    # What an overlap's first partial hears of an interruption: its first ~half second.
    recording = asterisk("check-number-dial-again", RATE)
    loud = np.flatnonzero(np.abs(recording.audio) > 0.05)
    start = max(int(loud[0]) - RATE // 10, 0)
    text = tiny.transcribe(recording.audio[start : start + RATE * 6 // 10], partial=True)
    assert _words(text)[:1] == ["please"], text


@pytest.mark.parametrize("sound", ["Default_ru/PoisonCough", "Default_es/PoisonCough"])
def test_tiny_en_partial_abstains_on_a_cough(tiny: Transcriber, sound: str) -> None:
    # Whisper tiny.en reads these as fluent sentences ("I'm gonna go to the end of the video.")
    # but is unsure of them: the partial is "", no evidence of an interruption.
    path = HEDGEWARS / f"{sound}.ogg"
    assert path.is_file(), f"{path} is missing (apt-get install hedgewars-data)"
    audio = ogg(path)
    assert tiny.transcribe(audio, partial=True) == ""
    assert tiny.transcribe(audio[: RATE // 2], partial=True) == ""


def test_tiny_en_partial_takes_the_latest_window_of_a_long_clip(tiny: Transcriber) -> None:
    # Longer than the window: its latest PARTIAL_WINDOW_S, still the fast decode (no 30 s
    # pass), in room noise. A window that the audio fills to its end makes Whisper repeat
    # itself ("Thank you. Thank you, thank you."): the words, not their count.
    speech = asterisk("auth-thankyou", RATE).audio
    long = np.concatenate([np.zeros(9 * RATE, np.float32), speech])
    long += 0.002 * np.random.default_rng(3).standard_normal(long.shape[0]).astype(np.float32)
    assert long.shape[0] > PARTIAL_WINDOW_S * RATE
    texts = tiny.transcribe_all(long, np.array([long.shape[0]], np.int32), partial=True)
    assert [set(_words(t)) for t in texts] == [{"thank", "you"}], texts


def test_tiny_en_partial_of_silence_and_tiny_clips_is_empty(tiny: Transcriber) -> None:
    assert tiny.transcribe(np.zeros(RATE, np.float32), partial=True) == ""
    assert tiny.transcribe(np.zeros(10, np.float32), partial=True) == ""


def test_tiny_en_every_clip_is_a_partial_asked_or_not(
    tiny: Transcriber, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `asr_partial` has no PARTIAL input: a request without it must still take the fast decode
    # (the full path's beam search cost 455 ms a partial through Triton instead of 41).
    def full_path(*args: object, **kwargs: object) -> None:
        raise AssertionError("asr_partial took the full decode")

    monkeypatch.setattr(tiny, "_turn", full_path)
    monkeypatch.setattr(tiny.model, "transcribe", full_path)
    thanks = asterisk("auth-thankyou", RATE).audio
    assert _words(tiny.transcribe(thanks)) == ["thank", "you"]
    audio, lengths = np.concatenate([thanks, thanks]), np.array([len(thanks)] * 2)
    assert [_words(t) for t in tiny.transcribe_all(audio, lengths)] == [["thank", "you"]] * 2

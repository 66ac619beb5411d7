"""Speech for one clause (turntaker_models/cascade/speech.py): voices, clauses, trimming,
chunks, and where each word's audio ends, with Piper's joe and flite's voices. Piper's own part
(phonemes, durations) is test_piper.py's."""

from __future__ import annotations

import shutil
import subprocess
import sys
import wave
from pathlib import Path

import numpy as np
import pytest

from tests.triton.tts_client import loud_runs
from turntaker_models.cascade import flite, voices
from turntaker_models.cascade.speech import (
    DEFAULT_VOICE,
    chunks,
    pieces,
    speak,
    synthesize,
    trim_silence,
)
from turntaker_models.contract import OUTPUT_SAMPLE_RATE


def test_voice_names_choose_piper_or_flite_else_the_default() -> None:
    assert DEFAULT_VOICE == "joe"
    assert voices.resolve("awb") == "awb"
    assert voices.resolve(" RMS ") == "rms"
    assert voices.resolve("Joe") == "joe"
    for name in voices.OPENAI_VOICES:
        assert voices.resolve(name) == "joe"
        assert voices.resolve(name, default="slt") == "slt"
    assert voices.resolve("default") == DEFAULT_VOICE
    assert voices.resolve("--help") == DEFAULT_VOICE
    with pytest.raises(ValueError, match="tts voice must be one of"):
        voices.resolve("alloy", default="alloy")


@pytest.mark.parametrize("voice", voices.FLITE_VOICES)
def test_flite_voices_still_speak_by_name(voice: str) -> None:
    """Each flite voice by its name: its own speech (flite's rate), not the default's."""
    audio = synthesize("Hello there.", voice)
    assert audio.shape[0] > 0.3 * OUTPUT_SAMPLE_RATE and float(np.abs(audio).max()) > 0.05
    assert audio.shape != synthesize("Hello there.", "joe").shape
    # By name, case and spaces aside. Not compared sample for sample: flite's clustergen voices
    # (rms) vary their length from call to call (a CI run: 22560 against 22320 samples).
    assert voices.resolve(f" {voice.upper()} ") == voice


def test_sentence_is_cut_at_clauses_and_word_limit() -> None:
    assert pieces("Well, hello there; how are you?") == ["Well,", "hello there;", "how are you?"]
    assert pieces("one two three four five", max_words=2) == ["one two", "three four", "five"]
    assert pieces("  ... -- !  ") == []
    assert pieces("Caf\u00e9 cr\u00e8me \u2014 tr\u00e8s bien.") == ["Cafe creme tres bien."]


def test_chunks_start_small_and_cover_everything() -> None:
    audio = np.arange(10_000, dtype=np.float32)
    parts = list(chunks(audio, first=1000, size=4000))
    assert [p.shape[0] for p in parts] == [1000, 4000, 4000, 1000]
    np.testing.assert_array_equal(np.concatenate(parts), audio)


def test_trim_silence_keeps_the_sound_and_short_margins() -> None:
    rate = 16000
    tone = np.sin(np.arange(rate) / 5).astype(np.float32)
    padded = np.concatenate([np.zeros(rate, np.float32), tone, np.zeros(rate, np.float32)])
    trimmed = trim_silence(padded, rate, lead_s=0.02, trail_s=0.1)
    assert rate <= trimmed.shape[0] <= rate + int(0.13 * rate)
    assert trim_silence(np.zeros(rate, np.float32), rate).shape[0] == 0


@pytest.mark.parametrize("voice", ["joe", "slt"])
def test_synthesize_gives_24khz_float_speech_and_reads_dashes_as_text(voice: str) -> None:
    audio = synthesize("--help me", voice)
    assert audio.dtype == np.float32 and np.isfinite(audio).all()
    assert 0.3 < audio.shape[0] / OUTPUT_SAMPLE_RATE < 2.0
    assert np.abs(audio).max() > 0.05


@pytest.mark.parametrize("voice", flite.VOICES)
def test_library_speech_is_the_binarys_speech(tmp_path: Path, voice: str) -> None:
    """The in-process flite (for word times) says exactly what the flite binary says."""
    binary = shutil.which("flite")
    assert binary, "flite is not installed: `make test` installs it with apt (APT_PACKAGES)"
    text = "The library opens early on weekdays, and closes late."
    path = tmp_path / "speech.wav"
    subprocess.run([binary, "-voice", voice, "-t", text, "-o", str(path)], check=True)
    with wave.open(str(path)) as wav:
        expected = np.frombuffer(wav.readframes(wav.getnframes()), np.int16)
        rate = wav.getframerate()
    # In a fresh process, as in the `tts` stub: the voices draw noise from libc's rand(), which
    # any other thread of this test process (servers, clients of other tests) may also draw from.
    out = tmp_path / "library.npy"
    program = (
        "import sys, numpy as np; from turntaker_models.cascade import flite; "
        "s = flite.synth(sys.argv[1], sys.argv[2]); np.save(sys.argv[3], s.pcm); print(s.rate)"
    )
    child = subprocess.run(
        [sys.executable, "-c", program, text, voice, str(out)],
        check=True,
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[3],
    )
    assert int(child.stdout.strip()) == rate
    np.testing.assert_array_equal(np.load(out), expected)


def test_word_ends_follow_the_sound() -> None:
    """Word ends: non-decreasing, within the audio, and the clause's last word ends at or
    after the sound does (measured on the audio itself)."""
    for voice in voices.VOICES:
        speech = speak("Good morning to you and your family", voice)
        ends = speech.word_ends
        assert len(ends) == 7 and list(ends) == sorted(ends)
        assert 0 < ends[0] < ends[-1] <= speech.audio.shape[0]
        sound_end = loud_runs(speech.audio)[-1][1]
        assert ends[-1] >= sound_end - OUTPUT_SAMPLE_RATE // 100, (voice, ends[-1], sound_end)
        # Per word, not per clause: the first word ends well before the last.
        assert ends[0] < 0.5 * ends[-1]


@pytest.mark.parametrize("voice", ["joe", "slt"])
def test_a_token_the_voice_says_nothing_for_ends_with_the_word_before(voice: str) -> None:
    speech = speak("one - two", voice)
    assert speech.word_ends[0] == speech.word_ends[1] < speech.word_ends[2]

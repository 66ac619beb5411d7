"""The Piper voice `joe` (turntaker_models/cascade/piper.py): Piper's phonemes and ids, the
graph edited in memory, deterministic speech, and word ends from the model's own durations."""

# IPA is written in IPA letters (stress marks, length marks), which ruff takes for look-alikes.
# ruff: noqa: RUF001

from __future__ import annotations

import numpy as np

from tests.triton.tts_client import loud_runs
from turntaker_models.cascade import piper
from turntaker_models.cascade.speech import speak
from turntaker_models.contract import OUTPUT_SAMPLE_RATE


def _frame_rms(audio: np.ndarray, rate: int) -> np.ndarray:
    frame = rate // 100
    n = audio.shape[0] // frame
    return np.sqrt((audio[: n * frame].astype(np.float64).reshape(n, frame) ** 2).mean(axis=1))


def test_the_voice_is_the_wheels_and_its_graph_gives_durations() -> None:
    voice = piper.voice()
    assert voice.rate == 22050 and voice.espeak_voice == "en-us"
    outputs = [output.name for output in voice.session.get_outputs()]
    assert len(outputs) == 2, "the audio and the frames per phoneme id"
    inputs = {i.name for i in voice.session.get_inputs()}
    assert {"input", "input_lengths", "scales", *voice.noise_inputs} == inputs


def test_a_known_clause_gives_piper_phonemes_and_ids() -> None:
    voice = piper.voice()
    clause, words = voice.phonemize("Hello there,")
    # espeak-ng's IPA, the comma appended as Piper does (comma, space), NFD.
    assert clause == "həlˈoʊ ðˈɛɹ, "
    assert words == ["həlˈoʊ", "ðˈɛɹ"]
    spoken = piper.synth("Hello there,")
    assert spoken.phonemes == clause
    # A clause espeak cuts inside the text gets Piper's punctuation between its parts.
    assert voice.phonemize("Well, yes.")[0] == "wˈɛl, jˈɛs."
    # Numbers are read as words; a word said as two still belongs to one text word.
    _, words = voice.phonemize("It is 24 now.")
    assert words is not None and words[2] == "twˈɛnti fˈoːɹ"
    ids = [voice.ids[s] for s in "həl"]
    assert ids == [20, 59, 24], "symbols map through the voice's phoneme_id_map"


def test_speech_is_24khz_deterministic_and_not_silent() -> None:
    first = speak("The weather is lovely today.", "joe")
    again = speak("The weather is lovely today.", "joe")
    np.testing.assert_array_equal(first.audio, again.audio)
    audio = first.audio
    assert audio.dtype == np.float32 and np.isfinite(audio).all()
    assert 0.8 < audio.shape[0] / OUTPUT_SAMPLE_RATE < 3.0
    assert float(np.sqrt((audio**2).mean())) > 0.02
    ends = first.word_ends
    assert len(ends) == 5 and list(ends) == sorted(ends)
    assert 0 < ends[0] < ends[-1] <= audio.shape[0]


def test_word_ends_follow_the_models_frames() -> None:
    """The raw synthesis: word ends are whole frames (hop 256 at 22050 Hz), non-decreasing,
    inside the audio, and the last word ends where the clause's sound ends."""
    spoken = piper.synth("Good morning to you and your family.")
    assert all(end % 256 == 0 for end in spoken.word_ends)
    assert list(spoken.word_ends) == sorted(spoken.word_ends)
    assert spoken.word_ends[-1] <= spoken.audio.shape[0]
    rms = _frame_rms(spoken.audio, spoken.rate)
    loud = np.flatnonzero(rms > 0.02 * rms.max())
    sound_end = (int(loud[-1]) + 1) * (spoken.rate // 100)
    assert abs(spoken.word_ends[-1] - sound_end) < 0.1 * spoken.rate


def test_the_pause_at_a_comma_lies_after_the_word_before_it() -> None:
    """Energy per word, roughly: the quiet at the comma starts at or after "Well"'s end, and
    the next word's sound comes after that end too."""
    speech = speak("Well, I think that the answer is yes.", "joe")
    runs = loud_runs(speech.audio, min_gap_s=0.06)
    assert len(runs) >= 2, runs
    well_end = speech.word_ends[0]
    first_run_end, second_run_start = runs[0][1], runs[1][0]
    # Never early: "Well" ends at or after its sound; within the pause, not past the next word.
    assert well_end >= first_run_end - OUTPUT_SAMPLE_RATE // 100
    assert well_end <= second_run_start + OUTPUT_SAMPLE_RATE // 20
    assert speech.word_ends[-1] >= runs[-1][1] - OUTPUT_SAMPLE_RATE // 100


def test_words_espeak_joins_end_no_earlier_than_their_sound() -> None:
    """espeak reads "out of" as one word ("aʊɾəv"): both words still get ends, in order."""
    spoken = piper.synth("I want to go out of the house.")
    ends = spoken.word_ends
    assert len(ends) == 8 and list(ends) == sorted(ends)
    assert ends[4] < ends[-1] and ends[5] < ends[-1]


def test_a_clause_espeak_says_nothing_for_has_no_audio() -> None:
    spoken = piper.synth("---")
    assert spoken.audio.shape == (0,) and spoken.word_ends == (0,)

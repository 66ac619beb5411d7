"""session.update: GA and beta shapes normalize to one SessionPatch; apply() is pure."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from protocol_helpers import parse

from orchestrator.protocol import (
    PCM16,
    PCMA,
    PCMU,
    ServerVad,
    SessionConfig,
    SessionPatch,
    SessionUpdate,
    Transcription,
)
from orchestrator.protocol.session_config import AudioFormat


def _json(obj: object) -> Any:
    """What a client sees: the object through the wire encoder and back to plain JSON."""
    return msgspec.json.decode(msgspec.json.encode(obj))


def _patch(session: dict[str, Any]) -> SessionPatch:
    ev = parse({"type": "session.update", "event_id": "s", "session": session})
    assert isinstance(ev, SessionUpdate)
    assert ev.event_id == "s"
    return ev.session


GA = {
    "type": "realtime",
    "instructions": "Be brief.",
    "output_modalities": ["audio"],
    "audio": {
        "input": {
            "format": {"type": "audio/pcmu"},
            "turn_detection": {
                "type": "server_vad",
                "threshold": 0.7,
                "prefix_padding_ms": 200,
                "silence_duration_ms": 800,
                "create_response": False,
                "interrupt_response": False,
                "idle_timeout_ms": 6000,
            },
            "transcription": {"model": "whisper-1", "language": "en"},
        },
        "output": {"format": {"type": "audio/pcma"}, "voice": "marin"},
    },
    "max_output_tokens": 512,
}

BETA = {
    "instructions": "Be brief.",
    "modalities": ["text", "audio"],
    "input_audio_format": "g711_ulaw",
    "output_audio_format": "g711_alaw",
    "turn_detection": {
        "type": "server_vad",
        "threshold": 0.7,
        "prefix_padding_ms": 200,
        "silence_duration_ms": 800,
        "create_response": False,
        "interrupt_response": False,
        "idle_timeout_ms": 6000,
    },
    "input_audio_transcription": {"model": "whisper-1", "language": "en"},
    "voice": "marin",
    "max_response_output_tokens": 512,
}

EXPECTED = SessionPatch(
    instructions="Be brief.",
    output_modalities=("audio",),
    input_format=PCMU,
    output_format=PCMA,
    turn_detection=ServerVad(
        threshold=0.7,
        prefix_padding_ms=200,
        silence_duration_ms=800,
        create_response=False,
        interrupt_response=False,
        idle_timeout_ms=6000,
    ),
    transcription=Transcription(model="whisper-1", language="en"),
    voice="marin",
    max_output_tokens=512,
)


def test_ga_session_shape_normalizes() -> None:
    assert _patch(GA) == EXPECTED


def test_beta_session_shape_normalizes_to_the_same_patch() -> None:
    assert _patch(BETA) == EXPECTED


def test_empty_session_update_changes_nothing() -> None:
    patch = _patch({})
    assert patch == SessionPatch()
    assert patch.turn_detection is msgspec.UNSET
    assert patch.transcription is msgspec.UNSET
    cfg = SessionConfig()
    assert cfg.apply(patch) == cfg


@pytest.mark.parametrize(
    "session",
    [
        {"audio": {"input": {"turn_detection": None}}},
        {"turn_detection": None},
    ],
)
def test_null_turn_detection_is_manual_mode_not_absent(session: dict[str, Any]) -> None:
    patch = _patch(session)
    assert patch.turn_detection is None
    assert SessionConfig().apply(patch).turn_detection is None


def test_absent_turn_detection_keeps_the_current_one() -> None:
    cfg = SessionConfig().apply(_patch({"instructions": "x"}))
    assert cfg.turn_detection == ServerVad()


def test_null_transcription_turns_transcripts_off() -> None:
    on = SessionConfig().apply(_patch({"input_audio_transcription": {"model": "whisper-1"}}))
    assert on.transcription == Transcription(model="whisper-1")
    off = on.apply(_patch({"audio": {"input": {"transcription": None}}}))
    assert off.transcription is None


@pytest.mark.parametrize(
    ("wire", "fmt"),
    [
        ("pcm16", PCM16),
        ("g711_ulaw", PCMU),
        ("g711_alaw", PCMA),
        ({"type": "audio/pcm"}, PCM16),
        ({"type": "audio/pcm", "rate": 24000}, PCM16),
        ({"type": "audio/pcmu"}, PCMU),
        ({"type": "audio/pcma", "rate": 8000}, PCMA),
    ],
)
def test_format_spellings_normalize_to_audio_format(wire: Any, fmt: AudioFormat) -> None:
    assert _patch({"audio": {"input": {"format": wire}}}).input_format == fmt
    assert _patch({"output_audio_format": wire}).output_format == fmt


def test_normalized_formats_have_the_contract_rates() -> None:
    assert (PCM16.type, PCM16.rate, PCM16.bytes_per_ms) == ("audio/pcm", 24000, 48)
    assert (PCMU.type, PCMU.rate, PCMU.bytes_per_ms) == ("audio/pcmu", 8000, 8)
    assert (PCMA.type, PCMA.rate, PCMA.bytes_per_ms) == ("audio/pcma", 8000, 8)


@pytest.mark.parametrize(
    ("modalities", "expected"),
    [(["audio"], ("audio",)), (["text"], ("text",)), (["text", "audio"], ("audio",))],
)
def test_output_modalities_normalize(modalities: list[str], expected: tuple[str, ...]) -> None:
    assert _patch({"output_modalities": modalities}).output_modalities == expected
    assert _patch({"modalities": modalities}).output_modalities == expected


def test_turn_detection_missing_knobs_take_openai_defaults() -> None:
    patch = _patch({"audio": {"input": {"turn_detection": {"type": "server_vad"}}}})
    assert patch.turn_detection == ServerVad(
        type="server_vad",
        threshold=0.5,
        prefix_padding_ms=300,
        silence_duration_ms=500,
        create_response=True,
        interrupt_response=True,
        idle_timeout_ms=None,
    )


def test_ga_spelling_wins_over_beta_when_both_are_sent() -> None:
    patch = _patch(
        {
            "output_modalities": ["text"],
            "modalities": ["audio"],
            "audio": {"output": {"voice": "cedar"}},
            "voice": "alloy",
        }
    )
    assert (patch.output_modalities, patch.voice) == (("text",), "cedar")


def test_session_config_defaults() -> None:
    cfg = SessionConfig()
    assert cfg.turn_detection == ServerVad()
    assert (cfg.input_format, cfg.output_format) == (PCM16, PCM16)
    assert cfg.output_modalities == ("audio",)
    assert (cfg.instructions, cfg.max_output_tokens, cfg.transcription) == ("", "inf", None)


def test_apply_is_pure_and_only_touches_given_fields() -> None:
    cfg = SessionConfig()
    new = cfg.apply(SessionPatch(instructions="x", output_format=PCMU))
    assert cfg == SessionConfig()
    assert new == SessionConfig(instructions="x", output_format=PCMU)
    assert new.apply(SessionPatch(voice="cedar")).instructions == "x"


def test_session_object_renders_ga_shape() -> None:
    cfg = SessionConfig().apply(EXPECTED)
    obj = _json(cfg.to_session_object(session_id="sess_1", model="omni"))
    assert obj == {
        "type": "realtime",
        "object": "realtime.session",
        "id": "sess_1",
        "model": "omni",
        "output_modalities": ["audio"],
        "instructions": "Be brief.",
        "tools": [],
        "tool_choice": "auto",
        "max_output_tokens": 512,
        "tracing": None,
        "prompt": None,
        "include": None,
        "expires_at": 0,
        "audio": {
            "input": {
                "format": {"type": "audio/pcmu", "rate": 8000},
                "transcription": {"model": "whisper-1", "language": "en", "prompt": None},
                "noise_reduction": None,
                "turn_detection": {
                    "type": "server_vad",
                    "threshold": 0.7,
                    "prefix_padding_ms": 200,
                    "silence_duration_ms": 800,
                    "create_response": False,
                    "interrupt_response": False,
                    "idle_timeout_ms": 6000,
                },
            },
            "output": {
                "format": {"type": "audio/pcma", "rate": 8000},
                "voice": "marin",
                "speed": 1.0,
            },
        },
    }


def test_manual_mode_renders_turn_detection_null() -> None:
    cfg = SessionConfig(turn_detection=None)
    obj = _json(cfg.to_session_object(session_id="s", model="m"))
    assert obj["audio"]["input"]["turn_detection"] is None

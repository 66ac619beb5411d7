"""session.update: GA and beta shapes normalize to one SessionPatch; apply() is pure."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from orchestrator.protocol.client import SessionUpdate
from orchestrator.protocol.codec import ServerEventEncoder
from orchestrator.protocol.server import SessionUpdated
from orchestrator.protocol.session_config import (
    PCM16,
    PCMA,
    PCMU,
    AudioFormat,
    Eagerness,
    NoiseReduction,
    SemanticVad,
    ServerVad,
    SessionConfig,
    SessionPatch,
    Transcription,
    TurnDetection,
)
from tests.orchestrator.protocol.protocol_helpers import parse, reject


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
        "truncation": "auto",
        "expires_at": 0,
        "audio": {
            "input": {
                "format": {"type": "audio/pcmu"},  # OpenAI's: G.711 has no rate
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
                "format": {"type": "audio/pcma"},
                "voice": "marin",
                "speed": 1.0,
            },
        },
    }


def test_manual_mode_renders_turn_detection_null() -> None:
    cfg = SessionConfig(turn_detection=None)
    obj = _json(cfg.to_session_object(session_id="s", model="m"))
    assert obj["audio"]["input"]["turn_detection"] is None


# semantic_vad and preemptive responses (v2, docs/protocol.md "Semantic end of turn and
# preemptive responses") ---------------------------------------------------------------


def _detection(turn_detection: dict[str, Any], *, beta: bool = False) -> TurnDetection | None:
    session = (
        {"turn_detection": turn_detection}
        if beta
        else {"audio": {"input": {"turn_detection": turn_detection}}}
    )
    patch = _patch(session)
    assert patch.turn_detection is not msgspec.UNSET
    return patch.turn_detection


def _updated_turn_detection(turn_detection: dict[str, Any]) -> Any:
    """The turn_detection of the `session.updated` a client gets after sending it."""
    cfg = SessionConfig().apply(_patch({"audio": {"input": {"turn_detection": turn_detection}}}))
    event = SessionUpdated(session=cfg.to_session_object(session_id="s", model="m"))
    wire = msgspec.json.decode(ServerEventEncoder().encode(event))
    assert wire["type"] == "session.updated"
    return wire["session"]["audio"]["input"]["turn_detection"]


@pytest.mark.parametrize("eagerness", ["low", "medium", "high", "auto"])
@pytest.mark.parametrize("beta", [False, True])
def test_semantic_vad_parses_each_eagerness(eagerness: Eagerness, beta: bool) -> None:
    """semantic_vad (OpenAI's field): each eagerness parses, GA and beta spellings alike."""
    td = _detection({"type": "semantic_vad", "eagerness": eagerness}, beta=beta)
    assert td == SemanticVad(eagerness=eagerness)


def test_semantic_vad_defaults_are_openai_s() -> None:
    """semantic_vad without knobs: eagerness auto, create_response and interrupt_response
    on, no preemption, immediate interruption."""
    td = _detection({"type": "semantic_vad"})
    assert td == SemanticVad()
    assert isinstance(td, SemanticVad)
    assert (td.eagerness, td.create_response, td.interrupt_response) == ("auto", True, True)
    assert td.preemptive_response is msgspec.UNSET and not td.preemptive
    assert td.policy.mode == "immediate"


def test_semantic_vad_takes_create_interrupt_and_preemptive() -> None:
    td = _detection(
        {
            "type": "semantic_vad",
            "eagerness": "high",
            "create_response": False,
            "interrupt_response": False,
            "preemptive_response": True,
        }
    )
    assert td == SemanticVad(
        eagerness="high", create_response=False, interrupt_response=False, preemptive_response=True
    )
    assert isinstance(td, SemanticVad) and td.preemptive


@pytest.mark.parametrize("eagerness", ["low", "medium", "high", "auto"])
def test_semantic_vad_renders_exactly_openai_s_shape(eagerness: str) -> None:
    """session.updated shows OpenAI's semantic_vad object: type, eagerness, create_response,
    interrupt_response; no threshold or silence keys; no preemptive_response unless sent."""
    rendered = _updated_turn_detection({"type": "semantic_vad", "eagerness": eagerness})
    assert rendered == {
        "type": "semantic_vad",
        "eagerness": eagerness,
        "create_response": True,
        "interrupt_response": True,
    }
    assert next(iter(rendered)) == "type"


def test_semantic_vad_default_eagerness_renders_auto() -> None:
    rendered = _updated_turn_detection({"type": "semantic_vad", "create_response": False})
    assert rendered == {
        "type": "semantic_vad",
        "eagerness": "auto",
        "create_response": False,
        "interrupt_response": True,
    }


@pytest.mark.parametrize("preemptive", [True, False])
def test_semantic_vad_renders_preemptive_response_only_when_sent(preemptive: bool) -> None:
    """preemptive_response (v2 extension) is rendered when the client sent it, false too."""
    rendered = _updated_turn_detection(
        {"type": "semantic_vad", "eagerness": "low", "preemptive_response": preemptive}
    )
    assert rendered == {
        "type": "semantic_vad",
        "eagerness": "low",
        "create_response": True,
        "interrupt_response": True,
        "preemptive_response": preemptive,
    }


@pytest.mark.parametrize("preemptive", [True, False])
def test_server_vad_with_preemptive_response_renders_it(preemptive: bool) -> None:
    td = _detection({"type": "server_vad", "preemptive_response": preemptive})
    assert isinstance(td, ServerVad) and td.preemptive is preemptive
    rendered = _updated_turn_detection({"type": "server_vad", "preemptive_response": preemptive})
    assert rendered == {
        "type": "server_vad",
        "threshold": 0.5,
        "prefix_padding_ms": 300,
        "silence_duration_ms": 500,
        "create_response": True,
        "interrupt_response": True,
        "idle_timeout_ms": None,
        "preemptive_response": preemptive,
    }


def test_v1_server_vad_renders_exactly_as_before() -> None:
    """A v1 client (no preemptive_response, no interruption) sees v1's server_vad object:
    no preemptive_response key, and preemption off."""
    v1 = {
        "type": "server_vad",
        "threshold": 0.7,
        "prefix_padding_ms": 200,
        "silence_duration_ms": 800,
        "create_response": False,
        "interrupt_response": False,
        "idle_timeout_ms": 6000,
    }
    td = _detection(v1)
    assert isinstance(td, ServerVad) and not td.preemptive
    assert _updated_turn_detection(v1) == v1
    default = _json(SessionConfig().to_session_object(session_id="s", model="m"))
    assert default["audio"]["input"]["turn_detection"] == {
        "type": "server_vad",
        "threshold": 0.5,
        "prefix_padding_ms": 300,
        "silence_duration_ms": 500,
        "create_response": True,
        "interrupt_response": True,
        "idle_timeout_ms": None,
    }


def test_semantic_vad_replaces_server_vad_and_back() -> None:
    """A turn_detection object replaces the previous one, type included."""
    cfg = SessionConfig().apply(_patch({"turn_detection": {"type": "semantic_vad"}}))
    assert cfg.turn_detection == SemanticVad()
    cfg = cfg.apply(_patch({"turn_detection": {"type": "server_vad"}}))
    assert cfg.turn_detection == ServerVad()


SEMANTIC_PARAM = "session.audio.input.turn_detection"


@pytest.mark.parametrize(
    ("turn_detection", "param"),
    [
        ({"type": "semantic_vad", "eagerness": "eager"}, f"{SEMANTIC_PARAM}.eagerness"),
        ({"type": "semantic_vad", "threshold": 0.5}, f"{SEMANTIC_PARAM}.threshold"),
        (
            {"type": "semantic_vad", "silence_duration_ms": 500},
            f"{SEMANTIC_PARAM}.silence_duration_ms",
        ),
        ({"type": "server_vad", "eagerness": "low"}, f"{SEMANTIC_PARAM}.eagerness"),
    ],
)
def test_semantic_vad_bad_fields_are_invalid_values(
    turn_detection: dict[str, Any], param: str
) -> None:
    """An unknown eagerness, a silence knob on semantic_vad (it would be silently ignored) or
    an eagerness on server_vad is an invalid_value naming the field."""
    err = reject(
        {
            "type": "session.update",
            "session": {"audio": {"input": {"turn_detection": turn_detection}}},
        }
    )
    assert (err.code, err.param) == ("invalid_value", param)


def test_truncation_auto_and_retention_ratio_are_taken_disabled_is_refused() -> None:
    from orchestrator.protocol.session_config import RetentionRatio

    assert _patch({"truncation": "auto"}).truncation == "auto"
    ratio = {"type": "retention_ratio", "retention_ratio": 0.8}
    assert _patch({"truncation": ratio}).truncation == RetentionRatio(retention_ratio=0.8)
    cases = [
        ("disabled", "session.truncation"),
        ("sometimes", "session.truncation"),
        ({"type": "retention_ratio", "retention_ratio": 1.5}, "session.truncation.retention_ratio"),
        ({"type": "retention_ratio"}, "session.truncation.retention_ratio"),
        ({"type": "other"}, "session.truncation.type"),
        (
            {
                "type": "retention_ratio",
                "retention_ratio": 0.5,
                "token_limits": {"post_instructions": 9},
            },
            "session.truncation.token_limits",
        ),
    ]
    for value, param in cases:
        err = reject({"type": "session.update", "session": {"truncation": value}})
        assert err.param == param, (value, err)
    created = SessionConfig().apply(_patch({"truncation": ratio}))
    shown = _json(created.to_session_object(session_id="s", model="m"))
    assert shown["truncation"] == {"type": "retention_ratio", "retention_ratio": 0.8}


@pytest.mark.parametrize("kind", ["near_field", "far_field"])
def test_noise_reduction_is_openai_s_and_null_turns_it_off(kind: str) -> None:
    on = _patch({"audio": {"input": {"noise_reduction": {"type": kind}}}})
    assert on.noise_reduction == NoiseReduction(type=kind)  # type: ignore[arg-type]
    config = SessionConfig().apply(on)
    shown = _json(config.to_session_object(session_id="s", model="m"))
    assert shown["audio"]["input"]["noise_reduction"] == {"type": kind}
    off = _patch({"audio": {"input": {"noise_reduction": None}}})
    assert config.apply(off).noise_reduction is None
    assert config.apply(_patch({})).noise_reduction == NoiseReduction(type=kind)  # type: ignore[arg-type]


def test_echo_cancellation_is_an_extension_shown_only_while_on() -> None:
    config = SessionConfig()
    shown = _json(config.to_session_object(session_id="s", model="m"))
    assert "echo_cancellation" not in shown["audio"]["input"], "off: OpenAI's object exactly"
    on = config.apply(_patch({"audio": {"input": {"echo_cancellation": {"type": "server"}}}}))
    shown = _json(on.to_session_object(session_id="s", model="m"))
    assert shown["audio"]["input"]["echo_cancellation"] == {"type": "server"}
    off = _patch({"audio": {"input": {"echo_cancellation": None}}})
    assert on.apply(off).echo_cancellation is None


@pytest.mark.parametrize(
    ("field", "value"),
    [("noise_reduction", {"type": "studio"}), ("echo_cancellation", {"type": "client"})],
)
def test_an_unknown_processing_type_is_a_clear_error(field: str, value: dict[str, str]) -> None:
    err = reject({"type": "session.update", "session": {"audio": {"input": {field: value}}}})
    assert err.code == "invalid_value"
    assert err.param == f"session.audio.input.{field}.type"

"""`turn_detection.interruption` (v2, docs/protocol.md "Interruption policy"): parsed once at
the edge, typed, validated; a v1 client that never sends it gets immediate mode and sees v1's
session object."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from orchestrator.protocol.client import SessionUpdate
from orchestrator.protocol.session_config import (
    DEFAULT_BACKCHANNELS,
    DEFAULT_INTERRUPT_WORDS,
    Interruption,
    ServerVad,
    SessionConfig,
    normalize_backchannel,
)
from tests.orchestrator.protocol.protocol_helpers import parse, reject


def _vad(interruption: object, *, beta: bool = False) -> ServerVad:
    detection = {"type": "server_vad", "interruption": interruption}
    session = (
        {"turn_detection": detection}
        if beta
        else {"audio": {"input": {"turn_detection": detection}}}
    )
    event = parse({"type": "session.update", "session": session})
    assert isinstance(event, SessionUpdate), event
    vad = event.session.turn_detection
    assert isinstance(vad, ServerVad)
    return vad


def test_v1_client_without_interruption_gets_immediate_mode_and_v1_rendering() -> None:
    vad = SessionConfig().turn_detection
    assert vad is not None and vad.policy == Interruption()
    assert vad.policy.mode == "immediate"
    rendered: Any = msgspec.json.decode(msgspec.json.encode(vad))
    assert "interruption" not in rendered


@pytest.mark.parametrize("beta", [False, True])
def test_pause_mode_with_defaults(beta: bool) -> None:
    vad = _vad({"mode": "pause"}, beta=beta)
    assert vad.policy == Interruption(
        mode="pause", min_speech_ms=400, resume_after_ms=1500, backchannels=DEFAULT_BACKCHANNELS
    )


def test_knobs_and_backchannels_are_normalised() -> None:
    vad = _vad(
        {
            "mode": "pause",
            "min_speech_ms": 300,
            "resume_after_ms": 900,
            "backchannels": ["Uh-huh.", "I SEE!", "uh-huh", "  got   it "],
        }
    )
    assert (vad.policy.min_speech_ms, vad.policy.resume_after_ms) == (300, 900)
    # Duplicates after normalisation are kept once, in order.
    assert vad.policy.backchannels == ("uh-huh", "i see", "got it")
    rendered: Any = msgspec.json.decode(msgspec.json.encode(vad))
    assert rendered["interruption"]["mode"] == "pause"


def test_interrupt_words_are_normalised_and_rendered() -> None:
    vad = _vad({"mode": "pause", "interrupt_words": ["Wait!", "HOLD  on", "wait"]})
    assert vad.policy.interrupt_words == ("wait", "hold on")
    assert vad.policy.backchannels == DEFAULT_BACKCHANNELS
    rendered: Any = msgspec.json.decode(msgspec.json.encode(vad))
    assert rendered["interruption"]["interrupt_words"] == ["wait", "hold on"]
    assert _vad({"mode": "pause"}).policy.interrupt_words == DEFAULT_INTERRUPT_WORDS


def test_normalize_backchannel_drops_case_and_punctuation() -> None:
    assert normalize_backchannel("Mm-hmm.") == "mm-hmm"
    assert normalize_backchannel("Okay, okay!") == "okay okay"
    assert normalize_backchannel(" ... ") == ""


PARAM = "session.audio.input.turn_detection.interruption"


@pytest.mark.parametrize(
    ("interruption", "param"),
    [
        ({"mode": "sometimes"}, f"{PARAM}.mode"),
        ({"mode": 3}, f"{PARAM}.mode"),
        ({"min_speech_ms": -1}, f"{PARAM}.min_speech_ms"),
        ({"min_speech_ms": 10_001}, f"{PARAM}.min_speech_ms"),
        ({"resume_after_ms": "soon"}, f"{PARAM}.resume_after_ms"),
        ({"resume_after_ms": 30_001}, f"{PARAM}.resume_after_ms"),
        ({"backchannels": "yeah"}, f"{PARAM}.backchannels"),
        ({"backchannels": ["yeah", "!!"]}, f"{PARAM}.backchannels"),
        ({"backchannels": ["x" * 65]}, f"{PARAM}.backchannels[0]"),
        ({"interrupt_words": "wait"}, f"{PARAM}.interrupt_words"),
        ({"interrupt_words": ["wait", "?!"]}, f"{PARAM}.interrupt_words"),
        ({"interrupt_words": ["stop"] * 257}, f"{PARAM}.interrupt_words"),
        ({"interrupt_words": ["x" * 65]}, f"{PARAM}.interrupt_words[0]"),
        ("pause", PARAM),
    ],
)
def test_rule7_bad_interruption_values_are_invalid_value(interruption: object, param: str) -> None:
    err = reject(
        {
            "type": "session.update",
            "event_id": "evt_i",
            "session": {"audio": {"input": {"turn_detection": {"interruption": interruption}}}},
        }
    )
    assert (err.code, err.param, err.event_id, err.type) == (
        "invalid_value",
        param,
        "evt_i",
        "invalid_request_error",
    )


def test_interruption_null_means_immediate() -> None:
    assert _vad(None).policy == Interruption()

"""Rule 7: bad input becomes a precise `ProtocolError` carrying the client's event_id."""

from __future__ import annotations

import pytest

from orchestrator.protocol.client import InputAudioBufferAppend
from orchestrator.protocol.codec import DEFAULT_MAX_BYTES, decode_client_event
from tests.orchestrator.protocol.protocol_helpers import PCM_20MS, b64, reject, wire


def _item(part: dict[str, object], role: str = "user") -> dict[str, object]:
    return {
        "type": "conversation.item.create",
        "event_id": "evt_item",
        "item": {"type": "message", "role": role, "content": [part]},
    }


def test_rule7_errors_are_invalid_request_errors() -> None:
    err = reject({"type": "nope", "event_id": "e"})
    assert err.type == "invalid_request_error"


def test_rule7_oversize_message_is_message_too_large_before_parsing() -> None:
    audio = b64(bytes(2000))
    raw = wire({"event_id": "big_1", "type": "input_audio_buffer.append", "audio": audio})
    err = reject(raw, max_bytes=1000)
    assert (err.code, err.event_id) == ("message_too_large", "big_1")
    # Over the limit is an error even when the JSON is garbage: size comes first.
    assert reject("{" * 2000, max_bytes=1000).code == "message_too_large"


def test_rule7_default_limit_is_15_mib() -> None:
    assert DEFAULT_MAX_BYTES == 15 * 1024 * 1024
    head = '{"event_id":"huge","type":"input_audio_buffer.append","audio":"'
    raw = head + "A" * (DEFAULT_MAX_BYTES - len(head)) + '"}'
    err = reject(raw)
    assert (err.code, err.event_id) == ("message_too_large", "huge")


def test_rule7_limit_counts_utf8_bytes_not_characters() -> None:
    raw = '{"type": "session.update", "session": {"instructions": "' + "é" * 600 + '"}}'
    assert len(raw) < 1000 < len(raw.encode())
    assert reject(raw, max_bytes=1000).code == "message_too_large"


def test_rule7_malformed_json_is_invalid_json_with_event_id_recovered() -> None:
    err = reject('{"event_id": "evt_7", "type": "input_audio_buffer.append", "audio": "AA')
    assert (err.code, err.event_id) == ("invalid_json", "evt_7")
    assert reject(b"\xff\xfe not json").code == "invalid_json"
    assert reject("").code == "invalid_json"


def test_rule7_malformed_json_after_a_type_error_is_still_invalid_json() -> None:
    # The typed pass stops at `audio` (a type error) before it reaches the NaN.
    err = reject('{"event_id": "evt_8", "type": "input_audio_buffer.append", "audio": 5, "x": NaN}')
    assert (err.code, err.event_id) == ("invalid_json", "evt_8")


def test_rule7_unknown_event_type_is_openais_invalid_value_on_type() -> None:
    err = reject({"type": "response.audio.delta", "event_id": "evt_u"})
    assert (err.code, err.event_id, err.param) == ("invalid_value", "evt_u", "type")
    assert err.message.startswith("Invalid value: 'response.audio.delta'. Supported values are: ")
    assert "'session.update'" in err.message and err.message.endswith("'.")
    number = reject({"type": 5, "event_id": "evt_n"})
    assert (number.code, number.param) == ("invalid_value", "type")


def test_rule7_missing_type_is_a_missing_required_parameter() -> None:
    err = reject({"event_id": "evt_m", "audio": ""})
    assert (err.code, err.event_id, err.param) == ("missing_required_parameter", "evt_m", "type")
    assert err.message == "Missing required parameter: 'type'."
    assert reject({"type": None}).code == "missing_required_parameter"


def test_rule7_non_object_event_is_invalid_value() -> None:
    for raw in ("[]", "3", '"input_audio_buffer.clear"', "null"):
        assert reject(raw).code == "invalid_value"


def test_rule7_wrong_field_type_is_invalid_value_with_json_path() -> None:
    err = reject(
        {
            "type": "conversation.item.truncate",
            "event_id": "evt_t",
            "item_id": "i",
            "content_index": "zero",
            "audio_end_ms": 10,
        }
    )
    assert (err.code, err.param, err.event_id) == ("invalid_value", "content_index", "evt_t")


def test_rule7_negative_ms_is_invalid_value() -> None:
    err = reject(
        {
            "type": "conversation.item.truncate",
            "event_id": "evt_t",
            "item_id": "i",
            "content_index": 0,
            "audio_end_ms": -1,
        }
    )
    assert (err.code, err.param) == ("invalid_value", "audio_end_ms")
    err = reject({"type": "playback.ack", "event_id": "a", "response_id": "r", "played_ms": -5})
    assert (err.code, err.param, err.event_id) == ("invalid_value", "played_ms", "a")


@pytest.mark.parametrize(
    ("field", "raw"),
    [
        ("played_ms", "-0.5"),
        ("played_ms", "-1"),
        ("played_ms", '"1234"'),
        ("played_ms", "true"),
        ("played_ms", "null"),
        ("played_ms", "[1]"),
        ("played_ms", "1e400"),  # beyond a double: not silently infinite
        ("committed_ms", "-0.25"),
        ("committed_ms", '"12.5"'),
        ("committed_ms", "false"),
    ],
)
def test_rule7_playback_ack_negative_or_non_number_ms_is_invalid_value(
    field: str, raw: str
) -> None:
    """Rule 7 with the playback.ack extension: fractions are floored, but a negative cursor
    or a non-number stays a precise error naming the field and the event."""
    fields = {"played_ms": "10", "committed_ms": "5"}
    fields[field] = raw
    body = ", ".join(f'"{k}": {v}' for k, v in fields.items())
    err = reject(f'{{"type": "playback.ack", "event_id": "ack_1", "response_id": "r", {body}}}')
    assert (err.code, err.param, err.event_id) == ("invalid_value", field, "ack_1")


def test_rule7_missing_field_is_missing_required_parameter() -> None:
    err = reject({"type": "conversation.item.delete", "event_id": "evt_d"})
    assert (err.code, err.param, err.event_id) == (
        "missing_required_parameter",
        "item_id",
        "evt_d",
    )


def test_rule7_missing_nested_field_names_the_full_path() -> None:
    err = reject(_item({"type": "input_text"}))
    assert (err.code, err.param, err.event_id) == (
        "missing_required_parameter",
        "item.content[0].text",
        "evt_item",
    )
    err = reject(_item({"type": "input_audio"}))
    assert (err.code, err.param) == ("missing_required_parameter", "item.content[0].audio")


def test_rule7_bad_base64_is_invalid_base64_error() -> None:
    err = reject({"type": "input_audio_buffer.append", "event_id": "evt_b", "audio": "!!notb64"})
    assert (err.code, err.param, err.event_id) == ("invalid_base64", "audio", "evt_b")


def test_rule7_bad_base64_in_item_audio_is_invalid_base64_error() -> None:
    err = reject(_item({"type": "input_audio", "audio": "%%%"}))
    assert (err.code, err.param, err.event_id) == (
        "invalid_base64",
        "item.content[0].audio",
        "evt_item",
    )


@pytest.mark.parametrize(
    "url",
    [
        "https://example.com/cat.png",
        "data:text/plain;base64,aGVsbG8=",
        "data:image/png,rawbytes",
        "data:image/png;base64,",
        "data:image/png;base64,!!!",
    ],
)
def test_rule7_non_data_url_image_is_invalid_image(url: str) -> None:
    err = reject(_item({"type": "input_image", "image_url": url}))
    assert (err.code, err.param, err.event_id) == (
        "invalid_image",
        "item.content[0].image_url",
        "evt_item",
    )


def test_rule7_odd_pcm16_append_is_invalid_audio_length() -> None:
    err = reject({"type": "input_audio_buffer.append", "event_id": "evt_o", "audio": b64(b"abc")})
    assert (err.code, err.param, err.event_id) == ("invalid_audio_length", "audio", "evt_o")


def test_rule7_odd_pcm16_item_audio_is_invalid_audio_length() -> None:
    err = reject(_item({"type": "input_audio", "audio": b64(PCM_20MS + b"x")}))
    assert (err.code, err.param) == ("invalid_audio_length", "item.content[0].audio")


@pytest.mark.parametrize(
    ("session", "param"),
    [
        ({"input_audio_format": "opus"}, "session.input_audio_format"),
        ({"output_audio_format": "mp3"}, "session.output_audio_format"),
        (
            {"audio": {"input": {"format": {"type": "audio/pcm", "rate": 16000}}}},
            "session.audio.input.format.rate",
        ),
        (
            {"audio": {"output": {"format": {"type": "audio/wav"}}}},
            "session.audio.output.format.type",
        ),
        (
            {"audio": {"output": {"format": {"type": "audio/pcmu", "rate": 16000}}}},
            "session.audio.output.format.rate",
        ),
    ],
)
def test_rule7_unsupported_format_is_unsupported_audio_format(
    session: dict[str, object], param: str
) -> None:
    err = reject({"type": "session.update", "event_id": "evt_f", "session": session})
    assert (err.code, err.param, err.event_id) == ("unsupported_audio_format", param, "evt_f")


@pytest.mark.parametrize(
    ("session", "param"),
    [
        (
            {"audio": {"input": {"turn_detection": {"type": "push_to_talk"}}}},
            "session.audio.input.turn_detection.type",
        ),
        ({"turn_detection": {"type": "push_to_talk"}}, "session.turn_detection.type"),
    ],
)
def test_rule7_unknown_turn_detection_type_is_unsupported(
    session: dict[str, object], param: str
) -> None:
    err = reject({"type": "session.update", "event_id": "evt_v", "session": session})
    assert (err.code, err.param, err.event_id) == ("unsupported_turn_detection", param, "evt_v")


@pytest.mark.parametrize(
    ("detection", "param"),
    [
        ({"type": "semantic_vad", "eagerness": "eager"}, "eagerness"),
        ({"type": "semantic_vad", "silence_duration_ms": 300}, "silence_duration_ms"),
        ({"type": "semantic_vad", "threshold": 0.4}, "threshold"),
        ({"type": "server_vad", "eagerness": "low"}, "eagerness"),
    ],
)
def test_rule7_semantic_vad_knobs_are_checked(detection: dict[str, object], param: str) -> None:
    """semantic_vad takes eagerness (low/medium/high/auto), server_vad the silence knobs: a
    knob of the other type would be ignored silently, so it is refused by name."""
    session = {"audio": {"input": {"turn_detection": detection}}}
    err = reject({"type": "session.update", "event_id": "evt_s", "session": session})
    assert (err.code, err.param) == (
        "invalid_value",
        f"session.audio.input.turn_detection.{param}",
    )


@pytest.mark.parametrize(
    "session",
    [
        {"output_modalities": ["video"]},
        {"output_modalities": []},
        {"modalities": ["text", "text"]},
        {"output_modalities": ["audio", "audio", "text"]},
        {"audio": {"input": {"turn_detection": {"type": "server_vad", "threshold": 1.5}}}},
        {"max_output_tokens": 0},
        {"type": "transcription"},
    ],
)
def test_rule7_bad_session_values_are_invalid_value(session: dict[str, object]) -> None:
    err = reject({"type": "session.update", "event_id": "evt_s", "session": session})
    assert (err.code, err.event_id) == ("invalid_value", "evt_s")
    assert err.param is not None and err.param.startswith("session.")


def test_rule7_bad_response_modalities_are_invalid_value() -> None:
    err = reject(
        {"type": "response.create", "event_id": "r", "response": {"output_modalities": ["x"]}}
    )
    assert (err.code, err.param, err.event_id) == (
        "invalid_value",
        "response.output_modalities",
        "r",
    )


def test_rule7_non_string_event_id_is_not_echoed() -> None:
    err = reject({"type": "input_audio_buffer.clear", "event_id": 42})
    assert (err.code, err.param, err.event_id) == ("invalid_value", "event_id", None)


def test_rule7_lone_surrogate_in_str_is_an_error_not_an_exception() -> None:
    err = reject('{"type":"input_audio_buffer.clear","event_id":"\ud800"}')
    assert err.code == "invalid_json"


def test_rule7_deep_nesting_is_an_error_not_an_exception() -> None:
    deep = (
        '{"event_id":"evt_deep","type":"input_audio_buffer.clear","x":'
        + "[" * 100_000
        + "]" * 100_000
        + "}"
    )
    err = reject(deep)
    assert (err.code, err.event_id) == ("invalid_json", "evt_deep")
    assert "nesting too deep" in err.message
    err = reject('{"type":"session.update","session":' + "[" * 100_000 + "]" * 100_000 + "}")
    assert (err.code, err.param) == ("invalid_value", "session")


def test_rule7_decoder_has_no_state_so_nothing_is_lost_after_an_error() -> None:
    reject("{garbage")
    ok = decode_client_event(wire({"type": "input_audio_buffer.append", "audio": b64(b"\0\0")}))
    assert ok == InputAudioBufferAppend(audio=b"\0\0")

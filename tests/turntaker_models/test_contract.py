"""The pipeline contract shared by `cascade` and `qwen3_omni` (turntaker_models/contract.py)."""

from __future__ import annotations

import numpy as np
import pytest

from turntaker_models.contract import (
    AudioPart,
    ContractError,
    Conversation,
    GenerationParameters,
    Message,
    TextPart,
    decode_conversation,
    decode_end_reason,
    decode_parameters,
    encode,
    split_audio,
)


def _conversation() -> Conversation:
    return Conversation(
        messages=[
            Message(role="system", content=[TextPart("Be brief.")]),
            Message(role="user", content=[AudioPart(0)]),
            Message(role="assistant"),
            Message(role="user", content=[TextPart("and now?"), AudioPart(1, transcript="hi")]),
        ]
    )


def test_conversation_round_trips_with_empty_assistant_boundary() -> None:
    conversation = _conversation()
    assert decode_conversation(encode(conversation)) == conversation
    assert decode_conversation(encode(conversation)).messages[2].content == []


def test_bad_conversation_is_a_contract_error_naming_the_input() -> None:
    with pytest.raises(ContractError, match="CONVERSATION is not JSON"):
        decode_conversation(b"{nope")
    with pytest.raises(ContractError, match="CONVERSATION"):
        decode_conversation(b'{"messages": [{"role": "robot"}]}')


def test_parameters_default_when_empty_and_are_validated() -> None:
    assert decode_parameters(b"") == GenerationParameters()
    assert decode_parameters(b'{"max_tokens": 5, "audio": false}').audio is False
    with pytest.raises(ContractError, match="max_tokens"):
        decode_parameters(b'{"max_tokens": 0}')
    with pytest.raises(ContractError, match="top_p"):
        decode_parameters(b'{"top_p": 0}')


def test_audio_splits_into_the_segments_the_parts_point_at() -> None:
    audio = np.arange(5, dtype=np.float32)
    parts = split_audio(audio, np.array([2, 3], np.int32), _conversation())
    assert [p.tolist() for p in parts] == [[0, 1], [2, 3, 4]]


def test_audio_lengths_that_do_not_add_up_are_refused() -> None:
    with pytest.raises(ContractError, match="add up"):
        split_audio(np.zeros(4, np.float32), np.array([2, 3], np.int32), _conversation())


def test_audio_part_pointing_past_the_segments_is_refused() -> None:
    with pytest.raises(ContractError, match="only 1 audio segments"):
        split_audio(np.zeros(2, np.float32), np.array([2], np.int32), _conversation())


def test_negative_audio_length_is_named() -> None:
    with pytest.raises(ContractError, match=r"AUDIO_LENGTHS\[1\] is -50"):
        split_audio(np.zeros(100, np.float32), np.array([150, -50], np.int32), _conversation())


def test_end_reason_is_none_when_empty_and_one_of_openais_reasons_else_named() -> None:
    assert decode_end_reason(b"") is None
    assert decode_end_reason(b"max_output_tokens") == "max_output_tokens"
    with pytest.raises(ContractError, match="END_REASON: 'length' is not one of"):
        decode_end_reason(b"length")

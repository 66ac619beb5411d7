"""The pipelines' request built from the core's (orchestrator/service/backends/requests.py): a
session's history audio is decoded to 16 kHz once per turn, not once per response."""

from __future__ import annotations

import numpy as np

from orchestrator.protocol.session_config import PCM16, PCMU
from orchestrator.service.backends.requests import Audio16k, DecodedAudio, pipeline_request
from orchestrator.session.actions import InferenceRequest
from orchestrator.session.audio import decode_input
from orchestrator.session.history import conversation as conv

RNG = np.random.default_rng(7)


def _audio(seconds: float, rate: int = 24000, width: int = 2) -> bytes:
    return RNG.integers(0, 256, int(seconds * rate) * width, dtype=np.uint8).tobytes()


def _user(item_id: str, content: conv.InputAudio) -> conv.Item:
    return conv.Item(item_id, "user", (content,))


def _request(*items: conv.Item) -> InferenceRequest:
    return InferenceRequest("", items, ("audio",), None)


def _segments(request: InferenceRequest, decoded: DecodedAudio | None) -> list[Audio16k]:
    return list(pipeline_request("r", request, default_max_tokens=8, decoded=decoded).audio)


def test_each_turn_is_decoded_once_and_equals_a_fresh_decode() -> None:
    first = conv.InputAudio(_audio(1.0))
    second = conv.InputAudio(_audio(0.5))
    decoded = DecodedAudio()
    _segments(_request(_user("a", first)), decoded)
    # The next response sends the whole history again: only the new turn is decoded.
    segments = _segments(_request(_user("a", first), _user("b", second)), decoded)
    assert decoded.decodes == 2
    for got, content in zip(segments, (first, second), strict=True):
        np.testing.assert_array_equal(got, decode_input(content.audio, content.format))
        assert not got.flags.writeable, "shared by later requests: must not be written"
    assert [s.shape[0] for s in segments] == [16000, 8000]


def test_a_transcript_arriving_later_keeps_the_decode() -> None:
    raw = _audio(0.5)
    decoded = DecodedAudio()
    _segments(_request(_user("a", conv.InputAudio(raw))), decoded)
    _segments(_request(_user("a", conv.InputAudio(raw, transcript="hello"))), decoded)
    assert decoded.decodes == 1


def test_the_same_bytes_in_another_format_are_decoded_as_that_format() -> None:
    raw = _audio(0.5, rate=8000, width=1)
    decoded = DecodedAudio()
    a = _segments(_request(_user("a", conv.InputAudio(raw, format=PCM16))), decoded)
    b = _segments(_request(_user("a", conv.InputAudio(raw, format=PCMU))), decoded)
    assert decoded.decodes == 2
    assert a[0].shape[0] != b[0].shape[0]


def test_it_holds_only_what_the_last_request_used() -> None:
    turns = [conv.InputAudio(_audio(0.2)) for _ in range(5)]
    decoded = DecodedAudio()
    _segments(_request(*[_user(str(i), t) for i, t in enumerate(turns)]), decoded)
    assert len(decoded) == 5
    # Pruned to the last two turns: the others' audio is let go.
    _segments(_request(_user("3", turns[3]), _user("4", turns[4])), decoded)
    assert len(decoded) == 2 and decoded.decodes == 5


def test_without_a_cache_every_request_decodes_afresh() -> None:
    content = conv.InputAudio(_audio(0.2))
    one = _segments(_request(_user("a", content)), None)
    two = _segments(_request(_user("a", content)), None)
    np.testing.assert_array_equal(one[0], two[0])
    assert one[0] is not two[0]

"""Rule 7 under fuzzing: decode_client_event returns, it never raises."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.protocol.client import CLIENT_EVENT_TYPES, ClientEvent
from orchestrator.protocol.codec import decode_client_event
from orchestrator.protocol.errors import ProtocolError

_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
    | st.sampled_from(["", "AAA=", "!!", "pcm16", "audio/pcm", "server_vad", "semantic_vad"])
)
_JSON = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=5)
    ),
    max_leaves=25,
)
_KEYS = st.sampled_from(
    [
        "event_id",
        "audio",
        "session",
        "item",
        "response",
        "item_id",
        "content_index",
        "audio_end_ms",
        "played_ms",
        "response_id",
        "content",
        "role",
        "type",
        "format",
        "turn_detection",
        "output_modalities",
        "modalities",
        "image_url",
        "text",
    ]
)
# Events that look real: a known type plus plausible keys holding arbitrary JSON, so the
# fuzzer reaches the validators and normalizers rather than stopping at "unknown type".
_EVENTS = st.builds(
    lambda t, fields: {"type": t, **fields},
    st.sampled_from(sorted(CLIENT_EVENT_TYPES)),
    st.dictionaries(_KEYS, _JSON, max_size=5),
)


def _check(out: ClientEvent | ProtocolError) -> None:
    if isinstance(out, ProtocolError):
        assert out.code and out.message
        assert out.event_id is None or isinstance(out.event_id, str)


@settings(max_examples=400)
@given(st.binary(max_size=300))
def test_rule7_arbitrary_bytes_never_raise(data: bytes) -> None:
    _check(decode_client_event(data))


@settings(max_examples=400)
@given(st.text(max_size=300))
def test_rule7_arbitrary_text_never_raises(data: str) -> None:
    _check(decode_client_event(data))


@settings(max_examples=400)
@given(_JSON)
def test_rule7_arbitrary_json_never_raises(obj: Any) -> None:
    _check(decode_client_event(json.dumps(obj)))


@settings(max_examples=800)
@given(_EVENTS, st.sampled_from([None, "evt_fuzz"]))
def test_rule7_plausible_events_never_raise_and_keep_event_id(
    event: dict[str, Any], event_id: str | None
) -> None:
    if event_id is not None:
        event["event_id"] = event_id
    out = decode_client_event(json.dumps(event))
    _check(out)
    if event_id is not None:
        assert out.event_id == event_id

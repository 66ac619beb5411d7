"""Raw frames: what no JSON encoder would send (malformed JSON, non-UTF-8, binary, empty, deep).

Rules:
- Anything that is not one JSON object is an `error`; the session goes on (docs/protocol.md rule 7).
- An unparseable frame can only be named by sniffing its text for `"event_id"`: its error
  carries the one sent or none (`exact_or_none`), never a nested decoy placed before it.
- Whitespace around JSON is still JSON, and binary frames carry JSON just as well: those keep
  the event's meaning. Deep nesting, duplicate keys and a BOM may go either way (`any`).
- A text frame that is not UTF-8 fails the connection (RFC 6455): it can only come last.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Final

from hypothesis import strategies as st

from fuzzing.inputs import FuzzInput
from fuzzing.valid import VALID, as_input, echo_of, to_frame, with_id
from fuzzing.values import EVENT_IDS, SMALL_JSON, repeat

_NOT_JSON: Final = (
    "{'type': 'session.update'}",
    '{"type": "input_audio_buffer.clear",}',
    '{"type": NaN}',
    '{"type": Infinity}',
    '{"type": "input_audio_buffer.clear"} // comment',
    '/* c */ {"type": "input_audio_buffer.clear"}',
    '{"type": "input_audio_buffer.clear" "event_id": "x"}',
    '{type: "input_audio_buffer.clear"}',
    '{"type": "input_audio_buffer.clear", "event_id": "\\ud800"}',
    '{"type": "conversation.item.retrieve", "item_id": "\\udfff", "event_id": "lone"}',
    '{"type": "input_audio_buffer.clear", "event_id": "\\x41"}',
    "{",
    "}",
    '"',
    "[",
    "nul",
    "{}}",
)


# Built once, not per draw (each new strategy would be validated again when drawn from).
# Valid JSON objects are other kinds' business; anything else here is an error.
_TEXT: Final = st.text(max_size=300).filter(lambda t: not t.lstrip().startswith("{"))
_BINARY: Final = st.binary(max_size=300).filter(lambda b: not b.lstrip().startswith(b"{"))
_NOT_OBJECT: Final = SMALL_JSON.filter(lambda v: not isinstance(v, dict))


@st.composite
def raw_inputs(draw: st.DrawFn) -> FuzzInput:
    how = draw(
        st.sampled_from(
            [
                "text",
                "binary",
                "truncated",
                "trailing_garbage",
                "not_object",
                "not_json",
                "binary_event",
                "binary_not_utf8",
                "empty",
                "deep",
                "huge_garbage",
                "whitespace",
                "duplicate_keys",
                "bom",
            ]
        )
    )
    name = f"raw:{how}"
    if how == "text":
        # Valid JSON objects are other kinds' business; anything else here is an error.
        return FuzzInput(
            name,
            draw(_TEXT),
            "error",
        )
    if how == "binary":
        return FuzzInput(
            name,
            draw(_BINARY),
            "error",
        )
    if how == "not_object":
        value = draw(_NOT_OBJECT)
        return FuzzInput(name, json.dumps(value), "error", echo="none")
    if how == "not_json":
        return FuzzInput(name, draw(st.sampled_from(_NOT_JSON)), "error")
    if how == "empty":
        empties: list[str | bytes] = ["", " ", "\n", "\t\r\n ", b""]
        return FuzzInput(name, draw(st.sampled_from(empties)), "error")
    if how == "huge_garbage":
        unit = draw(st.sampled_from(["A", "{", "[", '"', "\\", "{]", "é"]))
        return FuzzInput(name, repeat(unit, draw(st.integers(64 * 1024, 1024 * 1024))), "error")

    valid = draw(VALID)
    event = with_id(valid.event, draw(EVENT_IDS))
    frame = to_frame(event, True)
    # Unparseable, so the server can only look for the event_id in the text; a nested one
    # placed before the real one must not fool it.
    event_id = echo_of(event)[1]
    decoyed = to_frame({"metadata": {"event_id": "nested_decoy"}, **event}, True)
    if how == "truncated":
        cut = draw(st.integers(0, len(decoyed) - 1))
        return FuzzInput(name, decoyed[:cut], "error", echo="exact_or_none", event_id=event_id)
    if how == "trailing_garbage":
        tail = draw(st.sampled_from(["}", "]", ",", "x", " {}", "\x00", "//c", "{", " 1", '"']))
        return FuzzInput(name, decoyed + tail, "error", echo="exact_or_none", event_id=event_id)
    if how == "binary_not_utf8":
        bad = draw(
            st.sampled_from(
                [b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xc0\xaf", b"\xf8\x88\x80\x80\x80"]
            )
        )
        data = decoyed.encode()
        at = len(data) - 1  # a last field, in an unknown key the parser would otherwise skip
        data = data[:at] + b', "junk": "' + bad + b'"' + data[at:]
        return FuzzInput(name, data, "error", echo="exact_or_none", event_id=event_id)
    if how == "deep":
        depth = draw(st.sampled_from([10, 100, 1000, 10_000, 100_000]))
        opening, closing = draw(st.sampled_from([("[", "]"), ('{"a":', "}")]))
        deep = opening * depth + "1" + closing * depth
        # Past some depth a parser must refuse; before it, the event is just an event.
        return FuzzInput(
            name, frame[:-1] + ', "deep": ' + deep + "}", "any", echo="any", event_id=event_id
        )
    if how == "duplicate_keys":
        return FuzzInput(name, frame[:-1] + ', "type": "input_audio_buffer.clear"}', "any")
    if how == "bom":
        return FuzzInput(name, "\ufeff" + frame, "any")
    like = as_input(name, event, valid, True)
    if how == "binary_event":
        # Binary frames carry JSON just as well (the contract says nothing against them).
        return replace(like, frame=frame.encode())
    # Whitespace around JSON is still JSON.
    pad = draw(st.sampled_from([" ", "\n", "\r\n\t "]))
    return replace(like, frame=pad + frame + pad)


def bad_utf8_text_frame() -> FuzzInput:
    return FuzzInput(
        "raw:text_frame_not_utf8",
        b'{"type": "input_audio_buffer.clear", "event_id": "\xff\xfe"}',
        "any",
        text_bytes=True,
    )

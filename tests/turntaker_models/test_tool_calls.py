"""Function calls in streamed text (turntaker_models/tool_calls.py), on hand-written streams."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from turntaker_models.contract import ToolCallDelta, ToolSpec
from turntaker_models.tool_calls import (
    Spoken,
    ToolCallStream,
    render_call,
    render_tools_system_prompt,
)

ARGUMENTS = '{"city": "Paris", "unit": "celsius"}'
CALL = f'<tool_call>\n{{"name": "get_weather", "arguments": {ARGUMENTS}}}\n</tool_call>'
# Braces, quotes, escapes and the closing tag inside strings are all arguments.
TRICKY = r'{"q": "a } { \" </tool_call> \\", "n": {"x": [1, {"y": "}}"}]}, "e": "\\\""}'


@dataclass
class Heard:
    spoken: str
    deltas: list[ToolCallDelta]
    stream: ToolCallStream

    @property
    def name(self) -> str:
        return self.deltas[0].name if self.deltas else ""

    @property
    def arguments(self) -> str:
        return "".join(d.arguments for d in self.deltas)


def hear(pieces: list[str]) -> Heard:
    stream = ToolCallStream()
    out = [p for piece in pieces for p in stream.feed(piece)]
    out += stream.close()
    spoken = "".join(p.text for p in out if isinstance(p, Spoken))
    deltas = [p for p in out if isinstance(p, ToolCallDelta)]
    return Heard(spoken, deltas, stream)


def splits(text: str) -> list[list[str]]:
    """The text whole, cut at every single point, and one character at a time."""
    return [[text], *([text[:i], text[i:]] for i in range(1, len(text))), list(text)]


def test_text_before_a_call_is_spoken_and_after_it_dropped_at_every_split() -> None:
    text = f"Let me check. {CALL}\nIt is sunny. <tool_call>again"
    for pieces in splits(text):
        heard = hear(pieces)
        assert heard.spoken == "Let me check. ", pieces
        assert heard.name == "get_weather" and heard.arguments == ARGUMENTS, pieces
        assert heard.stream.in_call and heard.stream.call_done


def test_first_delta_names_the_function_with_empty_arguments_and_only_it_does() -> None:
    heard = hear(list(CALL))
    assert heard.deltas[0] == ToolCallDelta(arguments="", name="get_weather")
    assert all(d.name == "" and d.arguments for d in heard.deltas[1:])


def test_no_partial_tag_is_ever_spoken() -> None:
    stream = ToolCallStream()
    assert stream.feed("Hello <tool") == [Spoken("Hello ")]
    assert stream.feed("_cal") == []
    assert stream.feed("l>") == [] and stream.in_call
    for pieces in splits(f"A{CALL}"):
        stream = ToolCallStream()
        for piece in pieces:
            spoken = "".join(p.text for p in stream.feed(piece) if isinstance(p, Spoken))
            assert "<" not in spoken, pieces


def test_text_that_only_looked_like_a_tag_is_spoken_once_decided() -> None:
    stream = ToolCallStream()
    assert stream.feed("a <") == [Spoken("a ")]
    assert stream.feed(" b") == [Spoken("< b")]
    assert stream.feed("<tool_cab") == [Spoken("<tool_cab")]
    assert stream.feed(" <tool_c") == [Spoken(" ")]
    # At the end a held-back start that never became a tag is spoken after all.
    assert stream.close() == [Spoken("<tool_c")]
    assert not stream.in_call
    assert hear(list("x < y <tool")).spoken == "x < y <tool"


def test_braces_quotes_escapes_and_close_tags_inside_strings_are_arguments() -> None:
    json.loads(TRICKY)
    call = f'<tool_call>\n{{"name": "f", "arguments": {TRICKY}}}\n</tool_call> after'
    for pieces in splits(call):
        heard = hear(pieces)
        assert heard.arguments == TRICKY and heard.stream.call_done, pieces
        assert heard.spoken == ""


@given(st.lists(st.integers(min_value=1, max_value=len(CALL)), max_size=12))
def test_any_chunking_gives_the_same_call(cuts: list[int]) -> None:
    text = f"Sure.\n{CALL} trailing"
    points = sorted({min(c, len(text)) for c in cuts})
    pieces = [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]
    heard = hear(pieces)
    assert (heard.spoken, heard.name, heard.arguments) == ("Sure.\n", "get_weather", ARGUMENTS)


def test_header_whitespace_and_escaped_names_are_read() -> None:
    heard = hear(['<tool_call>{ "name" : "get\\u005fweather" ,\n"arguments":{}}</tool_call>'])
    assert (heard.name, heard.arguments) == ("get_weather", "{}")


@pytest.mark.parametrize(
    "call",
    [
        "<tool_call>\nhello there",
        '<tool_call>\n{"name": "", "arguments": {}}\n</tool_call>',
        '<tool_call>\n{"name": get_weather, "arguments": {}}\n</tool_call>',
        '<tool_call>\n{"arguments": {}, "name": "get_weather"}\n</tool_call>',
        '<tool_call>\n{"name": "get_weather", "arguments": "{}"}\n</tool_call>',
        '<tool_call>\n{"name": "get_weather", "parameters": {}}\n</tool_call>',
    ],
)
def test_a_malformed_call_is_spoken_as_nothing_and_is_no_call(call: str) -> None:
    for pieces in splits(f"Okay. {call} Then text."):
        heard = hear(pieces)
        assert heard.spoken == "Okay. " and heard.deltas == [], pieces
        assert heard.stream.in_call and heard.stream.malformed
        assert not heard.stream.call_done


def test_a_cut_off_call_streams_its_arguments_but_never_closes() -> None:
    heard = hear([CALL[:60]])
    assert heard.name == "get_weather" and ARGUMENTS.startswith(heard.arguments)
    assert heard.arguments and not heard.stream.call_done and not heard.stream.malformed


def test_a_header_cut_off_before_the_arguments_is_no_call() -> None:
    heard = hear(['<tool_call>\n{"name": "get_weather", "arguments": '])
    assert heard.deltas == [] and heard.stream.in_call and not heard.stream.call_done


def test_an_earlier_call_renders_as_the_model_writes_one() -> None:
    assert render_call("get_weather", ARGUMENTS) == CALL
    assert hear([render_call("f", "")]).arguments == "{}"


def test_tools_prompt_lists_one_signature_per_line_and_the_call_format() -> None:
    tools = [
        ToolSpec("get_weather", "The weather", {"type": "object", "properties": {}}),
        ToolSpec("ping"),
    ]
    prompt = render_tools_system_prompt(tools)
    listed = prompt.split("<tools>\n", 1)[1].split("\n</tools>", 1)[0].splitlines()
    signatures = [json.loads(line) for line in listed]
    assert [s["function"]["name"] for s in signatures] == ["get_weather", "ping"]
    assert signatures[1]["function"]["parameters"] == {"type": "object", "properties": {}}
    assert prompt.startswith("# Tools") and "<tool_call>" in prompt and "</tool_call>" in prompt

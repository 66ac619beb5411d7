"""Function calls in streamed text (turntaker_models/tool_calls.py), on hand-written
streams."""

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


# Chat-template markup: never spoken, whatever the chunking.
RESULT = '{"temperature_c": 21, "sky": "sunny"}'
MARKERS = (
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<tools>",
    "</tools>",
    "<think>",
    "</think>",
    "<|im_start|>",
    "<|im_end|>",
    "<|endoftext|>",
    "<|",
)


def spoken_everywhere(text: str) -> Heard:
    """What `text` speaks, checked to be the same at every split and one character at a time;
    no piece spoken on the way holds any part of a marker's syntax."""
    whole = hear([text])
    for pieces in splits(text):
        heard = hear(pieces)
        assert heard.spoken == whole.spoken, pieces
        assert (heard.name, heard.arguments) == (whole.name, whole.arguments), pieces
        assert heard.stream.ended == whole.stream.ended, pieces
    return whole


@pytest.mark.parametrize(
    ("text", "spoken"),
    [
        # SmolLM2 echoing the tool result after its answer (greedy, tests/triton).
        (
            f"That's a great example.\n<tool_response>\n{RESULT}\n</tool_response>",
            "That's a great example.\n",
        ),
        ("A <tool_response>x</tool_response> B", "A  B"),
        ("<tools>\n{}\n</tools>Hi", "Hi"),
        ("<think>\nLet me see.\n</think>\n\nIt is sunny.", "\n\nIt is sunny."),
        # Nested blocks of the same tag: depth counted.
        ("a<tool_response>b<tool_response>c</tool_response>d</tool_response>e", "ae"),
        # Inside a block nothing is markup but its own tags and turn markers: dropped with it.
        ("<think>x <tool_call> y </tool_response> z</think>w", "w"),
        # Stray closing tags are dropped alone.
        ("20\n</tool_response>", "20\n"),
        ("</tool_call>ok</think> then</tools>.", "ok then."),
        # Special tokens written out as text are dropped alone.
        ("a<|vision_start|>b<|video_pad|>c", "abc"),
        # What only looked like one is text.
        ("a <| b |> c", "a <| b |> c"),
        ("x<|a b|>", "x<|a b|>"),
        ("<toolbox> and <thinking>", "<toolbox> and <thinking>"),
    ],
)
def test_markup_is_never_spoken_at_any_split(text: str, spoken: str) -> None:
    heard = spoken_everywhere(text)
    assert heard.spoken == spoken
    assert heard.deltas == [] and not heard.stream.in_call and not heard.stream.ended


def test_no_piece_of_a_marker_is_spoken_on_the_way() -> None:
    text = f"Sure.\n<tool_response>\n{RESULT}\n</tool_response>\nIt is <|im_start|> sunny."
    for pieces in splits(text):
        stream = ToolCallStream()
        for piece in pieces:
            said = "".join(p.text for p in stream.feed(piece) if isinstance(p, Spoken))
            assert "<" not in said and "sky" not in said, pieces


@pytest.mark.parametrize(
    ("text", "spoken"),
    [
        ("Hi.<|im_end|>more", "Hi."),
        ("Hi.<|endoftext|>Other text", "Hi."),
        ("<|im_start|>assistant\nHello", ""),
        # A turn marker inside a block ends the text inside it: see the unclosed blocks.
        ("<think>x<|im_end|>y</think>z", ""),
        ("<tool_response>It is sunny.<|im_end|>y</tool_response>z", "It is sunny."),
    ],
)
def test_a_turn_marker_ends_the_answer(text: str, spoken: str) -> None:
    heard = spoken_everywhere(text)
    assert heard.spoken == spoken and heard.stream.ended and not heard.stream.in_call
    stream = ToolCallStream()
    stream.feed(text)
    assert stream.feed(" and more <tool_call>") == [] and stream.close() == []


@pytest.mark.parametrize(
    ("text", "spoken"),
    [
        # SmolLM2 opening the tag and answering inside it (greedy, the bug this guards):
        # the answer is spoken, at the end.
        (
            "<tool_response>\nThe weather in Paris is quite raining.",
            "\nThe weather in Paris is quite raining.",
        ),
        (
            "Let me see.\n<tool_response>\nIt is 18 degrees.\n</tool",
            "Let me see.\n\nIt is 18 degrees.\n",
        ),
        # Read again as text: a closed block inside is still dropped, a special token too.
        ("a<tool_response>b<tool_response>c</tool_response>d<|image_pad|>", "abd"),
        # Reasoning and signatures are dropped either way.
        ("Well. <think>I should say", "Well. "),
        ("<tools>\n{", ""),
    ],
)
def test_a_block_the_answer_ends_inside(text: str, spoken: str) -> None:
    heard = spoken_everywhere(text)
    assert heard.spoken == spoken
    # Nothing of it before the end: held back, not settled.
    stream = ToolCallStream()
    said = [p for p in stream.feed(text) if isinstance(p, Spoken)]
    assert "".join(p.text for p in said) == spoken[: len("".join(p.text for p in said))]
    assert stream.settled < len(text)
    stream.close()
    assert stream.settled == len(text)


def test_held_fragments_at_the_end() -> None:
    # A fragment of a closing tag or of a special token is never spoken; other text is.
    assert hear(["end <|im_"]).spoken == "end "
    assert hear(["end </tool_resp"]).spoken == "end "
    assert hear(["end <tool"]).spoken == "end <tool"


def test_a_call_after_dropped_markup_is_read() -> None:
    text = f"<tool_response>{RESULT}</tool_response>Checking.</tool_call> {CALL}"
    heard = spoken_everywhere(text)
    assert heard.spoken == "Checking. "
    assert (heard.name, heard.arguments) == ("get_weather", ARGUMENTS)
    assert heard.stream.call_done


def test_spoken_pieces_carry_their_offsets_and_settled_follows() -> None:
    text = f"One <|x|>two <tool_response>{RESULT}</tool_response>three <"
    for pieces in splits(text):
        stream = ToolCallStream()
        out: list[Spoken] = []
        fed = 0
        for piece in pieces:
            out += [p for p in stream.feed(piece) if isinstance(p, Spoken)]
            fed += len(piece)
            assert 0 <= stream.settled <= fed
            assert all(p.start + len(p.text) <= stream.settled for p in out), pieces
        out += [p for p in stream.close() if isinstance(p, Spoken)]
        assert stream.settled == len(text)
        for p in out:
            assert text[p.start : p.start + len(p.text)] == p.text, pieces
        assert "".join(p.text for p in out) == "One two three <"


FRAGMENTS = [
    "Hello ",
    "it is sunny. ",
    "<",
    "<tool",
    "</tool_resp",
    "<|im_",
    "|>",
    ">",
    "\n",
    *MARKERS[:8],
    "<|vision_start|>",
    RESULT,
]


@given(
    st.lists(st.sampled_from(FRAGMENTS), max_size=12),
    st.lists(st.integers(min_value=1, max_value=200), max_size=8),
)
def test_any_text_and_any_chunking_speak_the_same_and_no_marker(
    fragments: list[str], cuts: list[int]
) -> None:
    text = "".join(fragments)
    points = sorted({min(c, len(text)) for c in cuts})
    pieces = [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]
    whole, chunked = hear([text]), hear(pieces)
    assert chunked.spoken == whole.spoken
    assert (chunked.name, chunked.arguments) == (whole.name, whole.arguments)
    stream = ToolCallStream()
    for piece in pieces:
        for p in stream.feed(piece):
            if isinstance(p, Spoken):
                # Each piece spoken is free of markup.
                assert not any(m in p.text for m in MARKERS[:-1]), (pieces, p)
                assert "<|vision_start|>" not in p.text

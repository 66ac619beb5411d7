"""turntaker_models/answers.py, rule by rule, on a byte-level stand-in tokenizer (one token per
byte, a few added tokens): the shown tools, detokenizing, the offered call, `over` and the
tokens whose text was spoken. The checkpoints' own tokenizers run the same code in
cascade/test_llm.py and omni/test_tool_calls.py."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tests.tool_specs import WEATHER
from turntaker_models.answers import (
    Answer,
    Detokenizer,
    Said,
    shown_tools,
    special_ids,
    turn_ids,
)
from turntaker_models.contract import (
    Conversation,
    GenerationParameters,
    Message,
    TextPart,
    ToolCallDelta,
    ToolCallPart,
    ToolChoice,
    ToolResultPart,
)
from turntaker_models.tool_calls import Spoken


@dataclass(frozen=True)
class _Added:
    content: str
    special: bool


class ByteTokenizer:
    """Ids 0-255 are bytes; added tokens after them. Decodes as byte-level BPE does: runs of
    bytes as UTF-8 (a broken character: U+FFFD), added tokens as their text unless special
    and skipped."""

    ADDED = {
        256: _Added("<|im_end|>", True),
        257: _Added("<|im_start|>", True),
        258: _Added("<|endoftext|>", True),
        259: _Added("<tool_call>", False),
    }

    def __init__(self) -> None:
        self.added_tokens_decoder = dict(self.ADDED)

    def get_vocab(self) -> dict[str, int]:
        return {added.content: i for i, added in self.ADDED.items()}

    def decode(
        self,
        ids: Sequence[int],
        skip_special_tokens: bool = False,
        clean_up_tokenization_spaces: bool = True,
    ) -> str:
        assert not clean_up_tokenization_spaces, "spaces are kept as the model wrote them"
        text, run = "", bytearray()
        for i in ids:
            if i < 256:
                run.append(i)
                continue
            text += run.decode(errors="replace")
            run.clear()
            added = self.ADDED[i]
            if not (added.special and skip_special_tokens):
                text += added.content
        return text + run.decode(errors="replace")


TOKENIZER = ByteTokenizer()
IM_END, IM_START, ENDOFTEXT, TOOL_CALL = 256, 257, 258, 259


def ids(text: str) -> list[int]:
    return list(text.encode())


def run(answer: Answer, tokens: list[int], final: bool = True) -> list[Said]:
    """Every token pushed (the last one `final`), up to the answer's end."""
    out = []
    for index, token in enumerate(tokens):
        out.append(answer.push(token, final and index == len(tokens) - 1))
        if answer.over:
            break
    return out


def text_of(said: list[Said]) -> str:
    return "".join(s.text for s in said)


def tokens_of(said: list[Said]) -> list[int]:
    return [t for s in said for t in s.tokens]


def calls_of(said: list[Said]) -> list[ToolCallDelta]:
    return [c for s in said for c in s.calls]


QUESTION = Conversation([Message("user", [TextPart("Weather in Paris?")])])
RESULT = Conversation(
    [
        *QUESTION.messages,
        Message("assistant", [ToolCallPart("c1", "get_weather", '{"city": "Paris"}')]),
        Message("tool", [ToolResultPart("c1", "rain")]),
    ]
)


def _params(choice: ToolChoice) -> GenerationParameters:
    name = "get_weather" if choice == "function" else ""
    return GenerationParameters(tools=[WEATHER], tool_choice=choice, tool_name=name)


def test_rule_1_no_tools_are_shown_under_none() -> None:
    for hide in (False, True):
        assert shown_tools(_params("none"), QUESTION, hide_after_result=hide) == []
    for choice in ("auto", "required", "function"):
        assert shown_tools(_params(choice), QUESTION) == [WEATHER]


def test_rule_1_hiding_after_a_result_is_for_auto_only_and_asked_for() -> None:
    assert shown_tools(_params("auto"), RESULT, hide_after_result=True) == []
    assert shown_tools(_params("auto"), RESULT) == [WEATHER]
    assert shown_tools(_params("auto"), QUESTION, hide_after_result=True) == [WEATHER]
    for choice in ("required", "function"):
        params = _params(choice)
        assert shown_tools(params, RESULT, hide_after_result=True) == [WEATHER]


CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def test_rule_2_an_offered_call_is_passed_on() -> None:
    said = run(Answer(TOKENIZER, ["get_weather"]), ids("One moment. " + CALL))
    assert text_of(said) == "One moment. "
    deltas = calls_of(said)
    assert deltas[0].name == "get_weather" and all(not d.name for d in deltas[1:])
    assert "".join(d.arguments for d in deltas) == '{"city": "Paris"}'


def test_rule_2_a_call_to_another_function_is_dropped_and_ends_the_answer() -> None:
    answer = Answer(TOKENIZER, ["set_alarm"])
    said = run(answer, ids("One moment. " + CALL + " more"))
    assert text_of(said) == "One moment. " and calls_of(said) == []
    assert answer.over


def test_rule_2_with_nothing_offered_a_call_ends_the_answer_at_once() -> None:
    answer = Answer(TOKENIZER, [])
    said = run(answer, [*ids("Hi "), TOOL_CALL, *ids('{"name": "get_weather"')])
    # Over at the opening tag (the added token), before the call's name.
    assert answer.over and len(said) == len("Hi ") + 1
    assert text_of(said) == "Hi " and calls_of(said) == []


def test_rule_3_a_split_character_waits_for_its_last_byte() -> None:
    detok = Detokenizer(TOKENIZER)
    wave = ids("👋")
    assert [detok.add(b, final=False) for b in wave] == ["", "", "", "👋"]
    text = "Hé, naïve café! 👋 東京"
    tokens = ids(text)
    deltas = [detok.add(t, final=False) for t in tokens] + [detok.flush()]
    assert "".join(deltas) == text and not any("\ufffd" in d for d in deltas)


def test_rule_3_at_most_max_held_tokens_wait_and_the_end_decodes_what_is_held() -> None:
    detok = Detokenizer(TOKENIZER)
    lead = 0xE4  # starts a 3-byte character; a run of them never completes one
    held = [detok.add(lead, final=False) for _ in range(Detokenizer.MAX_HELD)]
    assert held[:-1] == [""] * (Detokenizer.MAX_HELD - 1)
    assert held[-1] == "\ufffd" * Detokenizer.MAX_HELD
    assert detok.add(lead, final=True) == "\ufffd"
    detok.add(lead, final=False)
    assert detok.flush() == "\ufffd" and detok.flush() == ""


def test_rule_3_special_tokens_decode_to_nothing_and_added_tokens_start_a_group() -> None:
    detok = Detokenizer(TOKENIZER)
    assert detok.add(IM_END, final=False) == ""
    answer = Answer(TOKENIZER, [])
    # A byte of a character, then an added token: the byte is decoded as it is, in a group of
    # its own, and the special token adds no text.
    assert answer.push(0xC3) == Said()
    said = answer.push(IM_START)
    assert said.text == "\ufffd" and said.tokens == (0xC3,)
    said = answer.push(ord("a"))
    assert said.text == "a" and said.tokens == (ord("a"),)


def test_rule_4_pieces_come_out_in_order_and_markup_is_dropped() -> None:
    answer = Answer(TOKENIZER, ["get_weather"])
    said = run(answer, ids("Yes</tool_response> sure. " + CALL))
    pieces = [p for s in said for p in s.pieces]
    spoken = [p for p in pieces if isinstance(p, Spoken)]
    first_call = next(i for i, p in enumerate(pieces) if isinstance(p, ToolCallDelta))
    assert all(isinstance(p, Spoken) for p in pieces[:first_call])
    assert all(isinstance(p, ToolCallDelta) for p in pieces[first_call:])
    assert "".join(p.text for p in spoken) == "Yes sure. "


def test_rule_5_over_when_a_call_closes_or_a_turn_marker_is_written() -> None:
    answer = Answer(TOKENIZER, ["get_weather"])
    run(answer, ids(CALL + " and more"), final=False)
    assert answer.over and answer.in_call
    ended = Answer(TOKENIZER, [])
    said = run(ended, ids("Bye.<|im_end|>more"), final=False)
    assert ended.over and text_of(said) == "Bye."
    going = Answer(TOKENIZER, [])
    run(going, ids("Hello there"), final=False)
    assert not going.over


def test_rule_6_a_token_is_spoken_once_its_text_is_settled() -> None:
    answer = Answer(TOKENIZER, ["get_weather"])
    less, b = ids("<b")
    # "<" may begin "<tool_call>": neither its text nor its token goes out yet.
    assert answer.push(less) == Said()
    said = answer.push(b)
    assert said.text == "<b" and said.tokens == (less, b)


def test_rule_6_a_split_character_is_spoken_as_one_group() -> None:
    answer = Answer(TOKENIZER, [])
    said = run(answer, ids("é!"), final=False)
    assert [s.tokens for s in said] == [(), (0xC3, 0xA9), (ord("!"),)]


def test_rule_6_no_token_of_a_call_or_markup_or_special_is_spoken() -> None:
    spoken = "Sure. "
    answer = Answer(TOKENIZER, ["get_weather"])
    said = run(answer, ids(spoken + CALL))
    assert bytes(tokens_of(said)).decode() == spoken
    marked = Answer(TOKENIZER, [])
    said = run(marked, [*ids("Hi<tool_response>x</tool_response> there"), IM_END])
    assert text_of(said) == "Hi there"
    assert bytes(tokens_of(said)).decode() == "Hi there"
    assert not set(tokens_of(said)) & special_ids(TOKENIZER)


def test_rule_6_what_is_decided_only_at_the_end_is_spoken_then() -> None:
    # An unclosed <tool_response> was an answer: its text and tokens go out at the end.
    answer = Answer(TOKENIZER, [])
    pushed = [answer.push(t) for t in ids("<tool_response>It rains.")]
    assert text_of(pushed) == "" and tokens_of(pushed) == []
    end = answer.finish()
    assert end.text == "It rains." and bytes(end.tokens).decode() == "It rains."


def test_finish_decodes_held_bytes_as_they_are() -> None:
    answer = Answer(TOKENIZER, [])
    assert answer.push(0xC3) == Said()
    end = answer.finish()
    assert end.text == "\ufffd" and end.tokens == (0xC3,)


def test_the_turn_ids_are_the_markers_the_vocabulary_holds() -> None:
    assert turn_ids(TOKENIZER) == {IM_END, IM_START, ENDOFTEXT}
    assert special_ids(TOKENIZER) == {IM_END, IM_START, ENDOFTEXT}

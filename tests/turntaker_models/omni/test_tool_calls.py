"""Function calling through the three Qwen3-Omni stages in-process, on the tiny random weights.

The stages are the real ones (the `chain` of test_stages.py: every response of a stage becomes
one request to the next, as in the ensemble). Random weights cannot choose to call, so a call
is forced ("required", "function": the CallConstraint on the thinker's logits) and its
arguments must validate against the schema; "auto" and "none" must still speak. The thinker's
split of text into spoken text, the talker's tokens and the call's deltas (answers.py's
`Answer`) is
checked on the checkpoint's own tokenizer with a scripted answer.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest

from tests.tool_specs import BOUNDED_WEATHER, WEATHER
from tests.turntaker_models.omni.conftest import Tiny
from tests.turntaker_models.omni.test_stages import Chain, _reset, open_chain
from turntaker_models.answers import Answer, Said, special_ids
from turntaker_models.contract import (
    ContractError,
    Conversation,
    GenerationParameters,
    Message,
    TextPart,
    ToolCallDelta,
    ToolCallPart,
    ToolChoice,
    ToolResultPart,
    ToolSpec,
    decode_tool_call,
    encode,
)
from turntaker_models.omni import wire
from turntaker_models.omni.prompt_journal import read_entries
from turntaker_models.omni.sampling import SamplingConfig
from turntaker_models.omni.stages import _Emitter, _ThinkerSender, stop_ids
from turntaker_models.omni.thinker import ThinkerSession
from turntaker_models.tool_grammar import call_constraint

ALARM = ToolSpec(
    "set_alarm",
    "Sets an alarm.",
    {
        "type": "object",
        "properties": {
            "hour": {"type": "integer", "minimum": 0, "maximum": 23},
            "label": {"type": "string", "maxLength": 12},
        },
        "required": ["hour"],
        "additionalProperties": False,
    },
)


@pytest.fixture(scope="module")
def chain(tiny: Tiny, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Chain]:
    with open_chain(tiny, tmp_path_factory.mktemp("tool-stages")) as stages:
        yield stages


def _deltas(chain: Chain) -> list[ToolCallDelta]:
    out = [decode_tool_call(raw) for raw in chain.calls]
    return [d for d in out if d is not None]


def _assembled(deltas: list[ToolCallDelta]) -> tuple[str, Any]:
    assert deltas, "no call streamed"
    assert deltas[0].name, "the first delta names the function"
    assert all(not d.name for d in deltas[1:]), "only the first delta names it"
    return deltas[0].name, json.loads("".join(d.arguments for d in deltas))


@pytest.mark.parametrize("audio", [True, False], ids=["audio", "text-only"])
def test_required_is_one_valid_call_and_nothing_spoken(chain: Chain, audio: bool) -> None:
    _reset(chain)
    params = GenerationParameters(
        max_tokens=96, tools=[BOUNDED_WEATHER], tool_choice="required", audio=audio
    )
    chain.start(f"required-{audio}", params, text="What's the weather in Paris?")
    chain.wait_idle()
    assert all(r.error is None for r in chain.replies), [r.error for r in chain.replies]
    name, arguments = _assembled(_deltas(chain))
    assert name == "get_weather"
    jsonschema.validate(arguments, BOUNDED_WEATHER.parameters)
    # The call alone: no text, no audio, and the talker was never started nor given a token.
    assert "".join(chain.text) == ""
    assert not chain.audio
    assert wire.START not in chain.kinds and wire.TOKEN not in chain.kinds
    assert chain.kinds[-1] == wire.END


def test_function_calls_the_named_one(chain: Chain) -> None:
    _reset(chain)
    params = GenerationParameters(
        max_tokens=96,
        tools=[BOUNDED_WEATHER, ALARM],
        tool_choice="function",
        tool_name="set_alarm",
        temperature=1.0,
        seed=3,
    )
    chain.start("function", params, text="Wake me at seven.")
    chain.wait_idle()
    assert all(r.error is None for r in chain.replies), [r.error for r in chain.replies]
    name, arguments = _assembled(_deltas(chain))
    assert name == "set_alarm"
    jsonschema.validate(arguments, ALARM.parameters)


def test_auto_and_none_still_speak(chain: Chain) -> None:
    for choice in ("auto", "none"):
        _reset(chain)
        params = GenerationParameters(max_tokens=8, tools=[BOUNDED_WEATHER], tool_choice=choice)
        chain.start(f"choice-{choice}", params)
        chain.wait_idle()
        assert all(r.error is None for r in chain.replies), [r.error for r in chain.replies]
        assert "".join(chain.text), choice
        samples = sum(a.shape[0] for a in chain.audio)
        assert samples > 0 and (samples + 555) % 1920 == 0, choice
        assert not _deltas(chain), choice


def test_none_leaves_the_tools_out_of_the_prompt(chain: Chain) -> None:
    journal = chain.thinker.journal
    assert journal is not None
    counts = {}
    cases: list[tuple[str, ToolChoice, list[ToolSpec]]] = [
        ("plain", "auto", []),
        ("none", "none", [BOUNDED_WEATHER]),
        ("auto", "auto", [BOUNDED_WEATHER]),
    ]
    for choice, tool_choice, tools in cases:
        _reset(chain)
        params = GenerationParameters(max_tokens=2, tools=tools, tool_choice=tool_choice)
        chain.start(f"prompt-{choice}", params)
        chain.wait_idle()
        (entry,) = read_entries(journal.path, f"prompt-{choice}")
        counts[choice] = entry["tokens"]
    assert counts["none"] == counts["plain"] < counts["auto"]


def test_a_bad_schema_fails_the_request(chain: Chain) -> None:
    _reset(chain)
    bad = ToolSpec("f", parameters={"type": "array"})
    chain.start("bad-schema", GenerationParameters(tools=[bad], tool_choice="required"))
    chain.wait_idle()
    errors = [r.error for r in chain.replies if r.error]
    assert len(errors) == 1 and errors[0].startswith("qwen3_omni: tool 'f'"), errors


def test_constraint_only_for_forced_choices(tiny: Tiny) -> None:
    from turntaker_models.tool_grammar import ll_tokenizer

    ll = ll_tokenizer(tiny.prompts.tokenizer)
    assert call_constraint(ll, GenerationParameters(tools=[BOUNDED_WEATHER])) is None
    unforced = GenerationParameters(tools=[BOUNDED_WEATHER], tool_choice="none")
    assert call_constraint(ll, unforced) is None
    forced = GenerationParameters(tools=[BOUNDED_WEATHER], tool_choice="required")
    assert call_constraint(ll, forced) is not None
    with pytest.raises(ContractError):
        call_constraint(ll, GenerationParameters(tools=[], tool_choice="function"))


def _split(said: Said) -> tuple[str, list[int], list[ToolCallDelta]]:
    """What one push said: the spoken text, the talker's tokens, the call's deltas."""
    return said.text, list(said.tokens), said.calls


CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


@pytest.mark.parametrize("offered", [True, False], ids=["offered", "not-offered"])
def test_answer_splits_speech_talker_tokens_and_call(tiny: Tiny, offered: bool) -> None:
    tokenizer = tiny.prompts.tokenizer
    spoken = "Sure, one moment. "
    ids = tokenizer.encode(spoken + CALL + " and more", add_special_tokens=False)
    answer = Answer(tokenizer, ["get_weather"] if offered else ["set_alarm"])
    said: list[str] = []
    talker: list[int] = []
    deltas: list[ToolCallDelta] = []
    for index, token in enumerate(ids):
        text, released, calls = _split(answer.push(token, index == len(ids) - 1))
        said.append(text)
        talker += released
        deltas += calls
        if answer.over:
            break
    assert "".join(said) == spoken
    # The talker gets exactly the tokens of the spoken text, none of the call's.
    assert tokenizer.decode(talker) == spoken
    if offered:
        assert _assembled(deltas) == ("get_weather", {"city": "Paris"})
    else:
        assert deltas == []
    assert answer.over


def test_answer_holds_a_token_that_may_start_a_call(tiny: Tiny) -> None:
    # With a tool offered, "<" might begin "<tool_call>": neither spoken nor given to the
    # talker until it is not.
    tokenizer = tiny.prompts.tokenizer
    answer = Answer(tokenizer, ["get_weather"])
    (less,) = tokenizer.encode("<", add_special_tokens=False)
    assert _split(answer.push(less, False)) == ("", [], [])
    b = tokenizer.encode("b", add_special_tokens=False)[0]
    text, released, _ = _split(answer.push(b, False))
    assert text == "<b" and len(released) == 2


def test_with_no_tool_offered_a_call_is_dropped_and_ends_the_answer(tiny: Tiny) -> None:
    # The same stream as with tools: "<" waits, and a call (random weights write
    # `<tool_call>` too) is never spoken nor heard by the talker, and ends the answer.
    tokenizer = tiny.prompts.tokenizer
    answer = Answer(tokenizer, [])
    (less,) = tokenizer.encode("<", add_special_tokens=False)
    assert _split(answer.push(less, False)) == ("", [], [])
    (b,) = tokenizer.encode("b", add_special_tokens=False)
    assert _split(answer.push(b, False)) == ("<b", [less, b], [])
    (call,) = tokenizer.encode("<tool_call>", add_special_tokens=False)
    assert _split(answer.push(call, False)) == ("", [], []) and answer.over


def ids_of(tokenizer: Any, pieces: list[str]) -> list[int]:
    """Token ids of text pieces, an added token (special or a tag) as its one id."""
    ids: list[int] = []
    for piece in pieces:
        if piece in tokenizer.added_tokens_encoder:
            ids.append(tokenizer.added_tokens_encoder[piece])
        else:
            ids += tokenizer.encode(piece, add_special_tokens=False)
    return ids


TEMPLATE_TEXT = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<|")


@pytest.mark.parametrize("offered", [[], ["get_weather"]], ids=["no-tools", "tools"])
@pytest.mark.parametrize(
    ("pieces", "said"),
    [
        # What the tiny weights write after a tool result (see the chain test below).
        (["One moment", "</tool_response>", " please."], "One moment please."),
        (["Yes", "<|video_pad|>", "<|vision_start|>", ", sure."], "Yes, sure."),
        (["Hi. ", "<tool_response>", '{"temp": 21}', "</tool_response>", "Bye."], "Hi. Bye."),
        # Written out of plain tokens rather than as the one token: dropped just the same.
        (["Fine. <", "|vision", "_end|", "> ok"], "Fine.  ok"),
    ],
)
def test_answer_drops_template_text_and_its_tokens(
    tiny: Tiny, pieces: list[str], said: str, offered: list[str]
) -> None:
    tokenizer = tiny.prompts.tokenizer
    ids = ids_of(tokenizer, [*pieces, "<|im_end|>"])
    answer = Answer(tokenizer, offered)
    text, talker = "", []
    for index, token in enumerate(ids):
        spoken, released, calls = _split(answer.push(token, index == len(ids) - 1))
        assert calls == []
        text += spoken
        talker += released
    assert text == said
    # The talker got exactly the tokens of the spoken text: no marker, no special token.
    assert tokenizer.decode(talker, skip_special_tokens=False) == said
    assert not set(talker) & special_ids(tokenizer)


def test_the_turn_tokens_stop_the_thinker(tiny: Tiny) -> None:
    tokenizer = tiny.prompts.tokenizer
    turn = ids_of(tokenizer, ["<|im_start|>", "<|im_end|>", "<|endoftext|>"])
    assert stop_ids(tokenizer, tiny.config) == frozenset(turn)


def test_a_response_block_left_open_is_spoken_at_the_end(tiny: Tiny, chain: Chain) -> None:
    """The model opens `<tool_response>` and answers inside it (as SmolLM2 does): the answer's
    text and its tokens go out at the end, through the real talker and code2wav."""
    _reset(chain)
    tokenizer = tiny.prompts.tokenizer
    said = "Sure, one moment."
    ids = ids_of(tokenizer, ["<tool_response>", said, "<|im_end|>"])
    params = GenerationParameters(max_tokens=len(ids) + 1)
    conversation = Conversation([Message("user", [TextPart("Weather in Paris?")])])
    prompt = tiny.prompts.build(conversation, [])
    session = ThinkerSession(tiny.thinker, tiny.config, prompt, SamplingConfig(), 0, lambda: False)
    _, start = session.prefill(want_talker=True)
    hidden = int(tiny.config.thinker_config.text_config.hidden_size)
    sender = _ThinkerSender(chain._reply(chain._to_talker), "open-block", encode(params), hidden)
    emitter = _Emitter(Answer(tokenizer, []), session, start, sender)
    for index, token in enumerate(ids):
        assert emitter.push(token, index == len(ids) - 1) == (index == len(ids) - 1)
    session.close()
    sender.reply.close()
    chain.wait_idle()
    assert all(r.error is None for r in chain.replies), [r.error for r in chain.replies]
    assert "".join(chain.text) == said
    tokens = [k for k in chain.kinds if k in (wire.START, wire.TOKEN)]
    assert tokens[0] == wire.START and len(tokens) == len(tokenizer.encode(said))
    assert chain.kinds[-1] == wire.END
    assert sum(a.shape[0] for a in chain.audio) > 0


TOOL_RESULT = Conversation(
    [
        Message("user", [TextPart("What is the weather like in Paris today?")]),
        Message("assistant", [ToolCallPart("call_1", "get_weather", '{"city": "Paris"}')]),
        Message("tool", [ToolResultPart("call_1", '{"temp": 21}')]),
    ]
)


@pytest.mark.parametrize("tools", [[], [WEATHER]], ids=["no-tools", "tools"])
def test_tiny_weights_after_a_tool_result_speak_no_template_text(
    tiny: Tiny, chain: Chain, tools: list[ToolSpec]
) -> None:
    """The real case: told a tool's result, the tiny random weights write markup of their
    prompt (`</tool_response>`, `</tool_call>`, special tokens) as greedy tokens; through the
    three stages none of it is text, and the talker hears fewer tokens than were generated."""
    max_tokens = 32
    prompt = tiny.prompts.build(TOOL_RESULT, [], tools=tools)
    session = ThinkerSession(tiny.thinker, tiny.config, prompt, SamplingConfig(), 0, lambda: False)
    token, _ = session.prefill(want_talker=False)
    raw = [token]
    while len(raw) < max_tokens and token != tiny.config.im_end_token_id:
        token = session.step(token)
        raw.append(token)
    session.close()
    tokenizer = tiny.prompts.tokenizer
    raw_text = tokenizer.decode(raw, skip_special_tokens=False)
    markup = [t for t in raw if t in special_ids(tokenizer) or t in ids_of(tokenizer, list(TAGS))]
    assert markup, f"the tiny weights wrote no markup to guard against: {raw_text!r}"
    _reset(chain)
    params = GenerationParameters(max_tokens=max_tokens, tools=tools)
    chain.start(f"tool-result-{len(tools)}", params, conversation=TOOL_RESULT)
    chain.wait_idle()
    assert all(r.error is None for r in chain.replies), [r.error for r in chain.replies]
    text = "".join(chain.text)
    assert text and not any(marker in text for marker in TEMPLATE_TEXT), (text, raw_text)
    heard = [k for k in chain.kinds if k in (wire.START, wire.TOKEN)]
    assert 0 < len(heard) <= len(raw) - 1 - len(markup)
    assert sum(a.shape[0] for a in chain.audio) > 0


TAGS = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")


def test_speech_then_a_call_speaks_only_the_speech(tiny: Tiny, chain: Chain) -> None:
    """The thinker's messages for an answer that speaks, then calls, through the real talker
    and code2wav. Random weights cannot choose to call, so the answer's tokens are scripted
    (the checkpoint's tokenizer); the prompt, the talker conditioning, the embeddings and both
    audio stages are the real ones."""
    _reset(chain)
    tokenizer = tiny.prompts.tokenizer
    spoken = "Sure, one moment. "
    ids = tokenizer.encode(spoken + CALL, add_special_tokens=False)
    params = GenerationParameters(max_tokens=len(ids) + 1, tools=[BOUNDED_WEATHER])
    conversation = Conversation([Message("user", [TextPart("Weather in Paris?")])])
    prompt = tiny.prompts.build(conversation, [], tools=[BOUNDED_WEATHER])
    session = ThinkerSession(tiny.thinker, tiny.config, prompt, SamplingConfig(), 0, lambda: False)
    _, start = session.prefill(want_talker=True)
    hidden = int(tiny.config.thinker_config.text_config.hidden_size)
    sender = _ThinkerSender(chain._reply(chain._to_talker), "scripted", encode(params), hidden)
    emitter = _Emitter(Answer(tokenizer, ["get_weather"]), session, start, sender)
    done = False
    for index, token in enumerate(ids):
        done = emitter.push(token, index == len(ids) - 1)
        if done:
            break
    session.close()
    sender.reply.close()  # the thinker's own request ends, as _ThinkerRun ends it
    assert done, "the call's arguments closed: the generation is over"
    chain.wait_idle()
    assert all(r.error is None for r in chain.replies), [r.error for r in chain.replies]
    assert "".join(chain.text) == spoken
    assert _assembled(_deltas(chain)) == ("get_weather", {"city": "Paris"})
    # The talker got START and a TOKEN per spoken token only, then the call on TEXT messages.
    tokens = [k for k in chain.kinds if k in (wire.START, wire.TOKEN)]
    assert tokens[0] == wire.START and len(tokens) == len(tokenizer.encode(spoken))
    assert chain.kinds[-1] == wire.END
    last_token = max(i for i, k in enumerate(chain.kinds) if k in (wire.START, wire.TOKEN))
    assert all(k == wire.TEXT for k in chain.kinds[last_token + 1 : -1])
    samples = sum(a.shape[0] for a in chain.audio)
    assert samples > 0 and (samples + 555) % 1920 == 0

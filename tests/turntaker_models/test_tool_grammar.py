"""Constrained function calls (turntaker_models/tool_grammar.py) decoded by the real
SmolLM2."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
import torch
from transformers import AutoTokenizer

from turntaker_models.cascade import smollm
from turntaker_models.cascade.llm import Decoder, GenerationStats, Step
from turntaker_models.contract import (
    ContractError,
    Conversation,
    GenerationParameters,
    Message,
    TextPart,
    ToolSpec,
)
from turntaker_models.settings import ModelSettings
from turntaker_models.tool_grammar import CallConstraint

WEATHER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city"],
    "additionalProperties": False,
}
WEATHER = ToolSpec("get_weather", "Get the current weather in a city.", WEATHER_SCHEMA)
TIME = ToolSpec(
    "get_time",
    "Get the current time in a time zone.",
    {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]},
)
# Nested object, array, integer bounds, a pattern; strings bounded so that sampled arguments
# always end within max_tokens.
ORDER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "customer": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "maxLength": 16},
                "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
            },
            "required": ["name", "zip"],
            "additionalProperties": False,
        },
        "items": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "sku": {"type": "string", "enum": ["tea", "coffee", "cake"]},
                    "quantity": {"type": "integer", "minimum": 1, "maximum": 9},
                },
                "required": ["sku", "quantity"],
                "additionalProperties": False,
            },
            "minItems": 1,
            "maxItems": 3,
        },
        "priority": {"type": "integer", "minimum": -2, "maximum": 2},
    },
    "required": ["customer", "items", "priority"],
    "additionalProperties": False,
}
ORDER = ToolSpec("place_order", "Place an order for a customer.", ORDER_SCHEMA)


def ask(text: str) -> Conversation:
    return Conversation([Message("user", [TextPart(text)])])


@pytest.fixture(scope="module")
def decoder() -> Decoder:
    loaded = smollm.load(ModelSettings.from_env().cache_dir)
    return Decoder(loaded.model, loaded.tokenizer, threads=1)


def call_of(steps: list[Step]) -> tuple[list[str], str]:
    """The names in the call's deltas and its whole arguments text."""
    deltas = [s.tool_call for s in steps if s.tool_call is not None]
    return [d.name for d in deltas if d.name], "".join(d.arguments for d in deltas)


def test_function_choice_gives_exactly_one_valid_call_and_no_speech(decoder: Decoder) -> None:
    params = GenerationParameters(
        tools=[WEATHER, TIME], tool_choice="function", tool_name="get_weather", max_tokens=64
    )
    stats = GenerationStats()
    steps = list(decoder.generate(ask("Is it raining in Oslo?"), [], params, lambda: False, stats))
    names, arguments = call_of(steps)
    assert names == ["get_weather"] and stats.tool_call == "get_weather"
    jsonschema.validate(json.loads(arguments), WEATHER_SCHEMA)
    assert all(s.text == "" and s.sentence == "" for s in steps)
    assert stats.finish_reason == "stop" and stats.forced_tokens > 0


def test_required_choice_calls_one_of_the_tools_validly(decoder: Decoder) -> None:
    params = GenerationParameters(tools=[WEATHER, TIME], tool_choice="required", max_tokens=64)
    steps = list(decoder.generate(ask("What time is it in Tokyo?"), [], params, lambda: False))
    names, arguments = call_of(steps)
    assert len(names) == 1 and names[0] in {"get_weather", "get_time"}
    schema = {"get_weather": WEATHER, "get_time": TIME}[names[0]].parameters
    jsonschema.validate(json.loads(arguments), schema)
    assert not any(s.text or s.sentence for s in steps)


@pytest.mark.parametrize(("temperature", "seed"), [(0.0, 0), (0.8, 1), (1.2, 2), (1.6, 3)])
def test_deeper_schema_always_validates_greedy_or_sampled(
    decoder: Decoder, temperature: float, seed: int
) -> None:
    params = GenerationParameters(
        tools=[ORDER],
        tool_choice="function",
        tool_name="place_order",
        temperature=temperature,
        seed=seed,
        max_tokens=200,
    )
    prompt = ask("Order two teas and a cake for Ada, zip 75001, urgent.")
    stats = GenerationStats()
    names, arguments = call_of(list(decoder.generate(prompt, [], params, lambda: False, stats)))
    assert names == ["place_order"] and stats.finish_reason == "stop", arguments
    jsonschema.validate(json.loads(arguments), ORDER_SCHEMA)


def test_cancel_is_still_checked_before_every_forward_pass_under_the_grammar(
    decoder: Decoder,
) -> None:
    checks = 0

    def stop_after_three() -> bool:
        nonlocal checks
        checks += 1
        return checks > 3

    params = GenerationParameters(
        tools=[ORDER], tool_choice="function", tool_name="place_order", max_tokens=200
    )
    stats = GenerationStats()
    prompt = ask("Order a coffee for Bo, zip 10001.")
    steps = list(decoder.generate(prompt, [], params, stop_after_three, stats))
    assert stats.finish_reason == "cancelled" and checks == 4
    # Three forward passes: the prefill and two decode steps.
    assert stats.decode_steps == 2
    _, arguments = call_of(steps)
    assert arguments and not arguments.endswith("}")


def test_mask_pads_a_vocabulary_larger_than_the_tokenizer(decoder: Decoder) -> None:
    constraint = CallConstraint(decoder.tokenizer, [WEATHER], "get_weather")
    vocab = len(decoder.tokenizer)
    logits = torch.zeros(1, vocab + 77)
    constraint.mask_logits(logits)
    allowed = torch.isfinite(logits[0]).nonzero().view(-1).tolist()
    # Nothing forced was taken yet: the only allowed token starts "<tool_call>".
    assert allowed and all(decoder.tokenizer.decode([t]).startswith("<") for t in allowed)
    assert not torch.isfinite(logits[0, vocab:]).any()


def test_done_after_the_closing_tag_and_then_only_eos_is_allowed(decoder: Decoder) -> None:
    tokenizer = decoder.tokenizer
    constraint = CallConstraint(decoder.grammar_tokenizer, [WEATHER], None)
    text = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>'
    ids: list[int] = tokenizer(text, add_special_tokens=False)["input_ids"]
    while ids:
        forced = constraint.take_forced()
        assert ids[: len(forced)] == forced
        ids = ids[len(forced) :]
        if ids:
            constraint.accept(ids.pop(0))
    assert constraint.done
    logits = torch.zeros(len(tokenizer))
    constraint.mask_logits(logits)
    assert torch.isfinite(logits).nonzero().view(-1).tolist() == [tokenizer.eos_token_id]


def test_a_token_the_grammar_forbids_is_refused(decoder: Decoder) -> None:
    constraint = CallConstraint(decoder.grammar_tokenizer, [WEATHER], None)
    bad = decoder.tokenizer("Hello", add_special_tokens=False)["input_ids"][0]
    with pytest.raises(RuntimeError, match="refused"):
        constraint.accept(bad)


@pytest.mark.parametrize(
    ("parameters", "reason"),
    [
        ({"type": "object", "properties": {"x": {"type": "frob"}}}, "frob"),
        ({"type": "object", "properties": {"x": {"type": "array", "uniqueItems": True}}}, "uniq"),
        ({"type": "array"}, "must describe an object"),
    ],
)
def test_a_bad_schema_is_a_value_error_naming_the_function(
    decoder: Decoder, parameters: dict[str, Any], reason: str
) -> None:
    tool = ToolSpec("broken_tool", "", parameters)
    with pytest.raises(ValueError, match=rf"broken_tool.*{reason}"):
        CallConstraint(decoder.grammar_tokenizer, [WEATHER, tool], None)
    # Through the decoder it is a contract error, which the service reports to the caller.
    params = GenerationParameters(tools=[tool], tool_choice="required")
    with pytest.raises(ContractError, match="broken_tool"):
        list(decoder.generate(ask("Hi"), [], params, lambda: False))


def test_no_parameters_means_no_arguments(decoder: Decoder) -> None:
    params = GenerationParameters(
        tools=[ToolSpec("ping")], tool_choice="function", tool_name="ping", max_tokens=32
    )
    names, arguments = call_of(list(decoder.generate(ask("Ping!"), [], params, lambda: False)))
    assert names == ["ping"] and json.loads(arguments) == {}


def test_a_tag_the_vocabulary_holds_as_one_token_is_decoded_as_that_token() -> None:
    # SmolLM2's own tokenizer with the tags added as single tokens, as Qwen's vocabulary has.
    folder = smollm.converted_dir(ModelSettings.from_env().cache_dir)
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    tokenizer.add_tokens(["<tool_call>", "</tool_call>"])
    open_id, close_id = tokenizer.convert_tokens_to_ids(["<tool_call>", "</tool_call>"])
    constraint = CallConstraint(tokenizer, [ToolSpec("ping")], None)
    # A function of no arguments: the grammar forces the whole call.
    forced = constraint.take_forced()
    assert forced[0] == open_id and forced[-1] == close_id and constraint.done
    text = tokenizer.decode(forced)
    assert text == '<tool_call>\n{"name": "ping", "arguments": {}}\n</tool_call>', text

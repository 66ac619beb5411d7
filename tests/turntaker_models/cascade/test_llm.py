"""The `llm` decoding without a server: prompts, sentences, detokenising, the decode loop,
function calls and the service's outputs."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from turntaker_models.answers import Detokenizer
from turntaker_models.cancel_board import CancelBoard
from turntaker_models.cascade import smollm
from turntaker_models.cascade.llm import (
    DEFAULT_SYSTEM_PROMPT,
    IMAGE_PLACEHOLDER,
    UNHEARD_AUDIO,
    Decoder,
    GenerationStats,
    SentenceCutter,
    render_messages,
)
from turntaker_models.cascade.llm_service import LlmService
from turntaker_models.cascade.prefix_cache import PrefixCache
from turntaker_models.cascade.spoken import NO_REPEAT_NGRAM
from turntaker_models.contract import (
    AudioPart,
    ContractError,
    Conversation,
    GenerationParameters,
    ImagePart,
    Message,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    ToolSpec,
    decode_tool_call,
    encode,
)
from turntaker_models.settings import ModelSettings
from turntaker_models.triton_adapter import text_tensor

QUESTION = Conversation([Message("user", [TextPart("What is the capital of France?")])])


@pytest.fixture(scope="module")
def loaded() -> smollm.SmolLM:
    # The shared cache: converted once (about 20 s) and reused by every later run.
    return smollm.load(ModelSettings.from_env().cache_dir)


@pytest.fixture(scope="module")
def decoder(loaded: smollm.SmolLM) -> Decoder:
    return Decoder(loaded.model, loaded.tokenizer, threads=1)


def test_default_system_prompt_only_when_missing() -> None:
    assert render_messages(QUESTION)[0] == {"role": "system", "content": DEFAULT_SYSTEM_PROMPT}
    own = Conversation([Message("system", [TextPart("Be terse.")]), *QUESTION.messages])
    assert render_messages(own)[0] == {"role": "system", "content": "Be terse."}


def test_parts_become_text() -> None:
    conversation = Conversation(
        [
            Message("user", [AudioPart(0), TextPart("and")]),
            Message("assistant", []),
            Message("user", [AudioPart(1, transcript="known"), ImagePart("data:,")]),
            Message("assistant", [TextPart("Sure.")]),
            Message("user", [AudioPart(2)]),
        ]
    )
    messages = render_messages(conversation, ["hello there", ""])
    assert messages[1:] == [
        {"role": "user", "content": "hello there\nand"},
        # The empty assistant boundary (an answer the user never heard) is dropped.
        {"role": "user", "content": f"known\n{IMAGE_PLACEHOLDER}"},
        {"role": "assistant", "content": "Sure."},
        {"role": "user", "content": UNHEARD_AUDIO},
    ]


def test_a_conversation_without_a_user_is_refused() -> None:
    with pytest.raises(ContractError, match="no user message"):
        render_messages(Conversation([Message("system", [TextPart("Hi")])]))


def cut(pieces: list[str]) -> list[str]:
    cutter = SentenceCutter()
    sentences = [s for piece in pieces for s in cutter.feed(piece)]
    rest = cutter.flush()
    return [*sentences, rest] if rest else sentences


def test_sentences_end_at_punctuation_and_space_or_newline() -> None:
    text = "It costs 3.5 euros. Really?! Yes\nand no... Maybe"
    assert cut(list(text)) == ["It costs 3.5 euros.", "Really?!", "Yes", "and no...", "Maybe"]
    assert cut([text]) == cut(list(text))
    # A full stop at the very end of the stream is only known to end a sentence at the flush.
    assert cut(["Paris", "."]) == ["Paris."]


def test_the_first_clause_goes_alone_then_whole_sentences() -> None:
    cutter = SentenceCutter(first_clause=True)
    text = "Well, the capital is Paris, in France. It is big, and old. Yes"
    out = [s for ch in text for s in cutter.feed(ch)]
    assert [*out, cutter.flush()] == [
        "Well,",
        "the capital is Paris, in France.",
        "It is big, and old.",
        "Yes",
    ]
    # A comma inside a number is no clause end; a sentence before any comma is the first piece.
    cutter = SentenceCutter(first_clause=True)
    assert cutter.feed("It costs 1,000 euros. Then, more. ") == [
        "It costs 1,000 euros.",
        "Then, more.",
    ]


def test_a_long_first_clause_goes_after_its_first_six_words() -> None:
    """The first piece ends at its sixth word when no clause mark came first (SmolLM2's long
    first sentences held the first audio back for every token); then whole sentences."""
    cutter = SentenceCutter(first_clause=True)
    text = 'This message should be saved to the folder named "Inbox". It is there.'
    out = [s for ch in text for s in cutter.feed(ch)]
    assert [*out, cutter.flush()] == [
        "This message should be saved to",
        'the folder named "Inbox".',
        "It is there.",
    ]
    # Six words or fewer with a clause mark: the mark still ends it.
    cutter = SentenceCutter(first_clause=True)
    assert cutter.feed("The capital of France is Paris. Yes ") == [
        "The capital of France is Paris.",
    ]


@pytest.mark.parametrize("step", [1, 2, 3, 7])
def test_sentences_add_up_to_the_text(step: int) -> None:
    text = "Hello there.  How are you?\n\nI am fine! Thanks. e.g. this, and that"
    pieces = [text[i : i + step] for i in range(0, len(text), step)]
    assert re.sub(r"\s+", "", "".join(cut(pieces))) == re.sub(r"\s+", "", text)


def test_detokenizer_never_splits_characters(loaded: smollm.SmolLM) -> None:
    tokenizer = loaded.tokenizer
    text = " Héllo  wörld 😀👏 — naïve café, 東京.\nNew line"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    detok = Detokenizer(tokenizer)
    deltas = [detok.add(i, final=False) for i in ids]
    deltas.append(detok.flush())
    assert "".join(deltas) == text
    assert not any("\ufffd" in d for d in deltas)
    # Emoji take several byte tokens each: some pushes must have held their bytes back.
    assert "" in deltas[:-1]


def steps(decoder: Decoder, params: GenerationParameters, stop: Any = None) -> Iterator[Any]:
    return decoder.generate(QUESTION, [], params, stop or (lambda: False))


def test_the_prefix_cache_prefills_only_the_new_part_and_says_the_same(
    loaded: smollm.SmolLM, decoder: Decoder
) -> None:
    cached = Decoder(loaded.model, loaded.tokenizer, threads=1, prefixes=PrefixCache())
    params = GenerationParameters(max_tokens=24)
    history: list[Message] = []
    for turn, question in enumerate(["What is the capital of France?", "And of Germany?"]):
        conversation = Conversation([*history, Message("user", [TextPart(question)])])
        plain_stats, cached_stats = GenerationStats(), GenerationStats()
        plain = "".join(
            s.text for s in decoder.generate(conversation, [], params, lambda: False, plain_stats)
        )
        reused = "".join(
            s.text for s in cached.generate(conversation, [], params, lambda: False, cached_stats)
        )
        assert reused == plain
        assert plain_stats.reused_tokens == 0
        if turn:
            # The last turn's prompt and answer, all but the newest user turn's tokens.
            assert cached_stats.reused_tokens >= plain_stats.prompt_tokens // 2, cached_stats
        history += [Message("user", [TextPart(question)]), Message("assistant", [TextPart(plain)])]
    # A cancelled generation leaves nothing behind: the cache may hold only whole ones.
    kept = len(cached.prefixes or [])
    stop = iter([False, True])
    list(cached.generate(QUESTION, [], params, lambda: next(stop, True)))
    assert len(cached.prefixes or []) == kept


def test_greedy_decoding_is_deterministic_and_streams(decoder: Decoder) -> None:
    params = GenerationParameters(max_tokens=24)
    stats = GenerationStats()
    first = list(decoder.generate(QUESTION, [], params, lambda: False, stats))
    second = list(steps(decoder, params))
    text = "".join(s.text for s in first)
    assert text == "".join(s.text for s in second)
    assert len(first) >= 3 and "Paris" in text, text
    assert stats.finish_reason in {"stop", "length"} and 0 < stats.new_tokens <= 24
    assert stats.tokens_per_s > 1, stats
    sentences = [s.sentence for s in first if s.sentence]
    assert re.sub(r"\s+", "", "".join(sentences)) == re.sub(r"\s+", "", text)


def test_max_tokens_is_respected(decoder: Decoder) -> None:
    stats = GenerationStats()
    list(decoder.generate(QUESTION, [], GenerationParameters(max_tokens=3), lambda: False, stats))
    assert stats.new_tokens <= 3 and stats.finish_reason in {"stop", "length"}


def test_sampling_is_seeded(decoder: Decoder) -> None:
    def sample(seed: int) -> str:
        params = GenerationParameters(max_tokens=12, temperature=1.0, top_p=0.9, seed=seed)
        return "".join(s.text for s in steps(decoder, params))

    assert sample(5) == sample(5)
    assert len({sample(s) for s in (5, 6, 7, 8)}) > 1


def test_stop_is_checked_before_every_step(decoder: Decoder) -> None:
    calls = 0

    def stop_after_four() -> bool:
        nonlocal calls
        calls += 1
        return calls > 4

    stats = GenerationStats()
    params = GenerationParameters(max_tokens=100)
    out = list(decoder.generate(QUESTION, [], params, stop_after_four, stats))
    assert stats.finish_reason == "cancelled"
    # Four forward passes: the prefill and three decode steps, each giving at most one delta.
    assert calls == 5 and len(out) <= 4
    assert not any(s.sentence for s in out[3:])


WEATHER = ToolSpec(
    "get_weather",
    "Get the current weather in a city.",
    {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
)


def test_tools_go_into_the_system_message_unless_the_choice_is_none(decoder: Decoder) -> None:
    own = Conversation([Message("system", [TextPart("Be terse.")]), *QUESTION.messages])
    system = render_messages(own, tools=[WEATHER])[0]["content"]
    assert system.startswith("Be terse.\n\n# Tools") and '"get_weather"' in system
    assert render_messages(QUESTION, tools=[WEATHER])[0]["content"].startswith(
        DEFAULT_SYSTEM_PROMPT
    )
    offered = GenerationParameters(tools=[WEATHER])
    refused = GenerationParameters(tools=[WEATHER], tool_choice="none")
    text = decoder.tokenizer.decode
    assert "<tools>" in text(decoder.prompt_ids(QUESTION, [], offered))
    assert "<tools>" not in text(decoder.prompt_ids(QUESTION, [], refused))


def test_earlier_calls_render_the_hermes_way_and_their_results_in_words() -> None:
    conversation = Conversation(
        [
            Message("user", [TextPart("Weather in Oslo and Rome?")]),
            Message(
                "assistant",
                [
                    TextPart("Let me look."),
                    ToolCallPart("call_1", "get_weather", '{"city": "Oslo"}'),
                ],
            ),
            Message("tool", [ToolResultPart("call_1", "rain")]),
            Message("tool", [ToolResultPart("call_2", "sun")]),
            Message("user", [TextPart("Thanks")]),
        ]
    )
    messages = render_messages(conversation, tools=[WEATHER])
    assert messages[2] == {
        "role": "assistant",
        "content": 'Let me look.\n<tool_call>\n{"name": "get_weather", "arguments": '
        '{"city": "Oslo"}}\n</tool_call>',
    }
    # Consecutive tool results share one user message, each in words naming its function
    # (a result whose call is not in the history names none).
    assert messages[3] == {
        "role": "user",
        "content": "The get_weather tool returned: rain\nThe function tool returned: sun",
    }
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user", "user"]


def test_auto_answers_without_a_call_when_no_tool_is_needed(decoder: Decoder) -> None:
    params = GenerationParameters(tools=[WEATHER], tool_choice="auto", max_tokens=24)
    stats = GenerationStats()
    out = list(decoder.generate(QUESTION, [], params, lambda: False, stats))
    assert not any(s.tool_call for s in out) and stats.tool_call == ""
    text = "".join(s.text for s in out)
    assert "Paris" in text and "<tool" not in text, text


class Recorder:
    """A `Reply` that keeps what the service sent."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.failed: list[str] = []
        self.closed = False

    def send(self, outputs: Mapping[str, Any], final: bool = False) -> None:
        self.sent.append({k: v.reshape(-1)[0] for k, v in outputs.items()})

    def close(self) -> None:
        self.closed = True

    def fail(self, message: str) -> None:
        self.failed.append(message)

    def is_cancelled(self) -> bool:
        return False


class Log:
    def log_info(self, message: str) -> None: ...

    def log_warn(self, message: str) -> None: ...

    def log_verbose(self, message: str) -> None: ...


def request(request_id: str, params: GenerationParameters) -> dict[str, Any]:
    return {
        "REQUEST_ID": text_tensor(request_id),
        "CONVERSATION": text_tensor(encode(Conversation([Message("user", [TextPart("Oslo?")])]))),
        "PARAMETERS": text_tensor(encode(params)),
    }


def test_service_sends_a_call_only_in_tool_call_and_never_to_tts(
    decoder: Decoder, tmp_path: Path
) -> None:
    service = LlmService(decoder, CancelBoard.open(tmp_path / "board"), Log(), workers=0)
    reply = Recorder()
    params = GenerationParameters(
        tools=[WEATHER], tool_choice="function", tool_name="get_weather", max_tokens=48
    )
    service.serve(request("r1", params), reply)
    service.close()
    assert reply.closed and not reply.failed
    assert all({"TEXT_DELTA", "SENTENCE", "TOOL_CALL"} <= set(sent) for sent in reply.sent)
    calls = [decode_tool_call(sent["TOOL_CALL"]) for sent in reply.sent]
    deltas = [c for c in calls if c is not None]
    assert deltas[0].name == "get_weather" and all(not d.name for d in deltas[1:])
    assert json.loads("".join(d.arguments for d in deltas))["city"]
    for sent, call in zip(reply.sent, calls, strict=True):
        if call is not None:
            assert sent["TEXT_DELTA"] == b"" and sent["SENTENCE"] == b""


def test_service_stops_a_constrained_call_on_the_cancel_board(
    decoder: Decoder, tmp_path: Path
) -> None:
    board = CancelBoard.open(tmp_path / "board")
    service = LlmService(decoder, board, Log(), workers=0)
    board.cancel("r2")
    reply = Recorder()
    params = GenerationParameters(tools=[WEATHER], tool_choice="required", max_tokens=48)
    service.serve(request("r2", params), reply)
    # Stopped before the first forward pass: not even the grammar's forced start came out.
    assert [s.stage for s in board.stops("r2")] == ["llm"] and reply.closed
    assert reply.sent == [] and not reply.failed
    service.close()


# Nothing of the chat template is spoken: SmolLM2 echoes its prompt's markup as plain text.
TEMPLATE_TEXT = ("<tool_response>", "</tool_response>", "<tool_call>", "</tool_call>", "<|")


class ScriptedModel:
    """A stand-in for the model whose greedy choice is the next token of a script, so that the
    real decode loop (stop tokens, detokenizer, stream, sentences) runs on chosen tokens."""

    def __init__(self, script: list[int], vocab: int, config: Any) -> None:
        self.script = script
        self.vocab = vocab
        self.config = config
        self.calls = 0

    def __call__(self, input_ids: Any, cache: Any, use_cache: bool) -> Any:
        import torch

        logits = torch.zeros(1, input_ids.shape[1], self.vocab)
        logits[0, -1, self.script[min(self.calls, len(self.script) - 1)]] = 1.0
        self.calls += 1
        return type("Out", (), {"logits": logits})()


def scripted(loaded: smollm.SmolLM, pieces: list[str]) -> Decoder:
    """A Decoder whose model picks `pieces` in order: text (tokenized) or a special token."""
    tokenizer = loaded.tokenizer
    script: list[int] = []
    for piece in pieces:
        if piece in tokenizer.added_tokens_encoder:
            script.append(tokenizer.convert_tokens_to_ids(piece))
        else:
            script += tokenizer(piece, add_special_tokens=False)["input_ids"]
    model = ScriptedModel(script, len(tokenizer), loaded.model.config)
    return Decoder(model, tokenizer, threads=1)


@pytest.mark.parametrize(
    ("pieces", "said", "sentences"),
    [
        # Greedy SmolLM2's own answer to a tool result (see the test below): the echoed
        # block is dropped.
        (
            ["That's correct.\n<tool_response>\nIt is 18 degrees.\n</tool_response>"],
            "That's correct.\n",
            ["That's correct."],
        ),
        # It opened the tag and answered inside it: the answer is spoken, at the end.
        (
            ["<tool_response>\nThe weather is nice today."],
            "\nThe weather is nice today.",
            ["The weather is nice today."],
        ),
        (["Twenty.\n</tool_response> Bye."], "Twenty.\n Bye.", ["Twenty.", "Bye."]),
        # A special token is never text; a new turn ends the answer before its header.
        (["Sure", "<file_sep>", ".", "<|im_start|>", "assistant\nMore."], "Sure.", ["Sure."]),
        (["Yes.", "<|endoftext|>", "Other text."], "Yes.", ["Yes."]),
    ],
)
def test_the_decode_loop_never_speaks_template_text(
    loaded: smollm.SmolLM, pieces: list[str], said: str, sentences: list[str]
) -> None:
    decoder = scripted(loaded, [*pieces, "<|im_end|>"])
    stats = GenerationStats()
    params = GenerationParameters(max_tokens=64)
    out = list(decoder.generate(QUESTION, [], params, lambda: False, stats))
    text = "".join(s.text for s in out)
    assert text == said
    assert not any(marker in text for marker in TEMPLATE_TEXT)
    assert stats.sentences == sentences == [s.sentence for s in out if s.sentence]
    assert stats.finish_reason == "stop"


def test_stop_tokens_are_the_turn_tokens(decoder: Decoder) -> None:
    ids = decoder.tokenizer.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>", "<|im_start|>"])
    assert set(ids) <= decoder.stop_ids


def test_smollm_answers_a_tool_result_in_words_with_no_template_text(
    loaded: smollm.SmolLM, decoder: Decoder
) -> None:
    """The bug, on the real model: told a tool's result in Hermes' `<tool_response>` block with
    the tools in its system prompt, greedy SmolLM2 only echoed the block (nothing to speak once
    the block is dropped). Told the result in words, tools not shown under "auto", it answers;
    and what the decode loop gives holds no template text."""
    from tests.tool_specs import WEATHER as SPEC

    conversation = tool_result_conversation()
    params = GenerationParameters(max_tokens=40, tools=[SPEC])
    prompt = loaded.tokenizer.decode(decoder.prompt_ids(conversation, [], params))
    assert "<tool_response>" not in prompt and "# Tools" not in prompt, prompt
    out = list(decoder.generate(conversation, [], params, lambda: False))
    text = "".join(s.text for s in out)
    assert not any(marker in text for marker in TEMPLATE_TEXT), text
    assert not any(marker in s.sentence for s in out for marker in TEMPLATE_TEXT)
    assert "Paris" in text, text


def tool_result_conversation() -> Conversation:
    """A call and its result in the history (the cascade test on Triton sends the same)."""
    return Conversation(
        [
            Message("user", [TextPart("What is the weather like in Paris today?")]),
            Message("assistant", [ToolCallPart("call_1", "get_weather", '{"city": "Paris"}')]),
            Message("tool", [ToolResultPart("call_1", "It is 18 degrees and raining in Paris.")]),
        ]
    )


def test_a_system_message_mid_conversation_stays_where_it_stands() -> None:
    # OpenAI clients add system items at any point (docs/protocol.md "Client events").
    later = Message("system", [TextPart("From now on, answer in French.")])
    conversation = Conversation([*QUESTION.messages, Message("assistant", [TextPart("Paris.")])])
    messages = render_messages(Conversation([*conversation.messages, later, *QUESTION.messages]))
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "system", "user"]
    assert messages[0]["content"] == DEFAULT_SYSTEM_PROMPT
    assert messages[3]["content"] == "From now on, answer in French."


def test_an_answer_repeats_no_run_of_tokens(decoder: Decoder) -> None:
    """spoken.py: greedy SmolLM2 loops on this question (a 10-token run said twice without
    the ban); with it no run of NO_REPEAT_NGRAM tokens comes back, and no sentence repeats."""
    sea = Conversation([Message("user", [TextPart("Tell me about the sea.")])])
    stats = GenerationStats()
    text = "".join(
        s.text
        for s in decoder.generate(
            sea, [], GenerationParameters(max_tokens=120), lambda: False, stats
        )
    )
    tokens = decoder.tokenizer(text, add_special_tokens=False)["input_ids"]
    runs = [
        tuple(tokens[i : i + NO_REPEAT_NGRAM]) for i in range(len(tokens) - NO_REPEAT_NGRAM + 1)
    ]
    assert len(runs) == len(set(runs)), text
    assert len(stats.sentences) == len(set(stats.sentences))


@pytest.mark.parametrize(("max_tokens", "reason"), [(3, b"max_output_tokens"), (64, b"")])
def test_service_ends_an_answer_max_tokens_cut_with_its_end_reason_alone_after_its_text(
    loaded: smollm.SmolLM, tmp_path: Path, max_tokens: int, reason: bytes
) -> None:
    # Was: a generation max_tokens ended ("length") looked like one the model ended, and the
    # response said `completed`. Now one last response says why (END_REASON), after the text.
    decoder = scripted(loaded, ["Hello there, how are you today?", "<|im_end|>"])
    service = LlmService(decoder, CancelBoard.open(tmp_path / "board"), Log(), workers=0)
    reply = Recorder()
    service.serve(request("r3", GenerationParameters(max_tokens=max_tokens)), reply)
    service.close()
    assert reply.closed and not reply.failed
    reasons = [sent["END_REASON"] for sent in reply.sent]
    if not reason:
        assert not any(reasons), "the model ended it: no end reason"
        return
    *before, last = reply.sent
    assert last["END_REASON"] == reason, "the last response says why"
    assert (last["TEXT_DELTA"], last["SENTENCE"], last["TOOL_CALL"]) == (b"", b"", b"")
    assert not any(sent["END_REASON"] for sent in before)
    assert b"".join(sent["TEXT_DELTA"] for sent in before), "its text came before it"

"""The `llm` decoding without a server: prompts, sentences, detokenising, the decode loop."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from turntaker_models import smollm
from turntaker_models.contract import (
    AudioPart,
    ContractError,
    Conversation,
    GenerationParameters,
    ImagePart,
    Message,
    TextPart,
)
from turntaker_models.llm import (
    DEFAULT_SYSTEM_PROMPT,
    IMAGE_PLACEHOLDER,
    UNHEARD_AUDIO,
    Decoder,
    GenerationStats,
    IncrementalDetokenizer,
    SentenceCutter,
    render_messages,
)
from turntaker_models.settings import ModelSettings

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


@pytest.mark.parametrize("step", [1, 2, 3, 7])
def test_sentences_add_up_to_the_text(step: int) -> None:
    text = "Hello there.  How are you?\n\nI am fine! Thanks. e.g. this, and that"
    pieces = [text[i : i + step] for i in range(0, len(text), step)]
    assert re.sub(r"\s+", "", "".join(cut(pieces))) == re.sub(r"\s+", "", text)


def test_detokenizer_never_splits_characters(loaded: smollm.SmolLM) -> None:
    tokenizer = loaded.tokenizer
    text = " Héllo  wörld 😀👏 — naïve café, 東京.\nNew line"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    detok = IncrementalDetokenizer(tokenizer)
    deltas = [detok.push(i) for i in ids]
    deltas.append(detok.finish())
    assert "".join(deltas) == text
    assert not any("\ufffd" in d for d in deltas)
    # Emoji take several byte tokens each: some pushes must have held their bytes back.
    assert "" in deltas[:-1]


def steps(decoder: Decoder, params: GenerationParameters, stop: Any = None) -> Iterator[Any]:
    return decoder.generate(QUESTION, [], params, stop or (lambda: False))


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

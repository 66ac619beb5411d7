"""The `llm` step: a contract `Conversation` in, text deltas and whole sentences out.

Decoding is a hand-written loop over the model's forward pass with a KV cache rather than
`generate()`, because the caller must be able to stop it before every single step (a barge-in
reaches this stage only through the cancel board, checked once per token).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

from turntaker_models.contract import (
    AudioPart,
    ContractError,
    Conversation,
    GenerationParameters,
    ImagePart,
    TextPart,
)

DEFAULT_SYSTEM_PROMPT = (
    "You are a helpful voice assistant. Your answers are spoken aloud, so answer briefly in "
    "plain spoken sentences, without lists, markdown or emojis."
)
IMAGE_PLACEHOLDER = "[image]"
# An audio part with neither a TRANSCRIPTS entry nor a transcript: the model should know the
# user said something it could not make out, not see the part vanish.
UNHEARD_AUDIO = "[inaudible]"
STOP_TOKENS = ("<|im_end|>", "<|endoftext|>")
# A sentence ends at . ! or ? (runs of them too) followed by whitespace, or at a newline.
_SENTENCE_END = re.compile(r"[.!?]+(?=\s)|\n")


def render_messages(
    conversation: Conversation, transcripts: Sequence[str] = ()
) -> list[dict[str, str]]:
    """The conversation as chat-template messages, with a default system prompt if it has none."""
    messages: list[dict[str, str]] = []
    for message in conversation.messages:
        if message.role == "assistant" and not message.content:
            # The boundary of a turn the user never heard (cut off by a barge-in before any of
            # it was played). Dropped rather than kept as an empty assistant turn: the user never
            # heard a reply, so none belongs in the history, and a 135M model shown an empty
            # assistant turn readily imitates it by answering with <|im_end|> straight away.
            continue
        pieces: list[str] = []
        for part in message.content:
            if isinstance(part, TextPart):
                pieces.append(part.text)
            elif isinstance(part, AudioPart):
                heard = transcripts[part.audio] if 0 <= part.audio < len(transcripts) else ""
                pieces.append(heard.strip() or (part.transcript or "").strip() or UNHEARD_AUDIO)
            elif isinstance(part, ImagePart):
                pieces.append(IMAGE_PLACEHOLDER)
        messages.append({"role": message.role, "content": "\n".join(pieces)})
    if not any(m["role"] == "user" for m in messages):
        raise ContractError("CONVERSATION has no user message to answer")
    if messages[0]["role"] != "system":
        messages.insert(0, {"role": "system", "content": DEFAULT_SYSTEM_PROMPT})
    return messages


class SentenceCutter:
    """Cuts streamed text into sentences for TTS, as soon as each one is known to be over.

    A full stop only ends a sentence once the next character is seen to be whitespace, so
    "3.5" and "e.g." in the middle of a word stay whole.
    """

    def __init__(self) -> None:
        self._pending = ""

    def feed(self, delta: str) -> list[str]:
        self._pending += delta
        sentences: list[str] = []
        while match := _SENTENCE_END.search(self._pending):
            sentence = self._pending[: match.end()].strip()
            self._pending = self._pending[match.end() :]
            if sentence:
                sentences.append(sentence)
        return sentences

    def flush(self) -> str:
        rest, self._pending = self._pending.strip(), ""
        return rest


class IncrementalDetokenizer:
    """Text deltas from a growing token list: no split UTF-8 characters, spaces kept.

    Byte-level BPE can split one character over several tokens; decoding such a prefix yields
    U+FFFD at the end, so that tail is held back until the character completes. Re-decoding the
    whole answer each step costs microseconds at our lengths and keeps spacing exactly as the
    full decode has it.
    """

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer
        self._ids: list[int] = []
        self._emitted = ""

    def _decode(self) -> str:
        text: str = self._tokenizer.decode(
            self._ids, skip_special_tokens=True, clean_up_tokenization_spaces=False
        )
        return text

    def push(self, token_id: int) -> str:
        self._ids.append(token_id)
        text = self._decode().rstrip("\ufffd")
        if not text.startswith(self._emitted):
            # Never seen with byte-level BPE; wait for the end rather than emit a wrong diff.
            return ""
        delta = text[len(self._emitted) :]
        self._emitted = text
        return delta

    def finish(self) -> str:
        text = self._decode()
        delta = text[len(self._emitted) :] if text.startswith(self._emitted) else ""
        self._emitted = text
        return delta


@dataclass(frozen=True)
class Step:
    """One streamed piece of the answer: a text delta and the sentence it completed, if any."""

    text: str
    sentence: str = ""


@dataclass
class GenerationStats:
    prompt_tokens: int = 0
    new_tokens: int = 0
    prefill_s: float = 0.0
    # Forward passes after the prefill, one token each, and the time they took.
    decode_steps: int = 0
    decode_s: float = 0.0
    # "stop" (end of turn), "length" (max_tokens) or "cancelled".
    finish_reason: str = ""
    sentences: list[str] = field(default_factory=list)

    @property
    def tokens_per_s(self) -> float:
        return self.decode_steps / self.decode_s if self.decode_s > 0 else 0.0


class Decoder:
    """Greedy or sampled decoding of one model, shared by every generation of a process.

    The model's weights are only read, so concurrent generations on several threads are safe;
    each generation owns its KV cache.
    """

    def __init__(self, model: Any, tokenizer: Any, threads: int) -> None:
        import torch

        torch.set_num_threads(threads)
        self._torch = torch
        self.model = model
        self.tokenizer = tokenizer
        ids = {tokenizer.convert_tokens_to_ids(t) for t in STOP_TOKENS}
        ids.add(tokenizer.eos_token_id)
        eos = model.config.eos_token_id
        ids.update(eos if isinstance(eos, list) else [eos])
        unknown = tokenizer.unk_token_id
        self.stop_ids = frozenset(i for i in ids if isinstance(i, int) and i != unknown)
        self.context = int(model.config.max_position_embeddings)

    def prompt_ids(self, conversation: Conversation, transcripts: Sequence[str] = ()) -> list[int]:
        text = self.tokenizer.apply_chat_template(
            render_messages(conversation, transcripts), tokenize=False, add_generation_prompt=True
        )
        # The template already wrote every special token; add_special_tokens would double them.
        ids: list[int] = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return ids

    def generate(
        self,
        conversation: Conversation,
        transcripts: Sequence[str],
        params: GenerationParameters,
        should_stop: Callable[[], bool],
        stats: GenerationStats | None = None,
    ) -> Generator[Step, None, None]:
        """Steps of the answer; `should_stop` is asked before every forward pass.

        When it says stop, the generator ends at once with finish_reason "cancelled" and
        drops its KV cache; nothing more is yielded (not even the unfinished sentence).
        """
        torch = self._torch
        stats = stats if stats is not None else GenerationStats()
        prompt = self.prompt_ids(conversation, transcripts)
        stats.prompt_tokens = len(prompt)
        if len(prompt) >= self.context:
            raise ContractError(
                f"CONVERSATION is {len(prompt)} tokens; the model reads at most {self.context}"
            )
        budget = min(params.max_tokens, self.context - len(prompt))
        generator = torch.Generator().manual_seed(params.seed)
        detok = IncrementalDetokenizer(self.tokenizer)
        cutter = SentenceCutter()
        from transformers import DynamicCache

        cache: Any = DynamicCache()
        out: Any = None
        inputs = torch.tensor([prompt], dtype=torch.long)
        stats.finish_reason = "length"
        try:
            with torch.inference_mode():
                for index in range(budget):
                    if should_stop():
                        stats.finish_reason = "cancelled"
                        return
                    began = time.perf_counter()
                    # The cache object is filled in place; it grows by one position per step.
                    out = self.model(input_ids=inputs, cache=cache, use_cache=True)
                    token = self._pick(out.logits[0, -1], params, generator)
                    elapsed = time.perf_counter() - began
                    if index == 0:
                        stats.prefill_s = elapsed
                    else:
                        # Per-token speed is the decode steps only; the prefill is one big step.
                        stats.decode_steps += 1
                        stats.decode_s += elapsed
                    if token in self.stop_ids:
                        stats.finish_reason = "stop"
                        break
                    stats.new_tokens += 1
                    delta = detok.push(token)
                    if delta:
                        sentences = cutter.feed(delta)
                        stats.sentences.extend(sentences)
                        yield Step(delta, " ".join(sentences))
                    inputs = torch.tensor([[token]], dtype=torch.long)
            tail = detok.finish()
            sentences = cutter.feed(tail) if tail else []
            rest = cutter.flush()
            if rest:
                sentences.append(rest)
            stats.sentences.extend(sentences)
            if tail or sentences:
                yield Step(tail, " ".join(sentences))
        finally:
            # A cancelled generation frees its cache now, not when the generator is collected.
            cache = out = None

    def _pick(self, logits: Any, params: GenerationParameters, generator: Any) -> int:
        torch = self._torch
        if params.temperature == 0:
            return int(torch.argmax(logits).item())
        probs = torch.softmax(logits.float() / params.temperature, dim=-1)
        if params.top_p < 1.0:
            sorted_probs, order = torch.sort(probs, descending=True)
            # Keep the smallest set whose mass reaches top_p (always at least the top token).
            keep = torch.cumsum(sorted_probs, dim=-1) - sorted_probs < params.top_p
            sorted_probs = torch.where(keep, sorted_probs, torch.zeros_like(sorted_probs))
            choice = torch.multinomial(sorted_probs, 1, generator=generator)
            return int(order[choice].item())
        return int(torch.multinomial(probs, 1, generator=generator).item())

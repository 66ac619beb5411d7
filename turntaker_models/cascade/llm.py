"""The `llm` step: a contract `Conversation` in, text deltas, whole sentences and the pieces of
a function call out.

Decoding is a hand-written loop over the model's forward pass with a KV cache rather than
`generate()`, because the caller must be able to stop it before every single step (a barge-in
reaches this stage only through the cancel board, checked before every forward pass).

Function calling (contract `GenerationParameters.tools`), in the Qwen/Hermes format of
turntaker_models/tool_calls.py:
- SmolLM2's ChatML template knows no tools: the tools shown (`prompt_tools`: answers.py rule
  1, hiding them under "auto" after a tool's result) go into the system message as signatures
  (`render_tools_system_prompt`). Earlier calls are rendered into their assistant message as
  `<tool_call>` blocks, `tool` messages as a user message of `<tool_response>` blocks (a
  `tool` role would be a role the model never saw).
- Every generation's tokens go through an `Answer` (turntaker_models/answers.py: detokenizing,
  the `ToolCallStream`, the offered functions): a call's text is never spoken nor cut into
  sentences, the text before it is flushed to tts when the call starts, and a call stops the
  generation once its arguments close ("stop"). A call to a function the prompt does not show
  (or any call under "none") is dropped, like a malformed one.
- "required" and "function" decode under a `CallConstraint` (greedy or sampled over the
  masked logits), so the generation is exactly one valid call; the tokens the grammar forces
  (the call's fixed text) are fed to the model several per forward pass without sampling,
  the first ones together with the prompt. The cancel check stays before every forward pass.
- max_tokens still holds: a call it cuts ends with unclosed arguments ("length").

Answers suit speech (spoken.py): markdown symbols and list bullets are dropped from the spoken
text (which is also the text the client gets), and no token may repeat a run of tokens of the
same answer (not under a CallConstraint, nor once a call began: a call's JSON is the grammar's).

Nothing of the chat template is ever spoken or sent as text: the decode skips special tokens,
generation stops at the turn tokens (answers.py `turn_ids`: a `<|im_start|>` would be followed
by a role header, the rest is another turn), and the `ToolCallStream` drops the markup SmolLM2
echoes from its prompt as plain text (`<tool_response>` blocks, stray tags: tool_calls.py).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from turntaker_models.answers import Answer, Said, shown_tools, turn_ids
from turntaker_models.cascade.prefix_cache import PrefixCache
from turntaker_models.cascade.spoken import MarkdownFilter, repeat_bans
from turntaker_models.contract import (
    AudioPart,
    ContractError,
    Conversation,
    GenerationParameters,
    ImagePart,
    Message,
    TextPart,
    ToolCallDelta,
    ToolCallPart,
    ToolResultPart,
    ToolSpec,
)
from turntaker_models.tool_calls import Spoken, render_call, render_tools_system_prompt

if TYPE_CHECKING:
    from turntaker_models.tool_grammar import CallConstraint

DEFAULT_SYSTEM_PROMPT = (
    "You are a helpful voice assistant. Your answers are spoken aloud, so answer briefly in "
    "plain spoken sentences, without lists, markdown or emojis."
)
IMAGE_PLACEHOLDER = "[image]"
# An audio part with neither a TRANSCRIPTS entry nor a transcript: the model should know the
# user said something it could not make out, not see the part vanish.
UNHEARD_AUDIO = "[inaudible]"
# A sentence ends at . ! or ? (runs of them too) followed by whitespace, or at a newline.
_SENTENCE_END = re.compile(r"[.!?]+(?=\s)|\n")
# The first clause of an answer ends at these too (tts cuts its pieces there anyway:
# turntaker_models/cascade/speech.py), so its audio can start before the sentence is written.
_CLAUSE_END = re.compile(r"[.!?]+(?=\s)|[,;:](?=\s)|\n")
# ... or after its first FIRST_PIECE_WORDS words, whichever comes first: SmolLM2 writes ~18
# tokens a second here, and a first sentence such as 'This message should be saved to the
# folder named "Inbox".' would hold the first audio back for its every token. Six words are
# a phrase Piper speaks naturally enough; the next piece follows while it plays.
FIRST_PIECE_WORDS = 6
_FIRST_WORDS_END = re.compile(rf"^\s*(?:\S+\s+){{{FIRST_PIECE_WORDS - 1}}}\S+(?=\s)")


def _part_texts(
    message: Message, transcripts: Sequence[str], names: Mapping[str, str] | None = None
) -> list[str]:
    pieces: list[str] = []
    for part in message.content:
        if isinstance(part, TextPart):
            pieces.append(part.text)
        elif isinstance(part, AudioPart):
            heard = transcripts[part.audio] if 0 <= part.audio < len(transcripts) else ""
            pieces.append(heard.strip() or (part.transcript or "").strip() or UNHEARD_AUDIO)
        elif isinstance(part, ImagePart):
            pieces.append(IMAGE_PLACEHOLDER)
        elif isinstance(part, ToolCallPart):
            pieces.append(render_call(part.name, part.arguments))
        elif isinstance(part, ToolResultPart):
            # In plain words, not Hermes' <tool_response> block: SmolLM2 was never taught that
            # block, and shown one it only echoes it back (nothing left to speak).
            name = (names or {}).get(part.call_id, "function")
            pieces.append(f"The {name} tool returned: {part.output}")
    return pieces


def render_messages(
    conversation: Conversation, transcripts: Sequence[str] = (), tools: Sequence[ToolSpec] = ()
) -> list[dict[str, str]]:
    """The conversation as chat-template messages, with a default system prompt if it has none
    and the signatures of `tools` (if any) at the end of the system message."""
    messages: list[dict[str, str]] = []
    names = {
        part.call_id: part.name
        for message in conversation.messages
        for part in message.content
        if isinstance(part, ToolCallPart)
    }
    # Whether messages[-1] holds tool results.
    results = False
    for message in conversation.messages:
        if message.role == "assistant" and not message.content:
            # The boundary of a turn the user never heard (cut off by a barge-in before any of
            # it was played). Dropped rather than kept as an empty assistant turn: the user never
            # heard a reply, so none belongs in the history, and a 135M model shown an empty
            # assistant turn readily imitates it by answering with <|im_end|> straight away.
            continue
        content = "\n".join(_part_texts(message, transcripts, names))
        if message.role == "tool" and results:
            # Results of consecutive tool messages share one user message, as in Qwen2.5's
            # template.
            messages[-1]["content"] += "\n" + content
            continue
        results = message.role == "tool"
        # Tool results reach the model as the user's words: a `tool` role is one it never saw.
        role = "user" if results else message.role
        messages.append({"role": role, "content": content})
    if not any(m["role"] == "user" for m in messages):
        raise ContractError("CONVERSATION has no user message to answer")
    if messages[0]["role"] != "system":
        messages.insert(0, {"role": "system", "content": DEFAULT_SYSTEM_PROMPT})
    if tools:
        system = messages[0]["content"]
        messages[0]["content"] = f"{system}\n\n{render_tools_system_prompt(tools)}".lstrip()
    return messages


def prompt_tools(params: GenerationParameters, conversation: Conversation) -> list[ToolSpec]:
    """The tools SmolLM2 is shown (answers.py rule 1): none under tool_choice "none", nor under
    "auto" when it answers a tool's result (SmolLM2-135M, shown the tools there, calls the same
    function again or echoes the result, and it never calls on its own under "auto" anyway)."""
    return shown_tools(params, conversation, hide_after_result=True)


class SentenceCutter:
    """Cuts streamed text into sentences for TTS, as soon as each one is known to be over.

    A full stop only ends a sentence once the next character is seen to be whitespace, so
    "3.5" and "e.g." in the middle of a word stay whole. With `first_clause`, the first piece
    ends at a clause mark (, ; :) followed by whitespace too: the time to first audio is the
    first clause's tokens, not the whole first sentence's. tts synthesises a sentence clause by
    clause either way, so the audio is the same.
    """

    def __init__(self, first_clause: bool = False) -> None:
        self._pending = ""
        self._first = first_clause

    def feed(self, delta: str) -> list[str]:
        self._pending += delta
        sentences: list[str] = []
        while (end := self._next_end()) is not None:
            sentence = self._pending[:end].strip()
            self._pending = self._pending[end:]
            if sentence:
                sentences.append(sentence)
                self._first = False
        return sentences

    def _next_end(self) -> int | None:
        """Where the next piece ends in the pending text (None: not known yet)."""
        if not self._first:
            match = _SENTENCE_END.search(self._pending)
            return match.end() if match is not None else None
        ends = [m.end() for m in (_CLAUSE_END.search(self._pending),) if m is not None]
        if (words := _FIRST_WORDS_END.search(self._pending)) is not None:
            ends.append(words.end())
        return min(ends) if ends else None

    def flush(self) -> str:
        rest, self._pending = self._pending.strip(), ""
        return rest


@dataclass(frozen=True)
class Step:
    """One streamed piece of the answer: a text delta and the sentence it completed, if any,
    or the next piece of the model's function call (never spoken)."""

    text: str
    sentence: str = ""
    tool_call: ToolCallDelta | None = None


@dataclass
class GenerationStats:
    prompt_tokens: int = 0
    # Prompt tokens whose keys and values came from the prefix cache (not prefilled).
    reused_tokens: int = 0
    new_tokens: int = 0
    prefill_s: float = 0.0
    # Forward passes after the prefill and the time they took (mask and pick included), and
    # each one's time; a pass may feed several forced tokens.
    decode_steps: int = 0
    decode_s: float = 0.0
    step_s: list[float] = field(default_factory=list)
    # Under a CallConstraint: time in the grammar (masks, accepts, forced tokens), per pass,
    # and the new tokens the grammar forced rather than the model picking them.
    mask_s: list[float] = field(default_factory=list)
    forced_tokens: int = 0
    # "stop" (end of turn, or a call's arguments closed), "length" (max_tokens) or "cancelled".
    finish_reason: str = ""
    sentences: list[str] = field(default_factory=list)
    # The function the model called (its deltas were streamed), or "".
    tool_call: str = ""
    # Seconds from the start of generate() to the first delta of argument text.
    first_arguments_s: float | None = None

    @property
    def tokens_per_s(self) -> float:
        return self.decode_steps / self.decode_s if self.decode_s > 0 else 0.0


class _Steps:
    """An `Answer`'s pieces as Steps: spoken text cut into sentences (what is left of it flushed
    to tts when a call starts, and at the end), a call's deltas apart; kept in the stats too."""

    def __init__(self, answer: Answer, stats: GenerationStats, began: float) -> None:
        self.answer = answer
        self._markdown = MarkdownFilter()
        self._cutter = SentenceCutter(first_clause=True)
        self._stats = stats
        self._began = began
        self._flushed = False
        # Every token of the answer so far, forced ones included.
        self.tokens: list[int] = []

    def push(self, token: int) -> list[Step]:
        self.tokens.append(token)
        return self._steps(self.answer.push(token))

    def finish(self) -> list[Step]:
        return [*self._steps(self.answer.finish()), *self._flush()]

    def _steps(self, said: Said) -> list[Step]:
        steps: list[Step] = []
        for piece in said.pieces:
            if isinstance(piece, Spoken):
                text = self._markdown.feed(piece.text)
                if text:
                    steps.append(self._said(text))
                continue
            if piece.name:
                # The call's first delta: only an offered function's call comes out at all.
                self._stats.tool_call = piece.name
            if piece.arguments and self._stats.first_arguments_s is None:
                self._stats.first_arguments_s = time.perf_counter() - self._began
            steps.append(Step("", tool_call=piece))
        if self.answer.in_call and not self._flushed:
            # The words before a call are all there will be: tts may speak the last of them now.
            self._flushed = True
            return [*self._flush(), *steps]
        return steps

    def _said(self, text: str) -> Step:
        sentences = self._cutter.feed(text)
        self._stats.sentences.extend(sentences)
        return Step(text, " ".join(sentences))

    def _flush(self) -> list[Step]:
        held = self._markdown.flush()
        steps = [self._said(held)] if held else []
        return [*steps, *self._rest()]

    def _rest(self) -> list[Step]:
        rest = self._cutter.flush()
        if not rest:
            return []
        self._stats.sentences.append(rest)
        return [Step("", rest)]


class Decoder:
    """Greedy or sampled decoding of one model, shared by every generation of a process.

    The model's weights are only read, so concurrent generations on several threads are safe;
    each generation owns its KV cache and its grammar matcher. `fast_forward` False feeds the
    grammar's forced tokens one per forward pass like any other (for the benchmark).
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        threads: int,
        fast_forward: bool = True,
        prefixes: PrefixCache | None = None,
    ) -> None:
        import torch

        from turntaker_models.tool_grammar import ll_tokenizer

        torch.set_num_threads(threads)
        self._torch = torch
        self.model = model
        self.tokenizer = tokenizer
        self.fast_forward = fast_forward
        # Built once (~0.3 s); every constrained generation's matcher shares it.
        self.grammar_tokenizer = ll_tokenizer(tokenizer)
        # Only the stop tokens the vocabulary holds: an unknown one converts to the unknown
        # token's id, which may be a stop token itself (SmolLM2's is <|endoftext|>).
        ids: set[Any] = set(turn_ids(tokenizer))
        ids.add(tokenizer.eos_token_id)
        eos = model.config.eos_token_id
        ids.update(eos if isinstance(eos, list) else [eos])
        self.stop_ids = frozenset(i for i in ids if isinstance(i, int))
        self.context = int(model.config.max_position_embeddings)
        # The KV of recent prompts (prefix_cache.py); None: every prompt is prefilled whole.
        self.prefixes = prefixes

    def prompt_ids(
        self,
        conversation: Conversation,
        transcripts: Sequence[str] = (),
        params: GenerationParameters | None = None,
    ) -> list[int]:
        tools = prompt_tools(params, conversation) if params is not None else []
        text = self.tokenizer.apply_chat_template(
            render_messages(conversation, transcripts, tools),
            tokenize=False,
            add_generation_prompt=True,
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
        began = time.perf_counter()
        stats = stats if stats is not None else GenerationStats()
        from turntaker_models.tool_grammar import call_constraint

        constraint = call_constraint(self.grammar_tokenizer, params)
        prompt = self.prompt_ids(conversation, transcripts, params)
        stats.prompt_tokens = len(prompt)
        if len(prompt) >= self.context:
            raise ContractError(
                f"CONVERSATION is {len(prompt)} tokens; the model reads at most {self.context}"
            )
        budget = min(params.max_tokens, self.context - len(prompt))
        generator = torch.Generator().manual_seed(params.seed)
        offered = [t.name for t in prompt_tools(params, conversation)]
        answer = _Steps(Answer(self.tokenizer, offered), stats, began)
        from transformers import DynamicCache

        reused: Any = None
        if self.prefixes is not None:
            reused, stats.reused_tokens = self.prefixes.take(prompt)
        cache: Any = reused if reused is not None else DynamicCache()
        # What the cache holds keys and values of, for the prefix cache.
        fed: list[int] = prompt[: stats.reused_tokens]
        out: Any = None
        # Tokens chosen (forced or picked) but not yet fed to the model.
        fresh = self._forced(constraint, budget, stats)
        feed = prompt[stats.reused_tokens :]
        feed_was_prompt = True
        mask_s = 0.0
        stats.finish_reason = "length"
        try:
            with torch.inference_mode():
                while True:
                    # Before anything more goes out, forced tokens included.
                    if should_stop():
                        stats.finish_reason = "cancelled"
                        return
                    for token in fresh:
                        yield from answer.push(token)
                    stats.new_tokens += len(fresh)
                    if answer.answer.over or (constraint is not None and constraint.done):
                        stats.finish_reason = "stop"
                        break
                    if stats.new_tokens >= budget:
                        break
                    began_step = time.perf_counter()
                    # The cache object is filled in place; it grows by the tokens fed.
                    inputs = torch.tensor([[*feed, *fresh]], dtype=torch.long)
                    out = self.model(input_ids=inputs, cache=cache, use_cache=True)
                    fed += [*feed, *fresh]
                    logits = out.logits[0, -1]
                    if constraint is not None:
                        began_mask = time.perf_counter()
                        constraint.mask_logits(logits)
                        mask_s = time.perf_counter() - began_mask
                    if constraint is None and not answer.answer.in_call:
                        # Spoken text: no loops (spoken.py); a call's JSON is left alone.
                        self._ban(logits, repeat_bans(answer.tokens))
                    token = self._pick(logits, params, generator)
                    fresh, feed = [token], []
                    if constraint is not None and token not in self.stop_ids:
                        began_mask = time.perf_counter()
                        constraint.accept(token)
                        fresh += self._forced(constraint, budget - stats.new_tokens - 1, stats)
                        stats.mask_s.append(mask_s + time.perf_counter() - began_mask)
                    elapsed = time.perf_counter() - began_step
                    if feed_was_prompt:
                        feed_was_prompt = False
                        stats.prefill_s = elapsed
                    else:
                        # Per-token speed is the decode steps only; the prefill is one big step.
                        stats.decode_steps += 1
                        stats.decode_s += elapsed
                        stats.step_s.append(elapsed)
                    if token in self.stop_ids:
                        stats.finish_reason = "stop"
                        break
            if self.prefixes is not None and fed:
                # Ended whole (not cancelled, no error): the cache holds exactly `fed`.
                self.prefixes.put(fed, cache)
            yield from answer.finish()
        finally:
            # A cancelled generation frees its cache now, not when the generator is collected.
            cache = out = None

    def _forced(
        self, constraint: CallConstraint | None, room: int, stats: GenerationStats
    ) -> list[int]:
        """The grammar's forced tokens (accepted), at most `room`; none when not fast-forwarding."""
        if constraint is None or not self.fast_forward or room <= 0:
            return []
        forced = constraint.take_forced()[:room]
        stats.forced_tokens += len(forced)
        return forced

    def _ban(self, logits: Any, tokens: set[int]) -> None:
        """`tokens` never picked (the stop tokens always may be: an answer may always end)."""
        banned = sorted(tokens - self.stop_ids)
        if banned:
            logits[banned] = float("-inf")

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

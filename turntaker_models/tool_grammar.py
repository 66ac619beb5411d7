"""Constrained decoding of one function call: a grammar from the tools' JSON schemas.

`CallConstraint` forces a generation to be exactly one call in the Qwen/Hermes format that
turntaker_models/tool_calls.py reads,

    <tool_call>
    {"name": "<fn>", "arguments": {...}}
    </tool_call>

with `<fn>` one of the allowed functions and `{...}` valid against that function's
`parameters` schema. Its rules:
- The grammar is Lark with each schema embedded as `%json {...}`, compiled by llguidance
  (pinned 1.9.1, one dependency-free wheel). Chosen over xgrammar, which pulls in the OpenAI
  Triton GPU compiler as a hard dependency (a GPU compiler for a CPU-only `llm`), and over
  outlines-core, which turns a schema into one regex and builds its whole token index before
  the first token (its cost grows with the schema, and recursive schemas do not fit a regex)
  and has no grammar language to put the call's fixed text around the schema. llguidance
  computes each mask lazily from a lexer and an Earley parser: ~2 ms to build a matcher here,
  ~0.1 ms per mask (bench/tool_decoding.py).
- A tag the vocabulary holds as one added token (Qwen's `<tool_call>`) is matched as that
  token: llguidance sees added tokens as special ones, never as their text.
- The arguments are compact-but-spaced JSON (", " and ": ", no other whitespace): flexible
  whitespace lets a small model pad with newlines until max_tokens.
- Arguments must be an object: no schema (`{}`) means a function of no arguments (`{}`
  exactly, as OpenAI reads an absent `parameters`), a schema without a type gets
  `"type": "object"`, any other type is refused.
- A schema llguidance cannot compile, a known keyword it does not implement included
  (ignoring one would let arguments through that do not validate; unknown keywords are
  ignored, as JSON Schema says), raises a ContractError (a ValueError) naming the function.
- mask_logits() sets every token the grammar forbids next to -inf in place, tokens past the
  tokenizer's vocabulary included; accept() advances the grammar and raises if the token was
  not allowed. take_forced() accepts and returns the tokens the grammar forces next (the
  call's fixed text), which the caller may feed without sampling. `done` once the call's
  closing tag is in: the caller stops (the grammar then allows only EOS).
- Only "required" (any tool) and "function" (`tool_name`) decode under a constraint
  (`call_constraint`); under "auto" and "none" the model answers freely.
- The llguidance tokenizer takes ~0.3 s to build: build it once (`ll_tokenizer`) and pass it
  instead of the HF tokenizer; a matcher is per generation (not thread-safe).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from types import MappingProxyType
from typing import Any

import llguidance
import llguidance.hf
import torch

from turntaker_models.contract import ContractError, GenerationParameters, ToolSpec
from turntaker_models.tool_calls import CLOSE_TAG, OPEN_TAG

# What llguidance's JSON compiler is told (merged over a schema's own "x-guidance").
_JSON_OPTIONS = MappingProxyType(
    {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
)


def ll_tokenizer(tokenizer: Any) -> llguidance.LLTokenizer:
    """llguidance's view of a HF fast tokenizer (its EOS is the tokenizer's)."""
    return llguidance.hf.from_tokenizer(tokenizer)


def arguments_schema(tool: ToolSpec) -> dict[str, Any]:
    """The schema the arguments are decoded under, with the JSON layout options."""
    # No parameters is a function of no arguments, as in OpenAI's API: exactly `{}`.
    schema: dict[str, Any] = (
        dict(tool.parameters)
        if tool.parameters
        else {"type": "object", "properties": {}, "additionalProperties": False}
    )
    kind = schema.setdefault("type", "object")
    if kind != "object":
        raise ContractError(
            f"tool {tool.name!r}: parameters must describe an object, not type {kind!r}"
        )
    options = schema.get("x-guidance")
    schema["x-guidance"] = {**(options if isinstance(options, dict) else {}), **_JSON_OPTIONS}
    return schema


def _literal(text: str) -> str:
    # A Lark string literal: JSON's escapes are Lark's.
    return json.dumps(text, ensure_ascii=False)


def tag(tokenizer: llguidance.LLTokenizer, text: str) -> str:
    """A call tag in Lark: the special token when the vocabulary has the tag as one (Qwen's
    `<tool_call>` is, and llguidance only matches a special token by its id), else text."""
    ids = tokenizer.tokenize_str(text, parse_special=True)
    if len(ids) == 1 and tokenizer.is_special_token(ids[0]):
        return f"<[{ids[0]}]>"
    return _literal(text)


def call_grammar(
    tools: Sequence[ToolSpec], tags: tuple[str, str] = (_literal(OPEN_TAG), _literal(CLOSE_TAG))
) -> str:
    """The Lark grammar of one call to any of `tools`; `tags` are the Lark of the opening and
    closing tags (see `tag`)."""
    if not tools:
        raise ContractError("a constrained call needs at least one tool")
    choices = []
    rules = []
    for index, tool in enumerate(tools):
        name = _literal(json.dumps(tool.name, ensure_ascii=False) + ', "arguments": ')
        choices.append(f"{name} args{index}")
        rules.append(f"args{index}: %json {json.dumps(arguments_schema(tool))}")
    head = _literal('\n{"name": ')
    tail = _literal("}\n")
    start = f"start: {tags[0]} {head} ({' | '.join(choices)}) {tail} {tags[1]}"
    return "\n".join([start, *rules]) + "\n"


def _check_schemas(tokenizer: llguidance.LLTokenizer, tools: Sequence[ToolSpec]) -> None:
    # Each schema alone, so that the error names the function whose schema is bad.
    for tool in tools:
        grammar = f"start: %json {json.dumps(arguments_schema(tool))}\n"
        error = llguidance.LLMatcher.validate_grammar(grammar, tokenizer)
        if error and not error.startswith("WARNING"):
            # The first line says what; the rest echoes the grammar with a caret under it.
            reason = error.strip().splitlines()[0]
            raise ContractError(f"tool {tool.name!r}: parameters cannot be compiled: {reason}")


class CallConstraint:
    """Forces the generation to be exactly one tool call in the format above, for tool_choice
    "required" (any of `tools`) or "function" (`tool_name`), with `arguments` valid against
    that function's `parameters` schema."""

    def __init__(self, tokenizer: Any, tools: Sequence[ToolSpec], tool_name: str | None) -> None:
        ll = tokenizer if isinstance(tokenizer, llguidance.LLTokenizer) else ll_tokenizer(tokenizer)
        chosen = [tool for tool in tools if tool_name is None or tool.name == tool_name]
        if not chosen:
            names = [tool.name for tool in tools]
            raise ContractError(f"tool_name {tool_name!r} is not one of {names}")
        _check_schemas(ll, chosen)
        self.grammar = call_grammar(chosen, (tag(ll, OPEN_TAG), tag(ll, CLOSE_TAG)))
        self._matcher = llguidance.LLMatcher(ll, self.grammar, log_level=0)
        if self._matcher.is_error():
            raise ContractError(f"tools grammar cannot be compiled: {self._matcher.get_error()}")
        self._vocab = int(ll.vocab_size)
        words = (self._vocab + 31) // 32
        self._bitmask = torch.full((words,), -1, dtype=torch.int32)
        self._shifts = torch.arange(32, dtype=torch.int32)

    @property
    def done(self) -> bool:
        """The grammar is complete: stop (emit EOS)."""
        return bool(self._matcher.is_stopped())

    def mask_logits(self, logits: torch.Tensor) -> None:
        """In place: disallowed next tokens to -inf (1-D or [1, vocab] logits)."""
        row = logits.view(-1) if logits.dim() == 1 or logits.shape[0] == 1 else None
        if row is None:
            raise ValueError(f"logits must be 1-D or [1, vocab], got {tuple(logits.shape)}")
        self._matcher.unsafe_compute_mask_ptr(
            self._bitmask.data_ptr(), self._bitmask.numel() * self._bitmask.element_size()
        )
        if self._matcher.is_error():
            raise RuntimeError(f"tool call grammar: {self._matcher.get_error()}")
        # Bit i of word w allows token 32 * w + i.
        allowed = ((self._bitmask.unsqueeze(1) >> self._shifts) & 1).view(-1)
        size = min(row.shape[0], self._vocab)
        row[:size].masked_fill_(allowed[:size] == 0, float("-inf"))
        # The model's output layer may be padded past the tokenizer: those ids are no tokens.
        row[size:] = float("-inf")

    def accept(self, token_id: int) -> None:
        if not self._matcher.consume_token(token_id):
            raise RuntimeError(
                f"tool call grammar refused token {token_id}: {self._matcher.get_error()}"
            )

    def take_forced(self) -> list[int]:
        """The tokens the grammar forces next (possibly none), already accepted."""
        if self._matcher.is_stopped():
            return []
        tokens = list(self._matcher.compute_ff_tokens())
        if tokens and not self._matcher.consume_tokens(tokens):
            raise RuntimeError(f"tool call grammar: {self._matcher.get_error()}")
        return tokens


def call_constraint(
    grammar_tokenizer: llguidance.LLTokenizer, params: GenerationParameters
) -> CallConstraint | None:
    """The grammar a generation decodes under: the call "required" forces (any tool) or
    "function" (`tool_name`); None when the model may answer freely."""
    if params.tool_choice not in ("required", "function"):
        return None
    name = params.tool_name if params.tool_choice == "function" else None
    return CallConstraint(grammar_tokenizer, params.tools, name)

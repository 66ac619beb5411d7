"""Function calls in a model's streamed text, in the Qwen/Hermes format, and its tools prompt.

A call is written by the model as

    <tool_call>
    {"name": "<fn>", "arguments": {...}}
    </tool_call>

`ToolCallStream` is fed the model's decoded text deltas in order and splits them into what is
spoken (`Spoken`) and the pieces of the call (contract `ToolCallDelta`). Its rules:
- Text before `<tool_call>` is spoken. Text that could still be the start of `<tool_call>`
  (a trailing "<", "<tool", ...) is held back until the next delta decides it, so no part of
  a tag is ever spoken; at close() held-back text that never became a tag is spoken.
- Once `<tool_call>` has been seen (`in_call`) nothing more is ever spoken: at most one call
  per generation, after any spoken text (the pipeline contract).
- The header `{"name": "X", "arguments": ` is read with JSON whitespace allowed between its
  tokens and `X` JSON-decoded. The call's first delta, `ToolCallDelta(name="X",
  arguments="")`, is emitted together with the next one as soon as the arguments' opening
  `{` arrives (one character after the header): a header that does not lead into an object
  is then malformed before anything of the call was emitted.
- After the first delta each delta carries the next raw piece of the arguments' JSON text
  (one per feed at most), up to and including the `}` that closes the arguments object. That
  close is found by brace depth, aware of strings and escapes, so braces, quotes and even
  "</tool_call>" inside argument strings are arguments, not structure. The arguments are not
  otherwise checked to be JSON: a caller must still parse them.
- Then `call_done` is set and everything after (the header's closing `}`, `</tool_call>`,
  any further text or call) is dropped.
- Malformed (a header that is not the format, an empty name, arguments that are not an
  object): nothing of the call is emitted, the rest of the generation is dropped and close()
  emits no call. A call whose arguments never close (the generation was cut) has emitted its
  deltas but never sets `call_done`; close() adds nothing to it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum, auto

from turntaker_models.contract import ToolCallDelta, ToolSpec

OPEN_TAG = "<tool_call>"
CLOSE_TAG = "</tool_call>"
_WHITESPACE = " \t\n\r"
# The header between `<tool_call>` and the arguments, token by token; `None` is the name string.
_HEADER: tuple[str | None, ...] = ("{", '"name"', ":", None, ",", '"arguments"', ":")


@dataclass(frozen=True, slots=True)
class Spoken:
    """Text to speak and show; never any part of a call."""

    text: str


Piece = Spoken | ToolCallDelta


class _State(Enum):
    TEXT = auto()
    HEADER = auto()
    ARGS_START = auto()
    ARGS = auto()
    # After the arguments closed, and after a malformed call: everything is dropped.
    DROP = auto()


class ToolCallStream:
    """Feed it the model's decoded text deltas in order; it returns what is spoken and the
    call's pieces (see the module's rules)."""

    def __init__(self) -> None:
        self._state = _State.TEXT
        self._held = ""
        # Header scan: which _HEADER token, how far into a literal one, the raw name so far.
        self._step = 0
        self._offset = 0
        self._raw_name = ""
        self._escaped = False
        self._name = ""
        # Arguments scan: brace depth outside strings.
        self._depth = 0
        self._in_string = False
        self._in_call = False
        self._done = False

    @property
    def in_call(self) -> bool:
        """A call has started: the caller stops speaking."""
        return self._in_call

    @property
    def call_done(self) -> bool:
        """The arguments object closed (the caller may stop generating)."""
        return self._done

    @property
    def malformed(self) -> bool:
        """The call is not in the format: none of it was emitted, nothing more will be (the
        caller may stop generating too)."""
        return self._in_call and not self._done and self._state is _State.DROP

    def feed(self, delta: str) -> list[Piece]:
        pieces: list[Piece] = []
        if self._state is _State.TEXT:
            delta = self._text(delta, pieces)
        args: list[str] = []
        for char in delta:
            if self._state is _State.DROP:
                break
            if self._state is _State.HEADER:
                self._header_char(char)
            elif self._state is _State.ARGS_START:
                if char in _WHITESPACE:
                    continue
                if char != "{":
                    self._state = _State.DROP
                    break
                pieces.append(ToolCallDelta(arguments="", name=self._name))
                self._state, self._depth = _State.ARGS, 1
                args.append(char)
            else:
                args.append(char)
                if self._args_char(char):
                    self._done, self._state = True, _State.DROP
                    break
        if args:
            pieces.append(ToolCallDelta(arguments="".join(args)))
        return pieces

    def close(self) -> list[Piece]:
        """At the end of the generation: held-back text that never became a tag, if any."""
        held, self._held = self._held, ""
        if self._state is _State.TEXT and held:
            return [Spoken(held)]
        return []

    def _text(self, delta: str, pieces: list[Piece]) -> str:
        """Speaks what is surely text; returns what follows `<tool_call>` ("" if none)."""
        text = self._held + delta
        at = text.find(OPEN_TAG)
        if at >= 0:
            self._held = ""
            if at:
                pieces.append(Spoken(text[:at]))
            self._in_call, self._state = True, _State.HEADER
            return text[at + len(OPEN_TAG) :]
        keep = _tag_prefix_length(text)
        self._held = text[len(text) - keep :] if keep else ""
        if len(text) > keep:
            pieces.append(Spoken(text[: len(text) - keep]))
        return ""

    def _header_char(self, char: str) -> None:
        token = _HEADER[self._step]
        if token is None:
            self._name_char(char)
        elif self._offset == 0 and char in _WHITESPACE:
            pass
        elif char == token[self._offset]:
            self._offset += 1
            if self._offset == len(token):
                self._next_header_token()
        else:
            self._state = _State.DROP

    def _name_char(self, char: str) -> None:
        if not self._raw_name:
            if char not in _WHITESPACE:
                self._raw_name = char
                if char != '"':
                    self._state = _State.DROP
            return
        self._raw_name += char
        if self._escaped:
            self._escaped = False
        elif char == "\\":
            self._escaped = True
        elif char == '"':
            try:
                self._name = json.loads(self._raw_name)
            except json.JSONDecodeError:
                self._name = ""
            if self._name:
                self._next_header_token()
            else:
                self._state = _State.DROP
        elif char < " ":
            # A raw control character is not allowed in a JSON string.
            self._state = _State.DROP

    def _next_header_token(self) -> None:
        self._step, self._offset = self._step + 1, 0
        if self._step == len(_HEADER):
            self._state = _State.ARGS_START

    def _args_char(self, char: str) -> bool:
        """Tracks one argument character; True when it closed the arguments object."""
        if self._in_string:
            if self._escaped:
                self._escaped = False
            elif char == "\\":
                self._escaped = True
            elif char == '"':
                self._in_string = False
        elif char == '"':
            self._in_string = True
        elif char == "{":
            self._depth += 1
        elif char == "}":
            self._depth -= 1
            return self._depth == 0
        return False


def _tag_prefix_length(text: str) -> int:
    """The length of the longest end of `text` that is a proper start of `<tool_call>`."""
    for length in range(min(len(text), len(OPEN_TAG) - 1), 0, -1):
        if text.endswith(OPEN_TAG[:length]):
            return length
    return 0


def render_tools_system_prompt(tools: Sequence[ToolSpec]) -> str:
    """Qwen/Hermes tool instructions, for a system message of a model whose chat template has
    no tools support (SmolLM2): one JSON function signature per line inside <tools>."""
    signatures = "\n".join(
        json.dumps(
            {
                "type": "function",
                "function": {
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.parameters or {"type": "object", "properties": {}},
                },
            },
            ensure_ascii=False,
        )
        for tool in tools
    )
    return (
        "# Tools\n\n"
        "You may call one function to assist with the user query, only when the answer needs "
        "it; otherwise answer normally.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n"
        f"<tools>\n{signatures}\n</tools>\n\n"
        "For a function call, return a json object with function name and arguments within "
        "<tool_call></tool_call> XML tags:\n"
        f'{OPEN_TAG}\n{{"name": <function-name>, "arguments": <args-json-object>}}\n{CLOSE_TAG}'
    )


def render_call(name: str, arguments: str) -> str:
    """An assistant's earlier call, as the model writes one (for the conversation history)."""
    header = f'{{"name": {json.dumps(name, ensure_ascii=False)}, "arguments": '
    return f"{OPEN_TAG}\n{header}{arguments.strip() or '{}'}}}\n{CLOSE_TAG}"

"""Function calls and chat-template markup in a model's streamed text (the Qwen/Hermes format),
and the tools prompt.

A call is written by the model as

    <tool_call>
    {"name": "<fn>", "arguments": {...}}
    </tool_call>

`ToolCallStream` is fed the model's decoded text deltas in order and splits them into what is
spoken (`Spoken`) and the pieces of the call (contract `ToolCallDelta`); everything else is
dropped. Nothing of a chat template is ever spoken: small models echo the markup of their
prompt (told a tool's result, SmolLM2 often repeats it in `<tool_response>` tags; random
weights write any token). Its rules:
- Markup is recognised in the text outside a call (`MARKUP`):
  - `<tool_call>` starts the call (below);
  - a block of a prompt section (`DROPPED_BLOCKS`: `<tool_response>`, `<tools>`, `<think>`)
    is dropped whole, its text included, once its closing tag arrives; the same opening tag
    inside it nests (depth counted), and nothing else in it is markup but a turn marker. All
    of a block is held back until it closes;
  - a block the text ends inside (close(), or a turn marker in it) was no block: a model that
    opens `<tool_response>` and ends its turn inside it was answering (SmolLM2:
    `<tool_response>\\nThe weather in Paris is quite raining.`), so its opening tag is dropped
    alone and the rest is read again as text, spoken at the end (`SPOKEN_IF_UNCLOSED`); an
    unclosed `<think>` (reasoning) or `<tools>` (signatures) is dropped;
  - a closing tag with no block open (`STRAY_TAGS`) is dropped alone;
  - a turn marker (`TURN_MARKERS`: `<|im_start|>`, `<|im_end|>`, `<|endoftext|>`) ends the
    text: it and everything after it are dropped and `ended` is set (the caller stops);
  - any other special token written out as text (`<|name|>`, e.g. `<|vision_start|>`) is
    dropped alone.
  Special tokens the tokenizer knows never get here as text: the callers decode with
  skip_special_tokens and stop at the turn tokens.
- Text before a marker is spoken. Text that could still be the start of a marker (a trailing
  "<", "<tool", "</tool_resp", "<|im_", ...) is held back until later text decides it, so no
  part of a marker is ever spoken; at the end held-back text that never became a marker is
  spoken, unless it starts a closing tag or a `<|name|>` (no speech holds "</" or "<|").
- Markup is read in the text as fed: text on both sides of a dropped marker is not joined
  into a new one ("<tool_" "<|x|>" "call>" speaks "<tool_" and "call>").
- Every `Spoken` piece is one unbroken run of the text fed, `start` its offset in all the
  text fed; `settled` is how much of that text is decided (spoken, a call's or dropped): what
  a caller needs to know which tokens' text was spoken.
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
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum, auto

from turntaker_models.contract import ToolCallDelta, ToolSpec

OPEN_TAG = "<tool_call>"
CLOSE_TAG = "</tool_call>"
RESPONSE_OPEN = "<tool_response>"
RESPONSE_CLOSE = "</tool_response>"
# Prompt sections a model may echo, dropped whole: opening tag -> closing tag.
DROPPED_BLOCKS = {RESPONSE_OPEN: RESPONSE_CLOSE, "<tools>": "</tools>", "<think>": "</think>"}
# The block a model may open and then answer in, never closing it (see the rules).
SPOKEN_IF_UNCLOSED = frozenset({RESPONSE_OPEN})
STRAY_TAGS = (CLOSE_TAG, *DROPPED_BLOCKS.values())
TURN_MARKERS = ("<|im_start|>", "<|im_end|>", "<|endoftext|>")
# A special token written out as text: `<|` a name `|>`.
_NAME_MAX = 32
_SPECIAL = rf"<\|[A-Za-z0-9_]{{1,{_NAME_MAX}}}\|>"
_LITERALS = (OPEN_TAG, *DROPPED_BLOCKS, *STRAY_TAGS)
MARKUP = re.compile("|".join([*map(re.escape, _LITERALS), _SPECIAL]))
# What may still grow into a `<|name|>` (for holding back).
_SPECIAL_START = re.compile(rf"<\|[A-Za-z0-9_]{{0,{_NAME_MAX}}}\|?")
# Inside a dropped block: its own tags (it nests) and the turn markers.
_BLOCK_MARKUP = {
    tag: re.compile("|".join(map(re.escape, (tag, close, *TURN_MARKERS))))
    for tag, close in DROPPED_BLOCKS.items()
}
# The longest text that may be held back: a marker less its last character.
_MAX_HELD = max(*map(len, (*_LITERALS, *TURN_MARKERS)), len("<||>") + _NAME_MAX) - 1
_WHITESPACE = " \t\n\r"
# The header between `<tool_call>` and the arguments, token by token; `None` is the name string.
_HEADER: tuple[str | None, ...] = ("{", '"name"', ":", None, ",", '"arguments"', ":")


@dataclass(frozen=True, slots=True)
class Spoken:
    """Text to speak and show; never any part of a call or of the template. `start`: its
    offset in all the text fed (not compared: `Spoken("a")` equals any spoken "a")."""

    text: str
    start: int = field(default=0, compare=False)


Piece = Spoken | ToolCallDelta


class _State(Enum):
    TEXT = auto()
    # Inside a dropped block.
    BLOCK = auto()
    HEADER = auto()
    ARGS_START = auto()
    ARGS = auto()
    # After the arguments closed, after a malformed call and after a turn marker: everything
    # is dropped.
    DROP = auto()


class ToolCallStream:
    """Feed it the model's decoded text deltas in order; it returns what is spoken and the
    call's pieces, and drops the template's markup (see the module's rules)."""

    def __init__(self) -> None:
        self._state = _State.TEXT
        # All the text fed, and the end of it not decided yet (TEXT: what may still become a
        # marker; BLOCK: all of the block since its outermost opening tag).
        self._fed = 0
        self._held = ""
        # The block being read: its opening tag, how deep in it (the same tag nests), and
        # up to which offset (in all the text) its tags were looked for.
        self._block_open = ""
        self._depth = 0
        self._scanned = 0
        self._ended = False
        # Header scan: which _HEADER token, how far into a literal one, the raw name so far.
        self._step = 0
        self._offset = 0
        self._raw_name = ""
        self._escaped = False
        self._name = ""
        # Arguments scan: brace depth outside strings.
        self._args_depth = 0
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

    @property
    def ended(self) -> bool:
        """A turn marker ended the text: nothing more will be said (the caller may stop
        generating)."""
        return self._ended

    @property
    def settled(self) -> int:
        """How many characters of all the text fed are decided: spoken, a call's or dropped."""
        return self._fed - len(self._held)

    def feed(self, delta: str) -> list[Piece]:
        pieces: list[Piece] = []
        self._fed += len(delta)
        if self._ended:
            return pieces
        if self._state in (_State.TEXT, _State.BLOCK):
            text, self._held = self._held + delta, ""
            delta = self._scan(text, self._fed - len(text), pieces)
        self._call_chars(delta, pieces)
        return pieces

    def close(self) -> list[Piece]:
        """At the end of the generation: what was held back and turns out to be spoken (text
        that never became a marker, an unclosed `<tool_response>`'s), if anything."""
        pieces: list[Piece] = []
        self._end_of_text(self._fed, pieces)
        return pieces

    def _scan(self, text: str, base: int, pieces: list[Piece]) -> str:
        """Reads `text` (at offset `base` of all the text) outside a call: speaks what is surely
        text, drops markup, holds back the undecided rest. Returns what follows `<tool_call>`
        ("" if none)."""
        at = 0
        while True:
            if self._state is _State.BLOCK:
                look = max(at, self._scanned - base)
                match = _BLOCK_MARKUP[self._block_open].search(text, look)
                if match is None:
                    self._held = text[at:]
                    self._scanned = base + len(text) - self._holdable(text, look)
                    return ""
                tag = match.group()
                if tag in TURN_MARKERS:
                    self._held = text[at : match.start()]
                    self._end_of_text(base + match.start(), pieces)
                    self._turn_ended()
                    return ""
                self._depth += 1 if tag == self._block_open else -1
                self._scanned = base + match.end()
                if self._depth == 0:
                    # A whole block: dropped.
                    self._state, at = _State.TEXT, match.end()
                continue
            if self._state is not _State.TEXT:
                return ""
            match = MARKUP.search(text, at)
            end = match.start() if match else len(text) - self._holdable(text, at)
            if end > at:
                pieces.append(Spoken(text[at:end], base + at))
            if match is None:
                self._held = text[end:]
                return ""
            tag, at = match.group(), match.end()
            if tag in TURN_MARKERS:
                self._turn_ended()
            elif tag == OPEN_TAG:
                self._in_call, self._state = True, _State.HEADER
                return text[at:]
            elif tag in DROPPED_BLOCKS:
                self._state, self._block_open = _State.BLOCK, tag
                self._depth, self._scanned = 1, base + at
            # Anything else (a stray closing tag, another special token) is dropped alone.

    def _end_of_text(self, end: int, pieces: list[Piece]) -> None:
        """No more text after offset `end` (all the held text comes before it): decides what
        is held back (see the rules)."""
        while self._state is _State.BLOCK:
            content, self._held = self._held, ""
            if self._block_open not in SPOKEN_IF_UNCLOSED:
                self._state = _State.DROP
                return
            # Its opening tag was a stray one: the rest is text (it may hold markup too).
            self._state = _State.TEXT
            self._call_chars(self._scan(content, end - len(content), pieces), pieces)
        held, self._held = self._held, ""
        if self._state is _State.TEXT and held and not held.startswith(("</", "<|")):
            pieces.append(Spoken(held, end - len(held)))

    def _turn_ended(self) -> None:
        """Nothing after a turn marker is read (a call it cut stays as it was)."""
        self._ended = True
        if self._state in (_State.TEXT, _State.BLOCK):
            self._state, self._held = _State.DROP, ""

    def _holdable(self, text: str, at: int) -> int:
        """The length of the longest end of `text[at:]` that may still become a marker."""
        if self._state is _State.TEXT:
            markers: tuple[str, ...] = (*_LITERALS, *TURN_MARKERS)
        else:
            markers = (self._block_open, DROPPED_BLOCKS[self._block_open], *TURN_MARKERS)
        for start in range(max(at, len(text) - _MAX_HELD), len(text)):
            if text[start] != "<":
                continue
            tail = text[start:]
            if any(m.startswith(tail) for m in markers) or (
                self._state is _State.TEXT and _SPECIAL_START.fullmatch(tail)
            ):
                return len(text) - start
        return 0

    def _call_chars(self, text: str, pieces: list[Piece]) -> None:
        """Reads `text` inside a call: its header, then its arguments (see the rules)."""
        args: list[str] = []
        for char in text:
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
                self._state, self._args_depth = _State.ARGS, 1
                args.append(char)
            elif self._state is _State.ARGS:
                args.append(char)
                if self._args_char(char):
                    self._done, self._state = True, _State.DROP
                    break
        if args:
            pieces.append(ToolCallDelta(arguments="".join(args)))

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
            self._args_depth += 1
        elif char == "}":
            self._args_depth -= 1
            return self._args_depth == 0
        return False


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

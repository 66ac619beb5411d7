"""One generation's answer, for both generators (the cascade's SmolLM2 `llm`, the Qwen3-Omni
thinker): which tools its prompt shows, and its tokens in, what is spoken, the tokens whose text
was spoken and the function call to pass on out.

Rules (pure: a tokenizer's `decode` is all it calls):
1. Tools shown (`shown_tools`): none under tool_choice "none", else the request's tools; a
   generator that asks (`hide_after_result`, SmolLM2-135M: shown the tools while answering a
   tool's result, it calls the same function again or echoes the result) shows none under
   "auto" when the conversation ends with a tool's result. "required" and "function" decode
   under the call's grammar whatever is shown.
2. The functions offered are the names of the tools shown: a call to any other function (any
   call at all when none is shown) is dropped, never passed on, and ends the answer.
3. Tokens are decoded in groups of whole characters (`Detokenizer`): byte-level BPE may split
   a character over several tokens, so a group whose text ends in U+FFFD waits for its next
   token, at most `Detokenizer.MAX_HELD` tokens (random weights may never complete one); at
   the end what is held is decoded as it is. An added token (special or a tag) starts a group
   of its own. Special tokens decode to nothing; spaces are kept as written (no clean-up).
4. The decoded text goes through a `ToolCallStream` (tool_calls.py: what is spoken, the call's
   deltas, the template's markup dropped); its pieces come out in order, calls filtered by
   rule 2 (the first delta names the function and decides for the whole call).
5. The answer is `over` once nothing more can be said: a call closed, turned out malformed or
   was dropped, or the text reached a turn marker. Its generator stops there.
6. A group's tokens are spoken (`Said.tokens`, for a talker) once the stream has settled all
   of the group's text and some of that text was spoken; special tokens never are. Once a call
   began, or the answer is over, no token is spoken again.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from turntaker_models.contract import Conversation, GenerationParameters, ToolCallDelta, ToolSpec
from turntaker_models.tool_calls import TURN_MARKERS, Piece, Spoken, ToolCallStream

__all__ = ["Answer", "Detokenizer", "Said", "shown_tools", "special_ids", "turn_ids"]


def shown_tools(
    params: GenerationParameters, conversation: Conversation, *, hide_after_result: bool = False
) -> list[ToolSpec]:
    """The tools a prompt lists (rule 1)."""
    if params.tool_choice == "none":
        return []
    messages = conversation.messages
    if hide_after_result and params.tool_choice == "auto" and messages:
        if messages[-1].role == "tool":
            return []
    return list(params.tools)


def turn_ids(tokenizer: Any) -> frozenset[int]:
    """The ids of the turn markers the vocabulary holds (`TURN_MARKERS`: the end of a turn and
    the start of another); a generation stops at any of them."""
    vocab = tokenizer.get_vocab()
    return frozenset(int(vocab[t]) for t in TURN_MARKERS if t in vocab)


def special_ids(tokenizer: Any) -> frozenset[int]:
    """Every token a decode with skip_special_tokens leaves out (added tokens marked special;
    `all_special_ids` misses some, e.g. `<|im_start|>`)."""
    added = tokenizer.added_tokens_decoder.items()
    return frozenset(int(i) for i, token in added if token.special)


class Detokenizer:
    """Text deltas from token ids in groups of whole characters, O(1) per token (rule 3).

    Byte-level BPE decodes each token's bytes independently, so once the pending tokens decode
    to whole characters they can be emitted and forgotten: the deltas add up to the decode of
    all the tokens at once.
    """

    MAX_HELD = 8

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.pending: list[int] = []

    def _decode(self) -> str:
        text: str = self.tokenizer.decode(
            self.pending, skip_special_tokens=True, clean_up_tokenization_spaces=False
        )
        return text

    def add(self, token: int, final: bool) -> str:
        """`token`'s text with the held tokens', or "" while it may end inside a character
        (never when `final`)."""
        self.pending.append(token)
        text = self._decode()
        if text.endswith("\ufffd") and not final and len(self.pending) < self.MAX_HELD:
            return ""
        self.pending.clear()
        return text

    def flush(self) -> str:
        """The held-back tokens' text as it is (a broken character: U+FFFD)."""
        text = self._decode()
        self.pending.clear()
        return text


@dataclass(frozen=True, slots=True)
class Said:
    """What one token (or the end) added to the answer: the spoken text and the offered call's
    deltas in stream order, and the tokens whose text was spoken (rule 6), in order."""

    pieces: tuple[Piece, ...] = ()
    tokens: tuple[int, ...] = ()

    @property
    def text(self) -> str:
        return "".join(p.text for p in self.pieces if isinstance(p, Spoken))

    @property
    def calls(self) -> list[ToolCallDelta]:
        return [p for p in self.pieces if isinstance(p, ToolCallDelta)]


class Answer:
    """One generation's tokens in, `Said` out (the module's rules)."""

    def __init__(self, tokenizer: Any, offered: Iterable[str]) -> None:
        self._detok = Detokenizer(tokenizer)
        self._calls = ToolCallStream()
        self._offered = frozenset(offered)
        self._special = special_ids(tokenizer)
        self._added = frozenset(int(i) for i in tokenizer.added_tokens_decoder)
        # Whether this call's deltas go out; None before its name is known.
        self._forwarded: bool | None = None
        # The tokens of a character not decoded yet.
        self._group: list[int] = []
        # Groups not decided yet: their tokens and the span of their text in all the text.
        self._pending: deque[tuple[list[int], int, int]] = deque()
        # Spans of spoken text not yet matched against a decided group.
        self._spoken: deque[tuple[int, int]] = deque()
        self._text_end = 0

    @property
    def over(self) -> bool:
        """Nothing more can be said (rule 5)."""
        calls = self._calls
        dropped = self._forwarded is False or (calls.in_call and not self._offered)
        return calls.call_done or calls.malformed or calls.ended or dropped

    @property
    def in_call(self) -> bool:
        """A call began: nothing more will be spoken."""
        return self._calls.in_call

    def push(self, token: int, final: bool = False) -> Said:
        """The next token; `final`: the generation's last (the end of the answer follows)."""
        pieces: list[Piece] = []
        if token in self._added and self._detok.pending:
            pieces += self._decoded(self._detok.flush())
        self._group.append(token)
        pieces += self._decoded(self._detok.add(token, final))
        if final:
            pieces += self._calls.close()
        return self._said(pieces)

    def finish(self) -> Said:
        """The end of the answer after its last token: the held text, then what the stream
        held back and turns out to be spoken."""
        pieces: list[Piece] = []
        if self._detok.pending:
            pieces += self._decoded(self._detok.flush())
        pieces += self._calls.close()
        return self._said(pieces)

    def _said(self, pieces: list[Piece]) -> Said:
        out: list[Piece] = []
        for piece in pieces:
            if isinstance(piece, Spoken):
                out.append(piece)
                self._spoken.append((piece.start, piece.start + len(piece.text)))
                continue
            if self._forwarded is None:
                self._forwarded = piece.name in self._offered
            if self._forwarded:
                out.append(piece)
        released: list[int] = []
        settled = self._calls.settled
        while self._pending and self._pending[0][2] <= settled:
            tokens, start, end = self._pending.popleft()
            if self._was_spoken(start, end):
                released += [t for t in tokens if t not in self._special]
        if self._calls.in_call or self.over:
            # The rest of the text is the call's (or dropped): never spoken.
            self._pending.clear()
        return Said(tuple(out), tuple(released))

    def _decoded(self, text: str) -> list[Piece]:
        """The detokenizer's next text: closes the group when it decoded whole, reads it."""
        if not self._detok.pending:
            self._pending.append((self._group, self._text_end, self._text_end + len(text)))
            self._group = []
        self._text_end += len(text)
        return self._calls.feed(text) if text else []

    def _was_spoken(self, start: int, end: int) -> bool:
        """Whether any of the text [start, end) was spoken (groups are asked in order)."""
        while self._spoken and self._spoken[0][1] <= start:
            self._spoken.popleft()
        return start < end and bool(self._spoken) and self._spoken[0][0] < end

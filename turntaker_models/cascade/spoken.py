"""Answers that suit speech: what the cascade llm's text loses before it is spoken, and the
repeats its decoding may not make.

Rules (pure; one `MarkdownFilter` per generation):
- Markdown is not read aloud: `*`, `#` and backticks are dropped wherever they stand, and a
  list bullet (`-`, `+` or `•` then a space, after nothing but spaces on its line) is dropped
  with its space. The text itself stays: the client's transcript is the text that is spoken,
  so the history holds what was heard. A bullet is only known once the character after it is
  seen, so one character may wait for the next delta (or `flush`).
- No repeated runs: a token that would repeat an earlier run of `NO_REPEAT_NGRAM` tokens of the
  same answer is never picked. SmolLM2-135M, decoded greedily, falls into loops that say one
  sentence again and again; a verbatim run of six tokens is longer than the phrases a short
  spoken answer repeats on purpose, so only loops lose anything.
"""

from __future__ import annotations

from collections.abc import Sequence

NO_REPEAT_NGRAM = 6
_DROPPED = frozenset("*#`")
_BULLETS = frozenset("-+•")


class MarkdownFilter:
    """Streamed answer text in, the text to speak and show out (see the module docstring)."""

    def __init__(self) -> None:
        # Only spaces so far on this line; a bullet seen there, its fate not known yet.
        self._line_start = True
        self._held = ""

    def feed(self, delta: str) -> str:
        out: list[str] = []
        for char in delta:
            if char in _DROPPED:
                continue
            if self._held:
                held, self._held = self._held, ""
                if char == " ":
                    self._line_start = False
                    continue
                out.append(held)
            if char == "\n":
                self._line_start = True
            elif self._line_start and char in " \t":
                pass
            elif self._line_start and char in _BULLETS:
                self._held = char
                continue
            else:
                self._line_start = False
            out.append(char)
        return "".join(out)

    def flush(self) -> str:
        """What is still held (a bullet-like character at the very end)."""
        held, self._held = self._held, ""
        return held


def repeat_bans(tokens: Sequence[int], n: int = NO_REPEAT_NGRAM) -> set[int]:
    """The tokens that, picked next, would repeat a run of `n` tokens already in `tokens`."""
    if n < 1 or len(tokens) < n:
        return set()
    tail = list(tokens[len(tokens) - n + 1 :]) if n > 1 else []
    bans: set[int] = set()
    for start in range(len(tokens) - n + 1):
        if list(tokens[start : start + n - 1]) == tail:
            bans.add(tokens[start + n - 1])
    return bans

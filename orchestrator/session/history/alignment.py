"""Rule 5's text alignment: which words of a reply were heard with which audio.

A reply's pieces come from the pipeline as text, audio and function calls. What the client
hears of a cut reply is its audio; the words kept with it (docs/protocol.md rule 5) are the
ones that rode with that audio. This decides which text goes with which audio chunk; the
response actor (orchestrator/service/backends/response_actor.py) only posts what it is told.

Rules:
1. Aligned (the pipeline sends each piece of text with the audio chunk where its audio ends:
   the cascade's tts), in an audio reply: text is held and rides with the next audio chunk.
2. Unaligned (Qwen3-Omni's Thinker text runs ahead of its Talker's audio), or a reply without
   audio: text goes on at once, alone (a cut reply then keeps none of it).
3. Text still held when a function call starts, or when the reply ends, goes on alone before
   it: once a call starts nothing more is spoken, so no audio will come for it.

Pure: strings in, strings out.
"""

from __future__ import annotations

__all__ = ["TextAlignment"]


class TextAlignment:
    __slots__ = ("_held", "_holds")

    def __init__(self, *, audio: bool, aligned: bool) -> None:
        self._holds = audio and aligned
        self._held: list[str] = []

    def text(self, piece: str) -> str | None:
        """A piece of text: what to send alone now (rule 2), or None: held (rule 1)."""
        if self._holds:
            self._held.append(piece)
            return None
        return piece

    def audio(self) -> str:
        """An audio chunk: the text that rides with it (rule 1; "" for none)."""
        return self.flush()

    def flush(self) -> str:
        """A call starts or the reply ends: the text held, to send alone first (rule 3; "" for
        none)."""
        text = "".join(self._held)
        self._held.clear()
        return text

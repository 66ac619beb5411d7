"""The text a `tts` request id received and has not sent yet, and which of it goes out with
which chunk of a spoken sentence (docs/protocol.md rule 5: text counts as heard only where
all of the audio it goes with was played).

Rules:
- Held per request id, bounded: at most `MAX_HELD_STREAMS` ids (the least recently used goes
  first) and `MAX_HELD_CHARS` characters each; bytes are decoded incrementally (a character
  split over two deltas is whole).
- Whitespace with nothing held or being spoken for its id is not held: it passes at once.
- A sentence's words line up with the held text when the text holds them in order, separated
  by whitespace only; then each word's text goes out on the chunk in which its audio ends,
  never earlier. Text that does not line up rides whole on the sentence's last chunk.
- The whitespace after a sentence rides with its last word.
"""

from __future__ import annotations

import codecs
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

MAX_HELD_STREAMS = 1024
MAX_HELD_CHARS = 64 * 1024


@dataclass
class _Held:
    # Text received for one id and not yet sent; `base` is its offset in all text received.
    text: str = ""
    base: int = 0
    jobs: int = 0
    decoder: codecs.IncrementalDecoder = field(
        default_factory=lambda: codecs.getincrementaldecoder("utf-8")(errors="replace")
    )


def align(text: str, words: Sequence[str]) -> list[int] | None:
    """Where each of `words` ends in `text`, which must hold them in order, separated by
    whitespace only, from its start; None when it does not."""
    ends: list[int] = []
    at = 0
    for word in words:
        while at < len(text) and text[at].isspace():
            at += 1
        if not text.startswith(word, at):
            return None
        at += len(word)
        ends.append(at)
    return ends


class HeldText:
    """The text each request id received and has not sent yet (see the module docstring)."""

    def __init__(
        self, max_streams: int = MAX_HELD_STREAMS, max_chars: int = MAX_HELD_CHARS
    ) -> None:
        self._streams: OrderedDict[str, _Held] = OrderedDict()
        self._lock = threading.Lock()
        self._max_streams = max_streams
        self._max_chars = max_chars

    def __len__(self) -> int:
        return len(self._streams)

    def submit(self, request_id: str, text: bytes, sentence: bool) -> bytes:
        """Hold `text` for `request_id` (and count a sentence job if `sentence`); returns the
        text to pass on at once instead (whitespace with nothing held or being spoken)."""
        with self._lock:
            held = self._streams.get(request_id)
            if held is None:
                if not sentence and (not text or text.isspace()):
                    return text
                held = self._streams[request_id] = _Held()
                while len(self._streams) > self._max_streams:
                    self._streams.popitem(last=False)
            else:
                if not sentence and not held.jobs and not held.text and text.isspace():
                    return text
                self._streams.move_to_end(request_id)
            piece = held.decoder.decode(text)
            if len(held.text) + len(piece) <= self._max_chars:
                held.text += piece
            if sentence:
                held.jobs += 1
            return b""

    def snapshot(self, request_id: str) -> tuple[int, str]:
        with self._lock:
            held = self._streams.get(request_id)
            return (held.base, held.text) if held is not None else (0, "")

    def take(self, request_id: str, upto: int, whitespace_after: bool = False) -> bytes:
        """The held text up to offset `upto` (of all text received), and the whitespace held
        right after it if `whitespace_after`; removed from the store."""
        with self._lock:
            held = self._streams.get(request_id)
            if held is None:
                return b""
            cut = max(0, min(len(held.text), upto - held.base))
            if whitespace_after:
                while cut < len(held.text) and held.text[cut].isspace():
                    cut += 1
            out, held.text = held.text[:cut], held.text[cut:]
            held.base += cut
            return out.encode()

    def take_all(self, request_id: str) -> bytes:
        """All the text held for `request_id`, removed from the store."""
        with self._lock:
            held = self._streams.get(request_id)
            if held is None:
                return b""
            out, held.text = held.text, ""
            held.base += len(out)
            return out.encode()

    def done(self, request_id: str) -> None:
        """A sentence job of `request_id` ended; the id is forgotten once nothing is left."""
        with self._lock:
            held = self._streams.get(request_id)
            if held is None:
                return
            held.jobs = max(0, held.jobs - 1)
            if not held.jobs and not held.text:
                del self._streams[request_id]

    def waiting(self) -> list[str]:
        """The ids holding text with no sentence job queued or running: text that waits for a
        sentence still to come (or for a cancel that ends its stream)."""
        with self._lock:
            return [rid for rid, held in self._streams.items() if not held.jobs and held.text]

    def drop(self, request_id: str) -> None:
        with self._lock:
            self._streams.pop(request_id, None)


class WordRelease:
    """Which held text goes out with which chunk of one sentence."""

    def __init__(self, held: HeldText, request_id: str, words: Sequence[str]) -> None:
        self.held = held
        self.request_id = request_id
        base, text = held.snapshot(request_id)
        ends = align(text, words)
        # Offsets (in all text received) where each word's text ends; None: not lined up.
        self.char_ends = None if ends is None else [base + end for end in ends]
        # Not lined up: all that is known of the text held now is that it came before this
        # sentence was spoken, so it rides on the sentence's last chunk.
        self.held_end = base + len(text)
        # Per word, the sentence sample at which its audio has ended (None: not spoken yet).
        self.sample_ends: list[int | None] = [None] * len(words)
        self.next = 0

    def known(self, word: int, sample: int) -> None:
        self.sample_ends[word] = sample

    def silent(self, word: int) -> None:
        # No audio at all: it rides with the words before it.
        if self.sample_ends[word] is None:
            self.sample_ends[word] = 0

    def upto(self, played: int) -> bytes:
        """The text of the words not sent yet whose audio has ended by sample `played`."""
        if self.char_ends is None:
            return b""
        while self.next < len(self.sample_ends):
            end = self.sample_ends[self.next]
            if end is None or end > played:
                break
            self.next += 1
        if self.next == 0:
            return b""
        return self.held.take(self.request_id, self.char_ends[self.next - 1])

    def rest(self) -> bytes:
        """Everything of this sentence not sent yet, with the whitespace after it."""
        self.next = len(self.sample_ends)
        if self.char_ends is None:
            return self.held.take(self.request_id, self.held_end)
        last = self.char_ends[-1] if self.char_ends else 0
        return self.held.take(self.request_id, last, whitespace_after=True)

"""The llm's prefix cache: the KV cache of recent prompts, so that a prompt that starts like one
of them is prefilled only from where they part.

A voice conversation sends the llm almost the same prompt again and again: the system prompt
and the turns so far, plus the newest user turn (and a preemptive response of the same turn
before it). On 2 cores SmolLM2-135M prefills ~4 ms a token on one thread, so a 5-turn
conversation (~180 tokens) costs ~0.7 s before its first token; the part it shares with the
last prompt costs nothing when its keys and values are kept.

Rules:
1. It holds the caches of at most `entries` token sequences (each what was fed to the model:
   a prompt and the tokens generated after it), each at most `max_tokens` long (a longer one
   is not kept: memory is bounded by entries x max_tokens x the model's KV size per token).
2. `take(ids)` hands out a private copy of the cache of the entry sharing the longest prefix
   with `ids`, cut to that prefix, and its length n; at least one token of `ids` is always left
   to feed (its logits pick the first new token), and below `min_shared` shared tokens it
   hands out nothing (n = 0). The entry itself stays as it was.
3. `put(ids, cache)` takes over `cache`, whose length must be len(ids): it replaces an entry
   whose sequence is a prefix of `ids` (the same conversation, grown), else the least recently
   used one goes.
4. Safe across the decoder's worker threads: every entry is read and written under one lock,
   and a caller only ever feeds its own copy.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Sequence
from typing import Any, Protocol


class KvCache(Protocol):
    """What is used of a transformers cache (DynamicCache)."""

    def get_seq_length(self, layer_idx: int = 0) -> int: ...

    def crop(self, tokens_to_remove: int) -> None: ...


def shared_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many tokens `a` and `b` share from their start."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class PrefixCache:
    def __init__(self, entries: int = 4, max_tokens: int = 1024, min_shared: int = 16) -> None:
        if entries < 1 or max_tokens < 1 or min_shared < 1:
            raise ValueError("entries, max_tokens and min_shared must be >= 1")
        self.entries = entries
        self.max_tokens = max_tokens
        self.min_shared = min_shared
        self._lock = threading.Lock()
        # Least recently used first.
        self._kept: list[tuple[tuple[int, ...], Any]] = []

    def __len__(self) -> int:
        return len(self._kept)

    def take(self, ids: Sequence[int]) -> tuple[Any, int]:
        """A copy of the best entry's cache cut to the prefix it shares with `ids`, and that
        prefix's length; (None, 0) when none shares `min_shared` tokens (rule 2)."""
        with self._lock:
            best, shared = -1, 0
            for i, (kept, _) in enumerate(self._kept):
                n = min(shared_prefix(kept, ids), len(ids) - 1)
                if n > shared:
                    best, shared = i, n
            if best < 0 or shared < self.min_shared:
                return None, 0
            entry = self._kept.pop(best)
            self._kept.append(entry)
            mine: KvCache = copy.deepcopy(entry[1])
        length = mine.get_seq_length()
        if length > shared:
            mine.crop(shared - length)
        return mine, shared

    def put(self, ids: Sequence[int], cache: KvCache) -> None:
        """Keep `cache` (its length must be len(ids)) for later prompts (rule 3)."""
        if not ids or len(ids) > self.max_tokens:
            return
        if cache.get_seq_length() != len(ids):
            raise ValueError(f"a cache of {cache.get_seq_length()} tokens for {len(ids)} ids")
        key = tuple(ids)
        with self._lock:
            grown = [i for i, (kept, _) in enumerate(self._kept) if key[: len(kept)] == kept]
            for i in reversed(grown):
                del self._kept[i]
            self._kept.append((key, cache))
            del self._kept[: max(0, len(self._kept) - self.entries)]

"""The llm's prefix cache without a model: what it hands out, keeps and drops (the decoder's
use of it on SmolLM2 is tests/turntaker_models/cascade/test_llm.py's)."""

from __future__ import annotations

import threading

import pytest

from turntaker_models.cascade.prefix_cache import PrefixCache, shared_prefix


class Kv:
    """A cache standing for the tokens it holds keys and values of."""

    def __init__(self, ids: list[int]) -> None:
        self.ids = list(ids)

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return len(self.ids)

    def crop(self, tokens_to_remove: int) -> None:
        assert tokens_to_remove < 0
        del self.ids[tokens_to_remove:]


SYSTEM = list(range(100, 140))


def test_shared_prefix() -> None:
    assert shared_prefix([1, 2, 3], [1, 2, 4]) == 2
    assert shared_prefix([1, 2], [1, 2, 3]) == 2
    assert shared_prefix([], [1]) == 0


def test_a_grown_prompt_gets_the_shared_part_as_a_private_copy() -> None:
    cache = PrefixCache()
    first = [*SYSTEM, 1, 2, 3, 4]
    cache.put(first, Kv(first))
    prompt = [*SYSTEM, 1, 2, 9, 9]
    got, n = cache.take(prompt)
    assert n == len(SYSTEM) + 2 and got.ids == prompt[:n]
    got.ids.append(5)
    # The entry is untouched by what the taker does with its copy.
    again, m = cache.take([*first, 7])
    assert m == len(first) and again.ids == first


def test_at_least_one_token_is_left_to_feed() -> None:
    cache = PrefixCache()
    cache.put(SYSTEM, Kv(SYSTEM))
    got, n = cache.take(SYSTEM)
    assert n == len(SYSTEM) - 1 and got.ids == SYSTEM[:-1]


def test_too_little_shared_hands_out_nothing() -> None:
    cache = PrefixCache(min_shared=16)
    cache.put(SYSTEM, Kv(SYSTEM))
    assert cache.take([*SYSTEM[:15], 0, 0]) == (None, 0)
    assert cache.take([1, 2, 3]) == (None, 0)


def test_the_longest_shared_prefix_wins() -> None:
    cache = PrefixCache()
    short = [*SYSTEM, 1]
    other = [*SYSTEM, 2, 3, 4, 5]
    cache.put(short, Kv(short))
    cache.put(other, Kv(other))
    _, n = cache.take([*SYSTEM, 2, 3, 4, 0])
    assert n == len(SYSTEM) + 3


def test_a_grown_conversation_replaces_its_own_entry_and_the_oldest_goes() -> None:
    cache = PrefixCache(entries=2)
    a = [*SYSTEM, 1]
    cache.put(a, Kv(a))
    cache.put([*a, 2, 3], Kv([*a, 2, 3]))
    assert len(cache) == 1  # the same conversation, grown
    b, c = [*SYSTEM, 7], [*SYSTEM, 8]
    cache.put(b, Kv(b))
    cache.put(c, Kv(c))
    assert len(cache) == 2
    _, n = cache.take([*a, 2, 3, 4])
    assert n == len(SYSTEM)  # a's entry went first: only the system prompt is shared now


def test_long_sequences_and_mismatched_caches() -> None:
    cache = PrefixCache(max_tokens=50)
    long = list(range(51))
    cache.put(long, Kv(long))
    assert len(cache) == 0
    with pytest.raises(ValueError, match="a cache of 3 tokens for 40 ids"):
        cache.put(SYSTEM, Kv([1, 2, 3]))


def test_threads_take_and_put_together() -> None:
    cache = PrefixCache(entries=3)
    failures: list[str] = []

    def worker(k: int) -> None:
        for i in range(200):
            ids = [*SYSTEM, k, i]
            got, n = cache.take(ids)
            if got is not None and got.ids != ids[:n]:
                failures.append(f"{k}/{i}: {got.ids[-3:]} for {ids[-3:]}")
            cache.put(ids, Kv(ids))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures and len(cache) <= 3

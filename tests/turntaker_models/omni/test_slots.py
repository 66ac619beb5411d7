"""The slot cache's rules (slots.py): fixed size, per-row writes, the mask, free slots."""

from __future__ import annotations

import pytest
import torch

from turntaker_models.omni.slots import SlotCache, SlotFull, SlotShape, within

SHAPE = SlotShape(layers=2, kv_heads=1, head_dim=2, slots=3, max_len=8, span_step=4)


def cache() -> SlotCache:
    return SlotCache(SHAPE, torch.float32, torch.device("cpu"), bool_mask=True)


def test_rule1_allocated_once_and_bounded_by_its_slots() -> None:
    c = cache()
    sizes = [k.shape for k in c.keys]
    assert sizes == [(3, 1, 8 + 4, 2)] * 2
    slots = [c.take() for _ in range(3)]
    assert sorted(slots) == [0, 1, 2]
    with pytest.raises(SlotFull):
        c.take()
    assert [k.shape for k in c.keys] == sizes


def test_rules2_3_each_row_writes_at_its_own_length_and_sees_only_its_own_keys() -> None:
    c = cache()
    a, b = c.take(), c.take()
    c.select([(a, 3)])
    c.update(torch.ones(1, 1, 3, 2), torch.ones(1, 1, 3, 2), 0)
    c.advance()
    mask = c.select([(a, 1), (b, 1)])
    assert mask.shape == (2, 1, 1, 4), "rule 4: the span is the longest row, rounded up"
    assert mask[0, 0, 0].tolist() == [True, True, True, True]
    assert mask[1, 0, 0].tolist() == [True, False, False, False]
    keys, _ = c.update(torch.full((2, 1, 1, 2), 2.0), torch.full((2, 1, 1, 2), 2.0), 0)
    c.advance()
    assert keys.shape == (2, 1, 4, 2)
    assert keys[0, 0, :, 0].tolist() == [1, 1, 1, 2], "row a wrote at its length, 3"
    assert keys[1, 0, 0, 0] == 2, "row b wrote at its length, 0"
    assert c.lengths[a] == 4 and c.lengths[b] == 1


def test_rule2_a_row_past_its_slot_is_refused() -> None:
    c = cache()
    a = c.take()
    with pytest.raises(ValueError, match="room for 8"):
        c.select([(a, 9)])


def test_rule5_a_released_slot_starts_empty_for_the_next_stream() -> None:
    c = cache()
    a = c.take()
    c.select([(a, 5)])
    c.update(torch.ones(1, 1, 5, 2), torch.ones(1, 1, 5, 2), 0)
    c.advance()
    c.release(a)
    again = c.take()
    assert c.lengths[again] == 0
    mask = c.select([(again, 1)])
    assert mask[0, 0, 0].tolist() == [True, False, False, False], "no stale key is seen"


def test_an_eager_model_gets_an_additive_mask() -> None:
    c = SlotCache(SHAPE, torch.float32, torch.device("cpu"), bool_mask=False)
    a = c.take()
    mask = c.select([(a, 2)])
    assert mask.dtype == torch.float32
    assert mask[0, 0, 0, 0] == 0 and mask[0, 0, 0, 1] < -1e30


def test_rule4_the_prefill_budget_counts_padded_positions() -> None:
    # Was: real lengths were summed, but every row of a forward is padded to the longest: one
    # 4,000-token prompt beside three short ones ran 16,000 positions under a 4,096 budget.
    assert within(4096, [4000, 30, 30, 30]) == 1
    assert within(4096, [30, 30, 4000]) == 2, "the long one would pad all three to 4,000"
    assert within(4096, [1000, 1000, 1000, 1000, 10]) == 4
    assert within(100, [500]) == 1, "the oldest runs alone, whatever its length (rule 2)"

"""A static KV cache with one slot per stream: many streams' decode steps in one forward.

Rules:
1. The cache is allocated once, at its full size: `slots` streams of at most `max_len`
   positions each, per layer [slots, kv_heads, max_len, head_dim]. Nothing grows while it
   serves, so memory is bounded by the stage's maximum streams, and the shapes a forward sees
   come from a small fixed set (a GPU build can capture them: CUDA graphs, torch.compile).
2. A forward covers the rows `select()` named, each with its own number of new positions
   written at its own length: a stream's keys sit in its slot in the order it saw them.
3. Keys carry their rotary position already (transformers applies RoPE before `update`), so
   where a key sits in the slot does not matter to attention; only which keys a row may see
   does, and that is the 4-D mask `select()` returns (a row sees its own slot's first
   `length + i + 1` columns from its i-th new position; nothing of any other slot).
4. A forward reads `span` columns: the longest selected row's new length, rounded up to a
   multiple of `span_step` (a few shapes, not one per length). Rows padded to the longest
   row's new positions write past their own length; `span_step` spare columns after
   `max_len` keep those writes out of every real column.
5. `release(slot)` makes the slot free at once; its stale keys are never read, because a new
   stream's length starts at 0 and the mask hides every column past a row's length.
6. One stream's fault stays its own. A row asking for more positions than its slot has left
   makes `select` raise (`SlotExhausted`), before anything is written. A forward that raises
   leaves every slot as it was (lengths move only in `advance`, after it; what it wrote lies
   past them, hidden and overwritten by rule 5), so `isolated` runs its rows again one by one
   and only the rows that fail alone hear an error: the row past its slot among them.

Why one slot per stream rather than pages: a stage serves tens of streams, each bounded by the
model's context; a fixed slot is the simplest static shape, and `max_len` is a setting.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch


@dataclass(frozen=True)
class SlotShape:
    layers: int
    kv_heads: int
    head_dim: int
    slots: int
    max_len: int
    span_step: int = 64


def shape_of(text_config: Any, slots: int, max_len: int) -> SlotShape:
    """The cache shape a transformers text config asks for."""
    heads = int(text_config.num_attention_heads)
    head_dim = int(getattr(text_config, "head_dim", None) or text_config.hidden_size // heads)
    kv_heads = int(getattr(text_config, "num_key_value_heads", None) or heads)
    return SlotShape(int(text_config.num_hidden_layers), kv_heads, head_dim, slots, max_len)


log = logging.getLogger("turntaker.omni")
T = TypeVar("T")
U = TypeVar("U")


class SlotFull(RuntimeError):
    """Every slot is taken (rule 1: a stream beyond the maximum waits or is refused)."""


class SlotExhausted(ValueError):
    """Rule 6: a row asked for more positions than its slot has left."""


class SlotCache:
    """Duck-types transformers' `Cache` where the attention layers use it (`update`).

    Streams' threads `take` and `release` slots (under a lock); one batcher thread runs the
    forwards (`select`, `update`, `advance`)."""

    @classmethod
    def for_model(cls, model: Any, slots: int, max_len: int) -> SlotCache:
        """A cache for a transformers decoder (its `config.text_config`), at most as long as the
        model's context."""
        text_config = model.config.text_config
        max_len = min(max_len, int(text_config.max_position_embeddings))
        sdpa = model.config._attn_implementation == "sdpa"
        return cls(shape_of(text_config, slots, max_len), model.dtype, model.device, sdpa)

    def __init__(
        self, shape: SlotShape, dtype: torch.dtype, device: torch.device, bool_mask: bool
    ) -> None:
        self.shape = shape
        self.dtype = dtype
        self.device = device
        self.bool_mask = bool_mask  # sdpa takes "may attend" booleans, eager an additive mask
        self.columns = shape.max_len + shape.span_step  # rule 4's spare columns
        size = (shape.slots, shape.kv_heads, self.columns, shape.head_dim)
        self.keys = [torch.zeros(size, dtype=dtype, device=device) for _ in range(shape.layers)]
        self.values = [torch.zeros(size, dtype=dtype, device=device) for _ in range(shape.layers)]
        self.lengths = [0] * shape.slots
        self.free = list(range(shape.slots - 1, -1, -1))
        self._lock = threading.Lock()
        self._rows = torch.zeros(0, dtype=torch.long, device=device)
        self._columns = torch.zeros(0, 0, dtype=torch.long, device=device)
        self._span = 0
        self._selected: list[tuple[int, int]] = []

    # --- slots -------------------------------------------------------------------------------

    def take(self) -> int:
        with self._lock:
            if not self.free:
                raise SlotFull(f"all {self.shape.slots} slots are taken")
            slot = self.free.pop()
            self.lengths[slot] = 0
            return slot

    def release(self, slot: int) -> None:
        with self._lock:
            if slot in self.free:
                return
            self.lengths[slot] = 0
            self.free.append(slot)

    @property
    def active(self) -> int:
        return self.shape.slots - len(self.free)

    # --- one forward ---------------------------------------------------------------------------

    def select(self, rows: list[tuple[int, int]]) -> torch.Tensor:
        """Rule 2: the next forward writes `new` positions for each (slot, new), all rows padded
        to the longest `new` on the right (a padded query's output is never read). Returns the
        mask for it, [rows, 1, q, span]."""
        q = max(new for _, new in rows)
        for slot, new in rows:
            if self.lengths[slot] + new > self.shape.max_len:
                raise SlotExhausted(
                    f"slot {slot}: {self.lengths[slot]} + {new} positions, room for "
                    f"{self.shape.max_len}"
                )
        longest = max(self.lengths[slot] + q for slot, _ in rows)
        if longest > self.columns:
            raise ValueError(f"a row padded to {q} positions runs past its slot")
        step = self.shape.span_step
        self._span = min(self.columns, -(-longest // step) * step)
        device = self.device
        starts = torch.tensor([self.lengths[slot] for slot, _ in rows], device=device)
        offsets = torch.arange(q, device=device)
        # Padded queries of a short row write past its length; they are hidden (rule 5) and
        # overwritten by its next forward (rule 4).
        self._columns = starts[:, None] + offsets[None, :]
        self._rows = torch.tensor([slot for slot, _ in rows], device=device)
        self._selected = rows
        seen = torch.arange(self._span, device=device)
        allowed = seen[None, None, :] <= self._columns[:, :, None]  # [rows, q, span]
        mask = allowed[:, None]
        if self.bool_mask:
            return mask
        blocked = torch.finfo(self.dtype).min
        return torch.zeros(mask.shape, dtype=self.dtype, device=device).masked_fill(~mask, blocked)

    def advance(self) -> None:
        """After the forward: each selected row's length grows by its own `new`."""
        for slot, new in self._selected:
            self.lengths[slot] += new
        self._selected = []

    def update(
        self, key: torch.Tensor, value: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # key/value: [rows, kv_heads, q, head_dim]
        keys, values = self.keys[layer_idx], self.values[layer_idx]
        rows = self._rows[:, None].expand_as(self._columns)
        keys[rows, :, self._columns] = key.transpose(1, 2).to(keys.dtype)
        values[rows, :, self._columns] = value.transpose(1, 2).to(values.dtype)
        span = self._span
        return keys[self._rows, :, :span], values[self._rows, :, :span]

    # transformers asks these of a cache in places our forwards never reach with one (positions
    # and the mask are always given); answer plainly rather than fail.
    def get_seq_length(self, layer_idx: int = 0) -> int:
        return max((self.lengths[s] for s, _ in self._selected), default=0)

    @property
    def is_compileable(self) -> bool:
        return False


# --- rows padded to one forward (rule 4) ---------------------------------------------------


def isolated(
    forward: Callable[[Sequence[T]], Sequence[U]], rows: Sequence[T]
) -> list[U | Exception]:
    """Rule 6: `forward` over `rows`; if it raises, each row again alone, so a row's error is
    its own (a bad image, a row past its slot) and the others' results are as if it never
    came."""
    try:
        return list(forward(rows))
    except Exception as error:
        if len(rows) == 1:
            return [error]
        log.warning("a forward of %d rows failed (%s); running them one by one", len(rows), error)
    out: list[U | Exception] = []
    for row in rows:
        try:
            out.extend(forward([row]))
        except Exception as error:
            out.append(error)
    return out


def within(budget: int, lengths: Sequence[int]) -> int:
    """How many of the oldest prefills (of these lengths, oldest first) fit `budget` positions
    together, counted as the forward runs them: every row padded to the longest (rule 4), so
    one 4,000-position prompt beside three short ones costs 16,000, not 4,000 and change. At
    least one (rule 2)."""
    longest = count = 0
    for length in lengths:
        if count and max(longest, length) * (count + 1) > budget:
            break
        longest = max(longest, length)
        count += 1
    return count


def pad_right(rows: Sequence[torch.Tensor], fill: int = 0) -> torch.Tensor:
    """[n, max(len)] of 1-D rows, padded on the right (rule 1's padded positions)."""
    out = torch.full((len(rows), max(r.shape[0] for r in rows)), fill, dtype=rows[0].dtype)
    for i, row in enumerate(rows):
        out[i, : row.shape[0]] = row
    return out


def padded_positions(given: Sequence[torch.Tensor], q: int, device: torch.device) -> torch.Tensor:
    """[4, n, q] of each row's [4, 1, len] positions; a row's padded queries go on from its
    last position (their output is never read)."""
    positions = torch.zeros(4, len(given), q, dtype=torch.long, device=device)
    for row, rows in enumerate(given):
        n = rows.shape[-1]
        rows = rows.to(device).reshape(4, n)
        positions[:, row, :n] = rows
        if n < q:
            more = torch.arange(1, q - n + 1, device=device)
            positions[:, row, n:] = rows[:, -1:] + more
    return positions

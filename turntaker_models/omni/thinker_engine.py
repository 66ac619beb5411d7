"""The Thinker's forwards for every stream of a stage, batched: one decode forward per step.

A `ThinkerSession` with an engine runs no forward itself: its prefill and each step become a
job of the engine's batcher (batcher.py), and the KV cache is a slot of the engine's
`SlotCache` (slots.py).

Rules:
1. A round runs every waiting decode step as one forward, rows of different lengths side by
   side (slots.py rules 2-4); a row feeding several tokens (a call's forced tokens) is padded
   on the right to the longest, and its logits are read at its own last token.
2. At most one prefill per round, alone, before the round's steps (batcher.py rule 2): a new
   stream joins at a step boundary, and one long prompt stalls the others by one prefill.
3. Slots: one per stream, taken at prefill and given back at `close`; there are as many as the
   stage serves streams, so a stream past them is refused by the stage before it gets here
   (`SlotFull` is the guard). A stream's prompt and answer must fit `max_len` positions.
4. What a stream gets back is what it would get alone: its own last-position logits (and at
   prefill, its hidden states), to float rounding of a wider matmul.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from turntaker_models.omni.batcher import Gather, StepBatcher
from turntaker_models.omni.slots import SlotCache, shape_of


@dataclass(frozen=True)
class Prefill:
    slot: int
    inputs: dict[str, Any]  # the forward's keyword arguments (ids, media, positions)
    length: int
    hidden: bool  # return the hidden states too (the talker's conditioning)


@dataclass(frozen=True)
class Step:
    slot: int
    ids: tuple[int, ...]
    positions: torch.Tensor  # [4, 1, len(ids)]


@dataclass(frozen=True)
class Out:
    logits: torch.Tensor  # [V] the row's last position
    hidden: Any = None  # prefill with `hidden`: the model's hidden_states, batch of one


Job = Prefill | Step


def one_prefill(jobs: Sequence[Job]) -> list[int]:
    """Rule 2: every step, and the first prefill waiting (alone if no step waits)."""
    steps = [i for i, job in enumerate(jobs) if isinstance(job, Step)]
    prefills = [i for i, job in enumerate(jobs) if isinstance(job, Prefill)]
    return steps + prefills[:1]


class ThinkerEngine:
    def __init__(self, model: Any, slots: int, max_len: int, gather: Gather | None = None) -> None:
        self.model = model
        self.device: torch.device = model.device
        text_config = model.config.text_config
        self.max_len = min(max_len, int(text_config.max_position_embeddings))
        sdpa = model.config._attn_implementation == "sdpa"
        self.cache = SlotCache(
            shape_of(text_config, slots, self.max_len), model.dtype, self.device, sdpa
        )
        self._slots = threading.Lock()
        self.batcher: StepBatcher[Job, Out] = StepBatcher(
            "thinker", self._run, max_batch=slots, gather=gather, pick=one_prefill
        )

    # --- a stream's side (its own thread) ------------------------------------------------------

    def open(self) -> int:
        with self._slots:
            return self.cache.take()

    def prefill(self, slot: int, inputs: dict[str, Any], length: int, hidden: bool) -> Out:
        return self.batcher.call(slot, Prefill(slot, inputs, length, hidden))

    def step(self, slot: int, ids: Sequence[int], positions: torch.Tensor) -> torch.Tensor:
        return self.batcher.call(slot, Step(slot, tuple(ids), positions)).logits

    def close(self, slot: int) -> None:
        self.batcher.leave(slot)
        with self._slots:
            self.cache.release(slot)

    def shutdown(self) -> None:
        self.batcher.close()

    # --- the batcher's side --------------------------------------------------------------------

    @torch.inference_mode()
    def _run(self, jobs: Sequence[Job]) -> list[Out]:
        results: dict[int, Out] = {}
        steps = [(i, job) for i, job in enumerate(jobs) if isinstance(job, Step)]
        for i, job in enumerate(jobs):
            if isinstance(job, Prefill):
                results[i] = self._prefill(job)
        if steps:
            for (i, _), logits in zip(steps, self._steps([job for _, job in steps]), strict=True):
                results[i] = Out(logits)
        return [results[i] for i in range(len(jobs))]

    def _prefill(self, job: Prefill) -> Out:
        mask = self.cache.select([(job.slot, job.length)])
        out = self.model(
            **job.inputs,
            attention_mask=mask,
            cache=self.cache,
            use_cache=True,
            output_hidden_states=job.hidden,
        )
        self.cache.advance()
        return Out(out.logits[0, -1], out.hidden_states if job.hidden else None)

    def _steps(self, steps: Sequence[Step]) -> list[torch.Tensor]:
        q = max(len(step.ids) for step in steps)
        mask = self.cache.select([(step.slot, len(step.ids)) for step in steps])
        ids = torch.zeros(len(steps), q, dtype=torch.long)
        positions = torch.zeros(4, len(steps), q, dtype=torch.long, device=self.device)
        for row, step in enumerate(steps):
            n = len(step.ids)
            ids[row, :n] = torch.tensor(step.ids)
            given = step.positions.to(self.device).reshape(4, n)
            positions[:, row, :n] = given
            # Padded queries (rule 1) continue the row's positions; their output is unread.
            if n < q:
                more = torch.arange(1, q - n + 1, device=self.device)
                positions[:, row, n:] = given[:, -1:] + more
        out = self.model(
            input_ids=ids.to(self.device),
            position_ids=positions,
            attention_mask=mask,
            cache=self.cache,
            use_cache=True,
        )
        self.cache.advance()
        return [out.logits[row, len(step.ids) - 1] for row, step in enumerate(steps)]

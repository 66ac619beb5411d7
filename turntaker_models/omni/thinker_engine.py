"""The Thinker's forwards for every stream of a stage, batched: one decode forward per step.

A `ThinkerSession` with an engine runs no forward itself: its prefill and each step become a
job of the engine's batcher (batcher.py), and the KV cache is a slot of the engine's
`SlotCache` (slots.py).

Rules:
1. A round runs every waiting decode step as one forward, rows of different lengths side by
   side (slots.py rules 2-4); a row feeding several tokens (a call's forced tokens) is padded
   on the right to the longest, and its logits are read at its own last token.
2. A round's prefills run as one forward before its steps, padded on the right like rule 1's
   rows, their audio and images batched through the encoders: as many as fit
   `prefill_tokens` positions counted padded (every row as long as the longest), and at
   least the oldest (batcher.py rule 2). A new stream joins at a step boundary, and the
   others' next step waits for at most `prefill_tokens` positions of prefill, or one longer
   prompt alone.
3. Slots: one per stream, taken at prefill and given back at `close`; there are as many as the
   stage serves streams, so a stream past them is refused by the stage before it gets here
   (`SlotFull` is the guard). A stream's prompt and answer must fit `max_len` positions.
4. What a stream gets back is what it would get alone: its own last-position logits (and at
   prefill, the hidden states of the layers it asks for), to float rounding of a wider matmul.
   Those states are each row's own copy, cut to its length: a view would keep every layer's
   padded batch alive (B x longest x hidden, per layer) until the last stream of the round has
   built its Talker start; the copies of the two layers the Talker reads are all that stays.
5. A stream's fault is its own (slots.py rule 6): a prefill that fails (a bad image, memory)
   or a row past its slot fails that stream alone; the prefills and steps beside it go on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from turntaker_models.omni.batcher import Gather, StepBatcher
from turntaker_models.omni.slots import SlotCache, isolated, pad_right, padded_positions, within


@dataclass(frozen=True)
class Prefill:
    slot: int
    inputs: dict[str, Any]  # the forward's keyword arguments (ids, media, positions)
    length: int
    # The layers whose hidden states to return (the talker's conditioning; rule 4); () none.
    layers: tuple[int, ...] = ()


@dataclass(frozen=True)
class Step:
    slot: int
    ids: tuple[int, ...]
    positions: torch.Tensor  # [4, 1, len(ids)]


@dataclass(frozen=True)
class Out:
    logits: torch.Tensor  # [V] the row's last position
    # A prefill's hidden states, by layer (`hidden[layer]`: [1, length, hidden], the row's own
    # copy) for the `layers` it asked for; None when it asked for none.
    hidden: dict[int, torch.Tensor] | None = None


Job = Prefill | Step


class ThinkerEngine:
    def __init__(
        self,
        model: Any,
        slots: int,
        max_len: int,
        gather: Gather | None = None,
        prefill_tokens: int = 4096,
    ) -> None:
        self.model = model
        self.prefill_tokens = prefill_tokens
        self.device: torch.device = model.device
        self.cache = SlotCache.for_model(model, slots, max_len)
        self.max_len = self.cache.shape.max_len
        self.batcher: StepBatcher[Job, Out] = StepBatcher(
            "thinker", self._run, max_batch=slots, gather=gather, pick=self._pick
        )

    # --- a stream's side (its own thread) ------------------------------------------------------

    def open(self) -> int:
        return self.cache.take()

    def prefill(
        self, slot: int, inputs: dict[str, Any], length: int, layers: tuple[int, ...] = ()
    ) -> Out:
        return self.batcher.call(slot, Prefill(slot, inputs, length, layers))

    def step(self, slot: int, ids: Sequence[int], positions: torch.Tensor) -> torch.Tensor:
        return self.batcher.call(slot, Step(slot, tuple(ids), positions)).logits

    def close(self, slot: int) -> None:
        self.batcher.leave(slot)
        self.cache.release(slot)

    def shutdown(self) -> None:
        self.batcher.close()

    # --- the batcher's side --------------------------------------------------------------------

    def _pick(self, jobs: Sequence[Job]) -> list[int]:
        """Rule 2: every step, and the oldest prefills that fit the budget."""
        steps = [i for i, job in enumerate(jobs) if isinstance(job, Step)]
        prefills = [(i, job) for i, job in enumerate(jobs) if isinstance(job, Prefill)]
        fit = within(self.prefill_tokens, [job.length for _, job in prefills])
        return steps + [i for i, _ in prefills[:fit]]

    @torch.inference_mode()
    def _run(self, jobs: Sequence[Job]) -> list[Out | BaseException]:
        """Rules 1-2, and rule 5: a row's fault is its own (slots.py rule 6)."""
        results: dict[int, Out | BaseException] = {}
        prefills = [(i, job) for i, job in enumerate(jobs) if isinstance(job, Prefill)]
        steps = [(i, job) for i, job in enumerate(jobs) if isinstance(job, Step)]
        groups: tuple[tuple[list[tuple[int, Any]], Any], ...] = (
            (prefills, self._prefills),
            (steps, lambda rows: [Out(x) for x in self._steps(rows)]),
        )
        for group, forward in groups:
            if group:
                done = isolated(forward, [job for _, job in group])
                results.update(zip([i for i, _ in group], done, strict=True))
        return [results[i] for i in range(len(jobs))]

    def _prefills(self, jobs: Sequence[Prefill]) -> list[Out]:
        q = max(job.length for job in jobs)
        mask = self.cache.select([(job.slot, job.length) for job in jobs])
        ids = pad_right([job.inputs["input_ids"][0] for job in jobs])
        positions = padded_positions([job.inputs["position_ids"] for job in jobs], q, self.device)
        hidden = any(job.layers for job in jobs)
        out = self.model(
            input_ids=ids.to(self.device),
            position_ids=positions,
            attention_mask=mask,
            cache=self.cache,
            use_cache=True,
            output_hidden_states=hidden,
            **self._media(jobs),
        )
        self.cache.advance()
        return [
            Out(
                out.logits[row, job.length - 1],
                {
                    layer: out.hidden_states[layer][row : row + 1, : job.length].clone()
                    for layer in job.layers
                }
                if job.layers
                else None,
            )
            for row, job in enumerate(jobs)
        ]

    def _media(self, jobs: Sequence[Prefill]) -> dict[str, Any]:
        """The rows' audio and images, in row order: the model places the k-th audio (image)
        of the batch at its k-th audio (image) placeholder, row after row. Mel features are
        padded to the longest (the feature mask says which frames are real)."""
        media: dict[str, Any] = {}
        features = [j.inputs for j in jobs if j.inputs.get("input_features") is not None]
        if features:
            frames = max(f["input_features"].shape[-1] for f in features)
            padded, masks = [], []
            for f in features:
                extra = frames - f["input_features"].shape[-1]
                padded.append(torch.nn.functional.pad(f["input_features"], (0, extra)))
                masks.append(torch.nn.functional.pad(f["feature_attention_mask"], (0, extra)))
            media["input_features"] = torch.cat(padded)
            media["feature_attention_mask"] = torch.cat(masks)
        images = [j.inputs for j in jobs if j.inputs.get("pixel_values") is not None]
        if images:
            media["pixel_values"] = torch.cat([i["pixel_values"] for i in images])
            media["image_grid_thw"] = torch.cat([i["image_grid_thw"] for i in images])
        return media

    def _steps(self, steps: Sequence[Step]) -> list[torch.Tensor]:
        q = max(len(step.ids) for step in steps)
        mask = self.cache.select([(step.slot, len(step.ids)) for step in steps])
        ids = pad_right([torch.tensor(step.ids) for step in steps])
        positions = padded_positions([step.positions for step in steps], q, self.device)
        out = self.model(
            input_ids=ids.to(self.device),
            position_ids=positions,
            attention_mask=mask,
            cache=self.cache,
            use_cache=True,
        )
        self.cache.advance()
        return [out.logits[row, len(step.ids) - 1] for row, step in enumerate(steps)]

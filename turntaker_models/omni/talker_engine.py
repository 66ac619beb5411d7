"""The Talker's forwards for every stream of a stage, batched: one forward per frame.

A `TalkerSession` with an engine runs no talker forward itself: its prefill and each frame
become a job of the engine's batcher (batcher.py), and its KV cache is a slot of the engine's
`SlotCache` (slots.py).

Rules:
1. A round runs every waiting one-position step as one forward, and the oldest prefills that
   fit `prefill_tokens` positions counted padded (slots.py `within`) as another, each row's
   logits and last hidden state read at its own last position.
2. The code predictor runs codebooks 1..G-1 of every row of the round at once.
3. A slot holds `max_len` positions: the prefill (every user-turn position of the
   conversation) and one per frame after it. A stream's frames are capped by that room: its
   session ends its audio where the next frame would not fit (`TalkerSession.slot_full`)
   instead of sending it.
4. A stream's fault is its own (slots.py rule 6): a forward or a prediction that fails (a row
   past its slot's room makes the slot cache refuse the forward, `SlotExhausted`) is run
   again row by row, so only the rows that fail alone hear an error, and the others' frames
   are what they are alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from turntaker_models.omni.batcher import Gather, StepBatcher
from turntaker_models.omni.sampling import SamplingConfig, choose
from turntaker_models.omni.slots import SlotCache, isolated, padded_positions, within

# A stream's codebook-0 rule: given its talker logits [V], the token, and whether the frame
# goes on to its other codebooks (False at codec EOS or the length cap).
ChooseFirst = Callable[[torch.Tensor], tuple[int, bool]]


@dataclass(frozen=True)
class Frame:
    slot: int
    embeds: torch.Tensor  # [1, q, H]: the prefill (q > 1) or one step
    positions: torch.Tensor  # [4, 1, q]
    choose_first: ChooseFirst
    sampling: SamplingConfig  # the code predictor's
    generator: torch.Generator | None


@dataclass(frozen=True)
class Framed:
    hidden: torch.Tensor  # [1, 1, H] the talker's last hidden state
    codes: list[int] | None  # codebooks 0..G-1; None: the stream ends (EOS or the cap)
    rows: list[torch.Tensor]  # each codebook's embedding [H]: their sum is the next input


class TalkerEngine:
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
        self.groups = int(model.config.num_code_groups)
        self.batcher: StepBatcher[Frame, Framed] = StepBatcher(
            "talker", self._run, max_batch=slots, gather=gather, pick=self._pick
        )

    # --- a stream's side (its own thread) ------------------------------------------------------

    def open(self) -> int:
        return self.cache.take()

    def frame(self, job: Frame) -> Framed:
        return self.batcher.call(job.slot, job)

    def close(self, slot: int) -> None:
        self.batcher.leave(slot)
        self.cache.release(slot)

    def shutdown(self) -> None:
        self.batcher.close()

    # --- the batcher's side ------------------------------------------------------------------

    def _pick(self, jobs: Sequence[Frame]) -> list[int]:
        """Rule 1: every one-position step, and the oldest prefills that fit the budget."""
        steps = [i for i, job in enumerate(jobs) if job.embeds.shape[1] == 1]
        prefills = [i for i, job in enumerate(jobs) if job.embeds.shape[1] > 1]
        fit = within(self.prefill_tokens, [jobs[i].embeds.shape[1] for i in prefills])
        return steps + prefills[:fit]

    @torch.inference_mode()
    def _run(self, jobs: Sequence[Frame]) -> list[Framed | BaseException]:
        """Rules 1, 2 and 4."""
        order = [i for i, job in enumerate(jobs) if job.embeds.shape[1] > 1]
        steps = [i for i, job in enumerate(jobs) if job.embeds.shape[1] == 1]
        outs: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        results: dict[int, Framed | BaseException] = {}
        for group in (order, steps):
            if group:
                done = isolated(self._forward, [jobs[i] for i in group])
                for i, out in zip(group, done, strict=True):
                    if isinstance(out, Exception):
                        results[i] = out
                    else:
                        outs[i] = out
        firsts: dict[int, int] = {}
        for i in order + steps:
            if i not in outs:
                continue
            logits, hidden = outs[i]
            try:
                token, goes_on = jobs[i].choose_first(logits)
            except Exception as error:  # batcher.py rule 4: that stream's error only
                results[i] = error
                continue
            if goes_on:
                firsts[i] = token
            else:
                results[i] = Framed(hidden, None, [])
        if firsts:

            def predict(rows: Sequence[int]) -> list[tuple[list[int], list[torch.Tensor]]]:
                return self._predict(
                    [outs[i][1] for i in rows], [firsts[i] for i in rows], [jobs[i] for i in rows]
                )

            rows = list(firsts)
            for i, predicted in zip(rows, isolated(predict, rows), strict=True):
                if isinstance(predicted, Exception):
                    results[i] = predicted
                else:
                    codes, embedded = predicted
                    results[i] = Framed(outs[i][1], codes, embedded)
        return [results[i] for i in range(len(jobs))]

    def _forward(self, jobs: Sequence[Frame]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """One talker forward over `jobs` (prefills, or one-position steps), padded on the
        right to the longest: each row's logits [V] and last hidden state [1, 1, H] at its
        own last position."""
        lengths = [job.embeds.shape[1] for job in jobs]
        q = max(lengths)
        mask = self.cache.select(list(zip([job.slot for job in jobs], lengths, strict=True)))
        embeds = torch.zeros(len(jobs), q, jobs[0].embeds.shape[-1], dtype=self.model.dtype)
        embeds = embeds.to(self.device)
        for row, job in enumerate(jobs):
            embeds[row, : lengths[row]] = job.embeds[0].to(self.device, self.model.dtype)
        positions = padded_positions([job.positions for job in jobs], q, self.device)
        out = self.model(
            inputs_embeds=embeds,
            position_ids=positions,
            attention_mask=mask,
            cache=self.cache,
            use_cache=True,
            output_hidden_states=True,
            # Only generate()'s bookkeeping reads it; the forward fails without a number.
            generation_step=0,
        )
        self.cache.advance()
        # generate() reads the talker's last hidden state from its hidden-state list.
        last = out.hidden_states[0][-1]
        return [
            (out.logits[row, n - 1].float(), last[row : row + 1, n - 1 : n])
            for row, n in enumerate(lengths)
        ]

    def _predict(
        self, hidden: list[torch.Tensor], firsts: list[int], jobs: list[Frame]
    ) -> list[tuple[list[int], list[torch.Tensor]]]:
        """Rule 2: codebooks 1..G-1 of every row at once."""
        from transformers import DynamicCache

        model = self.model
        predictor = model.code_predictor
        device = self.device
        tokens = torch.tensor([[t] for t in firsts], device=device)
        first_rows = model.get_input_embeddings()(tokens)
        embeds = torch.cat([torch.cat([h.to(device) for h in hidden]), first_rows], dim=1)
        cache = DynamicCache(config=predictor.config)
        codes = [[t] for t in firsts]
        rows = [[first_rows[i, 0]] for i in range(len(jobs))]
        position = 0
        for group in range(self.groups - 1):
            length = embeds.shape[1]
            steps = torch.arange(position, position + length, device=device)
            out = predictor.model(
                inputs_embeds=embeds,
                position_ids=steps[None].expand(len(jobs), -1),
                cache=cache,
                use_cache=True,
            )
            position += length
            logits = predictor.lm_head[group](out.last_hidden_state[:, -1])
            chosen = [choose(logits[i], job.sampling, job.generator) for i, job in enumerate(jobs)]
            embeds = predictor.model.codec_embedding[group](
                torch.tensor([[code] for code in chosen], device=device)
            )
            for i, code in enumerate(chosen):
                codes[i].append(code)
                rows[i].append(embeds[i, 0])
        return list(zip(codes, rows, strict=True))

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from turntaker_models.omni.batcher import Gather, StepBatcher
from turntaker_models.omni.sampling import SamplingConfig, choose
from turntaker_models.omni.slots import SlotCache, shape_of

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


def one_prefill(jobs: Sequence[Frame]) -> list[int]:
    """Rule 1: every one-position step, and the first prefill waiting."""
    steps = [i for i, job in enumerate(jobs) if job.embeds.shape[1] == 1]
    prefills = [i for i, job in enumerate(jobs) if job.embeds.shape[1] > 1]
    return steps + prefills[:1]


class TalkerEngine:
    def __init__(self, model: Any, slots: int, max_len: int, gather: Gather | None = None) -> None:
        self.model = model
        self.device: torch.device = model.device
        text_config = model.config.text_config
        self.max_len = min(max_len, int(text_config.max_position_embeddings))
        sdpa = model.config._attn_implementation == "sdpa"
        self.cache = SlotCache(
            shape_of(text_config, slots, self.max_len), model.dtype, self.device, sdpa
        )
        self.groups = int(model.config.num_code_groups)
        self._slots = threading.Lock()
        self.batcher: StepBatcher[Frame, Framed] = StepBatcher(
            "talker", self._run, max_batch=slots, gather=gather, pick=one_prefill
        )

    # --- a stream's side (its own thread) ------------------------------------------------------

    def open(self) -> int:
        with self._slots:
            return self.cache.take()

    def frame(self, job: Frame) -> Framed:
        return self.batcher.call(job.slot, job)

    def close(self, slot: int) -> None:
        self.batcher.leave(slot)
        with self._slots:
            self.cache.release(slot)

    def shutdown(self) -> None:
        self.batcher.close()

    # --- the batcher's side ------------------------------------------------------------------

    @torch.inference_mode()
    def _run(self, jobs: Sequence[Frame]) -> list[Framed | BaseException]:
        """Rule 1."""
        order = [i for i, job in enumerate(jobs) if job.embeds.shape[1] > 1]
        steps = [i for i, job in enumerate(jobs) if job.embeds.shape[1] == 1]
        outs: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        for i in order:
            outs[i] = self._forward([jobs[i]])[0]
        if steps:
            outs.update(zip(steps, self._forward([jobs[i] for i in steps]), strict=True))
        firsts: dict[int, int] = {}
        results: dict[int, Framed | BaseException] = {}
        for i in order + steps:
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
            rows = list(firsts)
            predicted = self._predict(
                [outs[i][1] for i in rows], [firsts[i] for i in rows], [jobs[i] for i in rows]
            )
            for i, (codes, embedded) in zip(rows, predicted, strict=True):
                results[i] = Framed(outs[i][1], codes, embedded)
        return [results[i] for i in range(len(jobs))]

    def _forward(self, jobs: Sequence[Frame]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """One talker forward over `jobs`, all of one length (one prefill, or one-position
        steps): each row's last logits [V] and last hidden state [1, 1, H]."""
        mask = self.cache.select([(job.slot, job.embeds.shape[1]) for job in jobs])
        embeds = torch.cat([job.embeds.to(self.device, self.model.dtype) for job in jobs])
        positions = torch.cat([job.positions.to(self.device) for job in jobs], dim=1)
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
        return [(out.logits[row, -1].float(), last[row : row + 1, -1:]) for row in range(len(jobs))]

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

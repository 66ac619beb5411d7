"""Token choice shared by the stages: greedy, or temperature / top-k / top-p with a seeded RNG."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch


class Cancelled(Exception):
    """The stream was cancelled at a cancellation point."""


CancelCheck = Callable[[], bool]


def check(cancelled: CancelCheck) -> None:
    if cancelled():
        raise Cancelled


@dataclass(frozen=True)
class SamplingConfig:
    temperature: float = 0.0  # 0: greedy
    top_p: float = 1.0
    top_k: int = 0  # 0: no top-k

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0


def choose(logits: torch.Tensor, config: SamplingConfig, generator: torch.Generator | None) -> int:
    """One token id from a [vocab] logits row."""
    scores = logits.float()
    if config.greedy:
        return int(torch.argmax(scores).item())
    scores = scores / config.temperature
    if config.top_k > 0:
        kth = torch.topk(scores, min(config.top_k, scores.shape[-1])).values[-1]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if config.top_p < 1.0:
        ordered, order = torch.sort(scores, descending=True)
        cumulative = torch.softmax(ordered, dim=-1).cumsum(-1)
        # Keep the smallest prefix whose mass reaches top_p (always at least one token).
        drop = cumulative - torch.softmax(ordered, dim=-1) >= config.top_p
        scores = scores.scatter(0, order, ordered.masked_fill(drop, float("-inf")))
    probs = torch.softmax(scores, dim=-1)
    return int(torch.multinomial(probs, 1, generator=generator).item())


def repetition_penalty(logits: torch.Tensor, seen: torch.Tensor, penalty: float) -> torch.Tensor:
    """HF's RepetitionPenaltyLogitsProcessor on one [vocab] row; `seen` holds earlier ids."""
    if seen.numel() == 0 or penalty == 1.0:
        return logits
    picked = logits.gather(0, seen)
    picked = torch.where(picked < 0, picked * penalty, picked / penalty)
    return logits.scatter(0, seen, picked)


def generator_for(seed: int, device: torch.device) -> torch.Generator:
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    return generator

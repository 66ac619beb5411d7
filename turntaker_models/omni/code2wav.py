"""Streaming Code2Wav: decode codec frames in windows with left context, exact lengths.

Code2Wav has no streaming API. A window of n frames yields n*U - T samples (U = total upsample,
1920; T = 555 trimmed by the transposed convolutions), and its last T samples' worth of true
output depends on the next frame. So after decoding frames [s, e) the samples of the full
decode up to e*U - T are final; each window emits from where the previous one stopped, and the
last one ends at N*U - T: exactly the full decode's length. The decoder is causal, so padding a
window on the right never changes the samples it emits; windows are padded up to a few fixed
lengths that were warmed up at load (the first call per shape is slow on CPU).

Left context: with at least the decoder's receptive field (all frames, in the exactness test)
the stream equals the full decode to float rounding; the default 25 frames (Qwen's) is close.

A stream calls a `Decoder` for its windows: the plain `decode` (one forward per window), or a
stage's `BatchedDecoder`, where every stream's windows meet (batcher.py) and windows of one
length run as one forward.

Rules (batched decode):
1. A row of a batched forward equals the row's own forward, to float rounding (the model's
   dtype; measured on the tiny float32 weights: at most ~4e-7 of the signal's scale, not
   bit-exact, as the matmul and convolution kernels block differently per batch size).
   Nothing in Qwen3OmniMoeCode2Wav mixes rows: the code embeddings are averaged per frame;
   the pre-transformer is causal sliding-window attention with no padding mask (rows of one
   length share positions 0..n-1), RMSNorm per frame, rotary positions from those shared ids;
   the upsampler and decoder are per-row causal (transposed) convolutions, LayerNorm per time
   step, elementwise SnakeBeta and a clamp. No batch norm, no reduction over the batch.
2. Only windows of one length share a forward, so no row is padded for another's sake: right
   padding would not change a row's emitted samples (causal), but a 2-frame first chunk padded
   to 33 frames costs 16 times the compute. Streams pad their windows to `WindowPlan.shapes()`
   (five lengths), so few lengths are waiting at once.
3. A round runs one length: the oldest waiting window's, with every waiting window of that
   length. First come first served, nothing starves, and a round's callers get their audio
   after their own forward, not after every length's.
4. Cancellation is checked before a window goes to the decoder and again when its audio comes
   back: a stream cancelled while its window waited for a round emits nothing more.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from turntaker_models.omni.batcher import Gather, StepBatcher
from turntaker_models.omni.sampling import CancelCheck, check

Window = npt.NDArray[np.int64]  # [G, n] codes, n frames
Samples = npt.NDArray[np.float32]
Decoder = Callable[[Window], Samples]


@dataclass(frozen=True)
class WindowPlan:
    first_frames: int = 2  # the first chunk: 2 frames = ~57 ms of audio, out fast
    chunk_frames: int = 8  # later chunks: 8 frames = 640 ms
    left_context: int | None = 25  # None: every earlier frame (exact, grows without bound)

    def shapes(self) -> list[int]:
        """Window lengths a stream uses (left context bounded); right padding rounds up to one."""
        if self.left_context is None:
            return []
        lengths = {self.first_frames}
        end = self.first_frames
        while True:
            start = max(0, end - self.left_context)
            end += self.chunk_frames
            lengths.add(end - start)
            if start > 0:
                break
        return sorted(lengths)


class Code2WavStream:
    """One stream's frame buffer and emission point. `push` frames, `flush` at the end."""

    def __init__(
        self,
        model: Any,
        plan: WindowPlan,
        trim: int,
        cancelled: CancelCheck,
        decoder: Decoder | None = None,
    ) -> None:
        self.model = model
        self.decoder: Decoder = decoder or partial(decode, model)
        self.plan = plan
        self.cancelled = cancelled
        self.groups = int(model.config.num_quantizers)
        self.upsample = int(model.total_upsample)
        self.trim = trim
        self.padded_lengths = plan.shapes()
        # frames[i] is frame number base + i; only the left context is kept.
        self.frames: list[npt.NDArray[np.int64]] = []
        self.base = 0
        self.decoded_until = 0  # frames covered by emitted audio (plus the tail rule)
        self.emitted = 0  # samples emitted so far

    @property
    def total_frames(self) -> int:
        return self.base + len(self.frames)

    def push(self, codes: npt.NDArray[np.int64]) -> npt.NDArray[np.float32] | None:
        """Add one frame of G codes; returns audio when a chunk is due."""
        codes = np.asarray(codes, np.int64).reshape(-1)
        if codes.shape[0] != self.groups:
            raise ValueError(f"a frame has {self.groups} codes, got {codes.shape[0]}")
        self.frames.append(codes)
        due = self.plan.first_frames if self.decoded_until == 0 else self.plan.chunk_frames
        if self.total_frames - self.decoded_until >= due:
            return self._decode()
        return None

    def flush(self) -> npt.NDArray[np.float32] | None:
        if self.total_frames > self.decoded_until:
            return self._decode()
        return None

    def close(self) -> None:
        self.frames = []

    @torch.inference_mode()
    def _decode(self) -> npt.NDArray[np.float32]:
        check(self.cancelled)
        end = self.total_frames
        start = self.base
        if self.plan.left_context is not None:
            start = max(self.base, self.decoded_until - self.plan.left_context)
        # The window must start before the emission point (at least one frame of context).
        start = min(start, max(0, self.decoded_until - 1))
        window = np.stack(self.frames[start - self.base : end - self.base], axis=1)
        length = window.shape[1]
        padded = next((n for n in self.padded_lengths if n >= length), length)
        if padded > length:
            # Causal decoder: frames appended on the right change nothing before them.
            window = np.concatenate([window, np.repeat(window[:, -1:], padded - length, 1)], 1)
        wav = self.decoder(window)
        # Rule 4: a batched window may wait a round or more; a stream cancelled meanwhile
        # emits nothing more.
        check(self.cancelled)
        stop = end * self.upsample - self.trim
        audio = wav[self.emitted - start * self.upsample : stop - start * self.upsample]
        self.emitted = stop
        self.decoded_until = end
        if self.plan.left_context is not None:
            keep = max(0, end - self.plan.left_context - 1)
            if keep > self.base:
                del self.frames[: keep - self.base]
                self.base = keep
        return np.ascontiguousarray(audio, np.float32)


def decode(model: Any, window: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
    """Full Code2Wav decode of [G, n] codes -> float32 samples."""
    codes = torch.from_numpy(np.ascontiguousarray(window)).to(model.device)[None]
    wav: torch.Tensor = model(codes)
    return wav[0, 0].detach().float().cpu().numpy()


@torch.inference_mode()
def decode_batch(model: Any, windows: Sequence[Window]) -> list[Samples | BaseException]:
    """Each window's samples, one forward per window length (rules 1 and 2).

    An error of one length's forward reaches that length's windows only.
    """
    by_length: dict[tuple[int, ...], list[int]] = {}
    for i, window in enumerate(windows):
        by_length.setdefault(tuple(window.shape), []).append(i)
    results: list[Samples | BaseException] = [RuntimeError("not decoded")] * len(windows)
    for rows in by_length.values():
        try:
            codes = np.stack([np.asarray(windows[i], np.int64) for i in rows])
            wav: torch.Tensor = model(torch.from_numpy(codes).to(model.device))
            samples = wav[:, 0].detach().float().cpu().numpy()
        except Exception as error:
            for i in rows:
                results[i] = error
            continue
        for row, i in enumerate(rows):
            # A copy: a stream's chunk must not keep the whole batch's audio alive.
            results[i] = samples[row].copy()
    return results


def pick_oldest_length(windows: Sequence[Window]) -> list[int]:
    """Rule 3: every waiting window as long as the oldest one (waiting jobs come oldest first)."""
    if not windows:
        return []
    shape = windows[0].shape
    return [i for i, window in enumerate(windows) if window.shape == shape]


class BatchedDecoder:
    """One per stage: every stream's windows meet in one `StepBatcher` (rules 1-3)."""

    # Streams do not step together here: each calls once per chunk (8 frames, 640 ms of
    # audio), so a round waits for the last round's streams briefly at most. A batched talker
    # sends its streams' frames at one step: their windows come within a millisecond or two.
    GATHER = Gather(ratio=0.25, min_s=0.0005, max_s=0.002)

    def __init__(self, model: Any, max_batch: int, gather: Gather | None = None) -> None:
        self.model = model
        self.batcher: StepBatcher[Window, Samples] = StepBatcher(
            "code2wav",
            partial(decode_batch, model),
            max_batch,
            gather or self.GATHER,
            pick_oldest_length,
        )

    def decoder(self, member: Hashable) -> Decoder:
        """The decoder for one stream; `member` names it to the batcher until it `leave`s."""
        return partial(self.batcher.call, member)

    def leave(self, member: Hashable) -> None:
        self.batcher.leave(member)

    def close(self) -> None:
        self.batcher.close()


def trim_samples(model: Any) -> int:
    """Samples lost per decode (n*U - output length); 555 for Qwen3-Omni's decoder."""
    frames = 2
    probe = np.zeros((int(model.config.num_quantizers), frames), np.int64)
    with torch.inference_mode():
        out = decode(model, probe)
    return frames * int(model.total_upsample) - out.shape[0]


def warm_up(model: Any, plan: WindowPlan) -> None:
    """Decode once at every window length the plan uses."""
    groups = int(model.config.num_quantizers)
    with torch.inference_mode():
        for length in plan.shapes() or [plan.first_frames, plan.chunk_frames]:
            decode(model, np.zeros((groups, length), np.int64))

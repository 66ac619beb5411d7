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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from turntaker_models.omni.sampling import CancelCheck, check


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

    def __init__(self, model: Any, plan: WindowPlan, trim: int, cancelled: CancelCheck) -> None:
        self.model = model
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
        wav = decode(self.model, window)
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

"""Streaming Code2Wav: exact with full left context, exact total length, bounded buffer."""

from __future__ import annotations

import numpy as np
import pytest

from tests.turntaker_models.omni.conftest import Tiny
from turntaker_models.omni.code2wav import (
    Code2WavStream,
    WindowPlan,
    decode,
    trim_samples,
    warm_up,
)
from turntaker_models.omni.sampling import Cancelled


def _codes(tiny: Tiny, frames: int, seed: int = 0) -> np.ndarray:
    groups = tiny.config.code2wav_config.num_quantizers
    size = tiny.config.code2wav_config.codebook_size
    return np.random.default_rng(seed).integers(0, size, (groups, frames), dtype=np.int64)


def _stream(tiny: Tiny, codes: np.ndarray, plan: WindowPlan) -> list[np.ndarray]:
    stream = Code2WavStream(tiny.code2wav, plan, trim_samples(tiny.code2wav), lambda: False)
    chunks = [stream.push(codes[:, i]) for i in range(codes.shape[1])]
    chunks.append(stream.flush())
    return [c for c in chunks if c is not None]


def test_trim_is_qwens_555(tiny: Tiny) -> None:
    assert int(tiny.code2wav.total_upsample) == 1920
    assert trim_samples(tiny.code2wav) == 555


@pytest.mark.parametrize("frames", [1, 2, 3, 17, 40])
def test_full_context_stream_equals_full_decode(tiny: Tiny, frames: int) -> None:
    codes = _codes(tiny, frames)
    full = decode(tiny.code2wav, codes)
    assert full.shape[0] == frames * 1920 - 555
    chunks = _stream(tiny, codes, WindowPlan(first_frames=2, chunk_frames=5, left_context=None))
    streamed = np.concatenate(chunks)
    assert streamed.shape == full.shape
    # Random tiny weights give a very quiet signal: compare relative to its scale.
    scale = float(np.abs(full).max())
    assert scale > 0
    assert float(np.abs(streamed - full).max()) <= 1e-5 * scale
    # First chunk: 2 frames -> 2*1920 - 555 samples, out after the second frame.
    if frames >= 2:
        assert chunks[0].shape[0] == 2 * 1920 - 555


def test_bounded_context_stream_has_exact_length_and_small_error(tiny: Tiny) -> None:
    codes = _codes(tiny, 60, seed=1)
    full = decode(tiny.code2wav, codes)
    plan = WindowPlan()
    warm_up(tiny.code2wav, plan)
    stream = Code2WavStream(tiny.code2wav, plan, trim_samples(tiny.code2wav), lambda: False)
    chunks = []
    for i in range(codes.shape[1]):
        chunk = stream.push(codes[:, i])
        if chunk is not None:
            chunks.append(chunk)
        # Only the left context (plus one frame) is kept, whatever the stream's length.
        assert len(stream.frames) <= plan.left_context + plan.chunk_frames + 1
    tail = stream.flush()
    if tail is not None:
        chunks.append(tail)
    streamed = np.concatenate(chunks)
    assert streamed.shape == full.shape
    # 25 frames of left context is less than the decoder's receptive field (the tiny one's
    # attention alone sees 72 frames back): close, not exact.
    scale = float(np.abs(full).max())
    error = float(np.abs(streamed - full).max()) / scale
    print(f"\ncode2wav stream, 25 frames of left context: max error {error:.2e} of full scale")
    assert error < 0.1


def test_cancel_before_window(tiny: Tiny) -> None:
    stream = Code2WavStream(tiny.code2wav, WindowPlan(), 555, lambda: True)
    codes = _codes(tiny, 2)
    assert stream.push(codes[:, 0]) is None
    with pytest.raises(Cancelled):
        stream.push(codes[:, 1])


def test_plan_shapes() -> None:
    assert WindowPlan(first_frames=2, chunk_frames=8, left_context=25).shapes() == [
        2,
        10,
        18,
        26,
        33,
    ]
    assert WindowPlan(left_context=None).shapes() == []

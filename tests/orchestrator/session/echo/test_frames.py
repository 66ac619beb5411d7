"""echo/frames.py: an input's 10 ms frames, the partial one carried."""

from __future__ import annotations

import numpy as np

from orchestrator.session.echo.frames import FRAME, Frames


def _all(frames: Frames, near: np.ndarray, far: np.ndarray, splits: list[int]) -> np.ndarray:
    out, at = [], 0
    for end in [*splits, near.size]:
        framed = frames.add(at, near[at:end], far[at:end])
        assert framed.near.shape == framed.far.shape
        out.append(framed.near)
        at = end
    return np.concatenate(out)


def test_rule1_any_split_of_the_same_samples_gives_the_same_frames() -> None:
    rng = np.random.default_rng(0)
    near = rng.integers(-3000, 3000, 10 * FRAME + 7).astype(np.int16)
    far = rng.integers(-3000, 3000, near.size).astype(np.int16)
    whole = _all(Frames(), near, far, [])
    split = _all(Frames(), near, far, [1, 239, 241, 1000, 1001, 2399])
    assert whole.shape == (10, FRAME)
    np.testing.assert_array_equal(whole, split)


def test_rule2_after_a_gap_frames_start_at_the_append_s_own_frame() -> None:
    frames = Frames()
    samples = np.ones(FRAME, np.int16)
    assert frames.add(0, samples[:100], samples[:100]).restarted
    assert not frames.add(100, samples[:100], samples[:100]).near.size, "still carried"
    framed = frames.add(10 * FRAME + 40, samples, samples)
    assert framed.restarted and framed.first == 10
    assert framed.near.shape == (1, FRAME)
    assert not framed.near[0, :40].any(), "zeros before the append's first sample"

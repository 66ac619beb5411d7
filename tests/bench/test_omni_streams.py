"""bench/omni_streams.py's arithmetic, without a server (its rounds run in test_gpu_omni.py)."""

from __future__ import annotations

import math

from bench.omni_streams import Stream


def test_frames_per_second_counts_audio_after_the_first_chunk() -> None:
    # 3 chunks of 2 frames 0.1 s apart: the 4 frames after the first chunk took 0.2 s.
    stream = Stream(sent_at=0.0, samples=[3840, 3840, 3840], times=[1.0, 1.1, 1.2])
    assert math.isclose(stream.frames_per_s(), 20.0)
    assert math.isnan(Stream(sent_at=0.0, samples=[3840], times=[1.0]).frames_per_s())

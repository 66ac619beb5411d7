"""bench/omni_streams.py's arithmetic, without a server (its rounds run in test_gpu_omni.py)."""

from __future__ import annotations

import math

import numpy as np

from bench.omni_streams import Stream


def test_frames_per_second_counts_audio_after_the_first_chunk() -> None:
    # 3 chunks of 2 frames 0.1 s apart: the 4 frames after the first chunk took 0.2 s.
    stream = Stream(sent_at=0.0, samples=[3840, 3840, 3840], times=[1.0, 1.1, 1.2])
    assert math.isclose(stream.frames_per_s(), 20.0)
    assert math.isnan(Stream(sent_at=0.0, samples=[3840], times=[1.0]).frames_per_s())


def test_a_direct_stream_ends_once_every_request_it_spawned_has_ended() -> None:
    # Rule 3 of bench/omni_direct.py: a downstream request counts from the upstream send.
    from bench.omni_direct import DirectChunk, _End, _Flow, _Reply

    flow = _Flow()
    sent: list[_Reply] = []
    thinker = _Reply(flow, lambda outputs: sent.append(_Reply(flow, lambda _: None)))
    thinker.send({"T_KIND": np.zeros(1, np.int32)})
    thinker.close()
    assert flow.items.empty(), "the stream ended with the talker's request still open"
    sent[0].close()
    assert isinstance(flow.items.get_nowait(), _End)
    assert DirectChunk(b"", np.zeros(0, np.float32), 0.0).received_at == 0.0

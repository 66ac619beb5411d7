"""InputBuffer: audio kept in the format it arrived in, a clock across formats, bounded."""

from __future__ import annotations

import pytest

from orchestrator.protocol.session_config import PCM16, PCMU
from orchestrator.session.input_buffer import BufferFull, InputBuffer


def test_a_format_switch_starts_a_new_tagged_run() -> None:
    buffer = InputBuffer(1 << 20)
    buffer.append(b"\x7f" * 800, PCMU, detect=False)  # 100 ms at 8 kHz
    buffer.append(b"\0\0" * 2400, PCM16, detect=False)  # 100 ms at 24 kHz
    buffer.append(b"\0\0" * 2400, PCM16, detect=False)
    assert buffer.buffered_ms == 300
    parts = buffer.take()
    assert [(p.format, len(p.audio)) for p in parts] == [(PCMU, 800), (PCM16, 9600)]
    assert buffer.buffered_ms == 0 and buffer.nbytes == 0


def test_the_clock_runs_across_formats_commits_and_detection_off() -> None:
    buffer = InputBuffer(1 << 20)
    buffer.append(b"\x7f" * 800, PCMU, detect=False)
    buffer.take()
    buffer.append(b"\0\0" * 4800, PCM16, detect=False)
    assert buffer.clock_ms == 300


def test_chunk_ends_lie_on_the_clock_and_increase_over_a_detection_restart() -> None:
    buffer = InputBuffer(1 << 20)
    buffer.append(b"\0\0" * 2400, PCM16, detect=False)  # 0-100 ms, not cut
    first = buffer.append(b"\0\0" * 7200, PCM16, detect=True)  # 100-400 ms
    assert first is not None and first.end_ms[0] == 100 + 32
    second = buffer.append(b"\x7f" * 2400, PCMU, detect=True)  # a new run, 400-700 ms
    assert second is not None and second.end_ms[0] > first.end_ms[-1]
    assert all(c.shape == (512,) for c in second.chunks)


def test_the_buffer_is_bounded_and_unchanged_by_a_refused_append() -> None:
    buffer = InputBuffer(1000)
    buffer.append(b"\0" * 800, PCM16, detect=False)
    with pytest.raises(BufferFull):
        buffer.append(b"\0" * 400, PCM16, detect=False)
    assert buffer.nbytes == 800

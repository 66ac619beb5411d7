"""Server VAD segmentation: one test per rule of `orchestrator.turn_detection`, then properties."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.inputs import VadEvent, VadSpeechStarted, VadSpeechStopped
from orchestrator.protocol.session_config import ServerVad
from orchestrator.turn_detection import CHUNK_MS, AudioEnd, TurnDetector, silence_threshold

DEFAULT = ServerVad()  # threshold 0.5, prefix 300 ms, silence 500 ms
S, N = 0.9, 0.05  # clear speech, clear silence
SILENCE_CHUNKS = math.ceil(DEFAULT.silence_duration_ms / CHUNK_MS)  # 16 chunks = 512 ms


def run(
    probs: list[float],
    config: ServerVad = DEFAULT,
    audio_end: AudioEnd = "after_silence",
    detector: TurnDetector | None = None,
    first_end: int = CHUNK_MS,
) -> list[tuple[int, VadEvent]]:
    """Feed chunk i ending at first_end + 32 i; returns (chunk index, event) pairs."""
    d = detector if detector is not None else TurnDetector(config, audio_end=audio_end)
    out: list[tuple[int, VadEvent]] = []
    for i, p in enumerate(probs):
        out.extend((i, e) for e in d.feed(p, first_end + CHUNK_MS * i))
    return out


def test_speech_starts_at_threshold_inclusive() -> None:
    assert run([0.49] * 50) == []
    assert run([0.2, 0.5]) == [(1, VadSpeechStarted(audio_start_ms=0))]


def test_audio_start_is_chunk_start_minus_prefix_padding() -> None:
    events = run([N] * 20 + [S])  # chunk 20 spans [640, 672)
    assert events == [(20, VadSpeechStarted(audio_start_ms=640 - 300))]
    no_pad = ServerVad(prefix_padding_ms=0)
    assert run([N] * 20 + [S], no_pad) == [(20, VadSpeechStarted(audio_start_ms=640))]


def test_audio_start_is_never_negative() -> None:
    assert run([N, N, S]) == [(2, VadSpeechStarted(audio_start_ms=0))]


def test_a_single_chunk_blip_is_a_turn() -> None:
    events = run([S] + [N] * 40)
    # Silence runs from 32 ms; 16 chunks later (544 ms) it is >= 500 ms long.
    assert events == [
        (0, VadSpeechStarted(audio_start_ms=0)),
        (SILENCE_CHUNKS, VadSpeechStopped(audio_end_ms=32 + SILENCE_CHUNKS * CHUNK_MS)),
    ]


def test_audio_end_after_silence_by_default_or_at_speech_end() -> None:
    probs = [N] * 10 + [S] * 20 + [N] * 40  # speech [320, 960)
    after = run(probs)
    assert after[-1] == (29 + SILENCE_CHUNKS, VadSpeechStopped(audio_end_ms=960 + 512))
    speech_end = run(probs, audio_end="speech_end")
    assert speech_end[-1] == (29 + SILENCE_CHUNKS, VadSpeechStopped(audio_end_ms=960))
    d = TurnDetector(DEFAULT)
    run(probs, detector=d)
    assert d.last_speech_end_ms == 960


def test_stop_needs_continuous_silence() -> None:
    gap = SILENCE_CHUNKS - 1  # 480 ms: one chunk short
    probs = [S] + ([N] * gap + [S]) * 5 + [N] * (SILENCE_CHUNKS + 5)
    events = run(probs)
    assert [type(e) for _, e in events] == [VadSpeechStarted, VadSpeechStopped]
    assert events[1][0] == len(probs) - 6


def test_silence_duration_is_respected_exactly() -> None:
    cfg = ServerVad(silence_duration_ms=64)
    events = run([S, N, N, N], cfg)
    assert events[-1] == (2, VadSpeechStopped(audio_end_ms=96))
    zero = ServerVad(silence_duration_ms=0)
    assert run([S, N], zero)[-1] == (1, VadSpeechStopped(audio_end_ms=64))


def test_hysteresis_band_starts_no_silence() -> None:
    band = 0.4  # below threshold 0.5, above silence threshold 0.35
    assert silence_threshold(0.5) == pytest.approx(0.35)
    events = run([S] + [band] * 100)
    assert events == [(0, VadSpeechStarted(audio_start_ms=0))]  # the turn stays open


def test_hysteresis_band_does_not_cancel_a_running_silence() -> None:
    band = 0.4
    events = run([S, N] + [band] * 30)
    # The silence run began at 32 ms with the N chunk; band chunks let it run on.
    assert events[-1] == (SILENCE_CHUNKS, VadSpeechStopped(audio_end_ms=544))


def test_speech_cancels_a_running_silence() -> None:
    events = run([S, N, N, N, S] + [N] * 30)
    assert events[-1] == (4 + SILENCE_CHUNKS, VadSpeechStopped(audio_end_ms=160 + 512))


def test_silence_threshold_has_a_floor() -> None:
    assert silence_threshold(0.1) == 0.01
    cfg = ServerVad(threshold=0.1)
    assert [type(e) for _, e in run([0.2] + [0.005] * 20, cfg)] == [
        VadSpeechStarted,
        VadSpeechStopped,
    ]


def test_nan_probability_is_neutral() -> None:
    nan = float("nan")
    assert run([nan] * 5) == []
    events = run([S, N] + [nan] * 30)
    assert events[-1] == (SILENCE_CHUNKS, VadSpeechStopped(audio_end_ms=544))


def test_next_turn_never_starts_before_the_previous_stop() -> None:
    probs = [S] + [N] * SILENCE_CHUNKS + [S]
    events = run(probs)
    stop_at = events[1][1]
    assert isinstance(stop_at, VadSpeechStopped)
    # The new onset is 32 ms after the stop; padding would reach back 300 ms into the last turn.
    assert events[2] == (len(probs) - 1, VadSpeechStarted(audio_start_ms=stop_at.audio_end_ms))


def test_reset_drops_a_turn_silently_and_moves_the_floor() -> None:
    d = TurnDetector(DEFAULT)
    assert run([S] * 3, detector=d) != []
    d.reset(at_ms=200)  # e.g. the client committed at 200 ms, ahead of the VAD's 96 ms
    assert not d.in_speech and d.speech_start_ms is None
    assert run([N] * 5, detector=d, first_end=128) == []  # up to 256 ms
    events = run([S], detector=d, first_end=288)  # chunk [256, 288); padding would reach 0
    assert events == [(0, VadSpeechStarted(audio_start_ms=200))]


def test_reset_defaults_to_the_last_chunk_end() -> None:
    d = TurnDetector(DEFAULT)
    run([S, S], detector=d)
    d.reset()
    assert run([S], detector=d, first_end=96) == [(0, VadSpeechStarted(audio_start_ms=64))]


def test_chunk_ends_must_increase() -> None:
    d = TurnDetector(DEFAULT)
    d.feed(N, 64)
    with pytest.raises(ValueError):
        d.feed(N, 64)
    with pytest.raises(ValueError):
        d.feed(N, 32)


def test_a_gap_in_the_feed_does_not_stretch_the_chunk() -> None:
    d = TurnDetector(DEFAULT)
    d.feed(N, 32)
    assert d.feed(S, 1000) == [VadSpeechStarted(audio_start_ms=1000 - 32 - 300)]


def test_update_keeps_the_turn_and_applies_new_settings() -> None:
    d = TurnDetector(DEFAULT)
    run([S], detector=d)
    d.update(ServerVad(silence_duration_ms=64))
    assert d.config.silence_duration_ms == 64 and d.in_speech
    assert run([N, N, N], detector=d, first_end=64)[-1] == (1, VadSpeechStopped(audio_end_ms=96))


# --- Idle timeout ------------------------------------------------------------------------------

IDLE = ServerVad(idle_timeout_ms=5000)


def test_idle_fires_once_after_timeout() -> None:
    d = TurnDetector(IDLE)
    assert not d.idle(10**9)  # never armed
    d.arm_idle(1000)
    assert d.idle_deadline_ms == 6000
    assert not d.idle(5999)
    assert d.idle(6000)
    assert not d.idle(7000) and d.idle_deadline_ms is None


def test_idle_is_disarmed_by_speech_and_not_armed_during_it() -> None:
    d = TurnDetector(IDLE)
    d.arm_idle(0)
    run([S], detector=d)
    assert d.idle_deadline_ms is None and not d.idle(10**6)
    d.arm_idle(100)  # the user is still talking
    assert d.idle_armed_ms is None
    run([N] * SILENCE_CHUNKS, detector=d, first_end=64)
    assert not d.in_speech
    d.arm_idle(2000)
    d.disarm_idle()
    assert not d.idle(10**6)


def test_idle_needs_a_timeout_configured() -> None:
    d = TurnDetector(DEFAULT)
    d.arm_idle(0)
    assert d.idle_deadline_ms is None and not d.idle(10**9)


# --- Properties --------------------------------------------------------------------------------

configs = st.builds(
    ServerVad,
    threshold=st.floats(0.05, 0.95),
    prefix_padding_ms=st.integers(0, 1000),
    # Multiples of the chunk make "exactly silence_duration_ms" reachable, where off-by-ones live.
    silence_duration_ms=st.one_of(st.integers(0, 1500), st.integers(0, 20).map(lambda k: 32 * k)),
)
probabilities = st.lists(
    st.one_of(st.floats(0.0, 1.0), st.sampled_from([0.0, 0.3, 0.45, 0.5, 0.9, 1.0])),
    max_size=120,
)
steps = st.lists(st.sampled_from([CHUNK_MS] * 8 + [1, 31, 33, 100, 2000]), min_size=120)


@settings(max_examples=300, deadline=None)
@given(
    cfg=configs,
    probs=probabilities,
    gaps=steps,
    mode=st.sampled_from(["after_silence", "speech_end"]),
)
def test_properties(cfg: ServerVad, probs: list[float], gaps: list[int], mode: AudioEnd) -> None:
    d = TurnDetector(cfg, audio_end=mode)
    ends: list[int] = []
    end = 0
    events: list[tuple[int, VadEvent]] = []
    for i, p in enumerate(probs):
        end += gaps[i]
        ends.append(end)
        events.extend((i, e) for e in d.feed(p, end))

    def chunk_start(i: int) -> int:
        return max(ends[i] - CHUNK_MS, ends[i - 1] if i else 0)

    last_time = 0
    start_ms = -1
    onset = -1
    for n, (i, e) in enumerate(events):
        # Strict alternation, starting with a start.
        assert isinstance(e, VadSpeechStarted if n % 2 == 0 else VadSpeechStopped)
        if isinstance(e, VadSpeechStarted):
            assert probs[i] >= cfg.threshold
            assert e.audio_start_ms >= max(0, last_time)
            assert e.audio_start_ms == max(chunk_start(i) - cfg.prefix_padding_ms, last_time, 0)
            start_ms, onset, last_time = e.audio_start_ms, i, e.audio_start_ms
        else:
            assert e.audio_end_ms >= start_ms >= 0
            # No chunk overlapping the last silence_duration_ms is speech.
            window = ends[i] - cfg.silence_duration_ms
            assert all(
                probs[j] < cfg.threshold for j in range(onset + 1, i + 1) if ends[j] > window
            )
            # The silence run began with the first chunk below the silence threshold after the
            # turn's last speech chunk; the stop came on the first chunk that made it long enough.
            last_speech = max(
                (j for j in range(onset + 1, i + 1) if probs[j] >= cfg.threshold), default=onset
            )
            below = silence_threshold(cfg.threshold)
            first_silent = next(j for j in range(last_speech + 1, i + 1) if probs[j] < below)
            speech_end = chunk_start(first_silent)
            assert ends[i] - speech_end >= cfg.silence_duration_ms
            if i > first_silent:  # and it did not wait longer than needed
                assert ends[i - 1] - speech_end < cfg.silence_duration_ms
            assert e.audio_end_ms == (ends[i] if mode == "after_silence" else speech_end)
            assert d.last_speech_end_ms is not None
            last_time = ends[i]
    assert d.in_speech == (len(events) % 2 == 1)


@settings(max_examples=200, deadline=None)
@given(cfg=configs, probs=probabilities)
def test_a_long_enough_silence_always_ends_the_turn(cfg: ServerVad, probs: list[float]) -> None:
    d = TurnDetector(cfg)
    run([*probs, 1.0], detector=d)
    assert d.in_speech
    quiet = math.ceil(cfg.silence_duration_ms / CHUNK_MS) + 1
    events = run([0.0] * quiet, detector=d, first_end=CHUNK_MS * (len(probs) + 2))
    assert [type(e) for _, e in events] == [VadSpeechStopped]
    assert not d.in_speech

"""Server VAD segmentation: one test per rule of `orchestrator.session.turns.detection`, then
properties."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.protocol.session_config import (
    EAGERNESS,
    Eagerness,
    SemanticVad,
    ServerVad,
)
from orchestrator.session.inputs import (
    VadEvent,
    VadPaused,
    VadResumed,
    VadSpeechStarted,
    VadSpeechStopped,
)
from orchestrator.session.turns.detection import CHUNK_MS, AudioEnd, TurnDetector, silence_threshold

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


# --- Candidate pauses, the silence limit, end_turn (semantic_vad, preemptive responses) ------

PAUSE = 160  # ms of silence before a candidate pause


def paused_detector(pause_ms: int | None = PAUSE, **kwargs: AudioEnd) -> TurnDetector:
    return TurnDetector(DEFAULT, pause_ms=pause_ms, **kwargs)


def test_pause_once_per_silence_run_at_first_chunk_past_pause_ms() -> None:
    """Rule: once per silence run, at the first chunk whose end is >= pause_ms after the run's
    start, VadPaused(speech_end_ms = the run's start, at_ms = that chunk's end)."""
    events = run([S] + [N] * 40, detector=paused_detector())
    # The run starts at 32 ms (chunk 1); 32 + 160 = 192 is chunk 5's end.
    assert events == [
        (0, VadSpeechStarted(audio_start_ms=0)),
        (5, VadPaused(speech_end_ms=32, at_ms=192)),
        (SILENCE_CHUNKS, VadSpeechStopped(audio_end_ms=544)),
    ]
    # Not a multiple of the chunk: 32 + 170 = 202 is first reached by chunk 6 (ends at 224).
    events = run([S] + [N] * 40, detector=paused_detector(170))
    assert [(i, e) for i, e in events if isinstance(e, VadPaused)] == [
        (6, VadPaused(speech_end_ms=32, at_ms=224))
    ]


def test_pause_measured_from_the_run_start_not_the_last_speech_chunk() -> None:
    """Rule: the pause counts from the silence run's start; band chunks neither start nor
    cancel a run, so a band chunk before the first silent one does not count."""
    band = 0.4
    events = run([S, band, band] + [N] * 30, detector=paused_detector())
    # The run starts with chunk 3 at 96 ms; 96 + 160 = 256 is chunk 7's end.
    assert [(i, e) for i, e in events if isinstance(e, VadPaused)] == [
        (7, VadPaused(speech_end_ms=96, at_ms=256))
    ]


def test_no_pause_without_pause_ms() -> None:
    """Rule: no pause event without `pause_ms`."""
    probs = [S] + [N] * 10 + [S] + [N] * 40
    assert not any(isinstance(e, VadPaused | VadResumed) for _, e in run(probs))
    d = paused_detector(None)
    assert not any(isinstance(e, VadPaused | VadResumed) for _, e in run(probs, detector=d))


def test_no_pause_when_the_stop_comes_first() -> None:
    """Rule: a pause only before speech stops; a pause_ms reached on the stop's chunk or
    later (pause_ms >= the silence limit) gives no pause, only the stop."""
    for pause_ms in (490, 500, 600, 10_000):
        events = run([S] + [N] * 40, detector=paused_detector(pause_ms))
        assert events == [
            (0, VadSpeechStarted(audio_start_ms=0)),
            (SILENCE_CHUNKS, VadSpeechStopped(audio_end_ms=544)),
        ], pause_ms
    # One chunk short of the stop still pauses: 32 + 480 = 512 is chunk 15's end.
    events = run([S] + [N] * 40, detector=paused_detector(480))
    assert events[1:] == [
        (15, VadPaused(speech_end_ms=32, at_ms=512)),
        (16, VadSpeechStopped(audio_end_ms=544)),
    ]


def test_resumed_at_the_start_of_the_speech_chunk_ending_a_paused_run() -> None:
    """Rule: a speech chunk that ends a run which had paused says VadResumed(its start)."""
    probs = [S] + [N] * 6 + [S] + [N] * 40
    events = run(probs, detector=paused_detector())
    assert events[:3] == [
        (0, VadSpeechStarted(audio_start_ms=0)),
        (5, VadPaused(speech_end_ms=32, at_ms=192)),
        (7, VadResumed(at_ms=224)),  # chunk 7 spans [224, 256)
    ]
    # Only the first speech chunk after the pause resumes.
    events = run([S] + [N] * 6 + [S, S, S], detector=paused_detector())
    assert [type(e) for _, e in events] == [VadSpeechStarted, VadPaused, VadResumed]


def test_no_resumed_for_a_run_that_had_not_paused() -> None:
    """Rule: VadResumed only ends a run which had paused; a short gap says nothing."""
    probs = [S, N, N, N, S, N, N, S]  # gaps of 96 and 64 ms, under pause_ms
    assert run(probs, detector=paused_detector()) == [(0, VadSpeechStarted(audio_start_ms=0))]


def test_band_chunk_after_a_pause_does_not_resume() -> None:
    """Rule: only a speech chunk (>= threshold) resumes; a band chunk is neutral."""
    events = run([S] + [N] * 6 + [0.4] * 3, detector=paused_detector())
    assert [type(e) for _, e in events] == [VadSpeechStarted, VadPaused]


def test_a_second_pause_after_resuming() -> None:
    """Rule: once per silence run, so a new run after VadResumed pauses again."""
    probs = [S] + [N] * 6 + [S] + [N] * 40
    events = run(probs, detector=paused_detector())
    # The second run starts at chunk 8 (256 ms); 256 + 160 = 416 is chunk 12's end; it stops
    # at the first end >= 256 + 500: chunk 23 (768 ms).
    assert events[3:] == [
        (12, VadPaused(speech_end_ms=256, at_ms=416)),
        (23, VadSpeechStopped(audio_end_ms=768)),
    ]


def test_the_next_turn_pauses_again_after_a_stop() -> None:
    """Rule: once per silence run; a paused turn's stop does not leave the detector paused."""
    d = paused_detector()
    probs = [S] + [N] * SILENCE_CHUNKS
    run(probs, detector=d)
    events = run(probs, detector=d, first_end=CHUNK_MS * (len(probs) + 1))
    assert [type(e) for _, e in events] == [VadSpeechStarted, VadPaused, VadSpeechStopped]


def test_reset_forgets_a_pause() -> None:
    """Rule: reset drops a turn in progress without an event; its pause goes with it."""
    d = paused_detector()
    run([S] + [N] * 6, detector=d)
    d.reset()
    # The next turn's speech chunk starts a turn; it does not resume the forgotten pause.
    assert run([S], detector=d, first_end=CHUNK_MS * 8) == [
        (0, VadSpeechStarted(audio_start_ms=224))
    ]


def test_limit_ms_lower_than_silence_duration_stops_earlier() -> None:
    """Rule: the silence that stops speech is the caller's `limit_ms` when lower."""
    d = TurnDetector(DEFAULT)
    d.limit_ms = 200
    assert d.limit_ms == 200
    # The run starts at 32 ms; 32 + 200 = 232 is first reached by chunk 7 (ends at 256).
    assert run([S] + [N] * 30, detector=d)[-1] == (7, VadSpeechStopped(audio_end_ms=256))


def test_limit_ms_higher_than_silence_duration_does_not_extend() -> None:
    """Rule: the limit only lowers the silence rule: silence_duration_ms still applies."""
    d = TurnDetector(DEFAULT)
    d.limit_ms = 2000
    assert run([S] + [N] * 30, detector=d)[-1] == (
        SILENCE_CHUNKS,
        VadSpeechStopped(audio_end_ms=544),
    )


def test_limit_ms_lowered_mid_run_stops_at_the_next_chunk() -> None:
    """Rule: the limit applies to the run in progress (semantic_vad's outage fallback)."""
    d = TurnDetector(DEFAULT)
    run([S] + [N] * 9, detector=d)  # silent since 32 ms, last chunk ends at 320
    d.limit_ms = 100
    assert run([N], detector=d, first_end=352) == [(0, VadSpeechStopped(audio_end_ms=352))]
    d.limit_ms = None  # back to silence_duration_ms
    assert [type(e) for _, e in run([S] + [N] * 15, detector=d, first_end=384)] == [
        VadSpeechStarted
    ]


def test_end_turn_stops_at_the_last_chunk_of_a_silence_run() -> None:
    """Rule: end_turn() stops speech now, as the silence rule would have at the last chunk:
    audio_end_ms is that chunk's end by default, the run's start with audio_end=speech_end."""
    d = paused_detector()
    run([S, N, N, N], detector=d)  # silent since 32 ms, last chunk ends at 128
    assert d.end_turn() == VadSpeechStopped(audio_end_ms=128)
    assert not d.in_speech and d.speech_start_ms is None
    assert d.last_speech_end_ms == 32
    assert d.end_turn() is None  # once

    d = paused_detector(audio_end="speech_end")
    run([S, N, N, N], detector=d)
    assert d.end_turn() == VadSpeechStopped(audio_end_ms=32)


@pytest.mark.parametrize("mode", ["after_silence", "speech_end"])
def test_end_turn_moves_the_floor_past_the_last_chunk(mode: AudioEnd) -> None:
    """Rule: the turn is committed up to the point of decision (the last chunk, in either
    audio_end mode); the next turn's audio_start_ms starts after it."""
    d = TurnDetector(DEFAULT, audio_end=mode)
    run([S, N, N, N], detector=d)
    assert d.end_turn() is not None
    # Chunk [128, 160): the padding would reach back to 0, the floor is 128.
    assert run([S], detector=d, first_end=160) == [(0, VadSpeechStarted(audio_start_ms=128))]


def test_end_turn_does_nothing_outside_a_silence_run() -> None:
    """Rule: end_turn() only during a silence run, else it does nothing (returns None)."""
    d = TurnDetector(DEFAULT)
    assert d.end_turn() is None  # nothing fed
    run([N, N], detector=d)
    assert d.end_turn() is None  # no speech
    run([S, S], detector=d, first_end=96)
    assert d.end_turn() is None and d.in_speech  # speech, no silence run
    run([0.4], detector=d, first_end=160)
    assert d.end_turn() is None and d.in_speech  # a band chunk starts no run
    run([N, S], detector=d, first_end=192)
    assert d.end_turn() is None and d.in_speech  # the run was cancelled by speech
    # The turn goes on as before: the silence rule still stops it.
    events = run([N] * SILENCE_CHUNKS, detector=d, first_end=256)
    assert [type(e) for _, e in events] == [VadSpeechStopped]


def test_silence_ms_is_the_length_of_the_current_run() -> None:
    """Rule: silence_ms is how long the current silence run has lasted, 0 outside one."""
    d = TurnDetector(DEFAULT)
    assert d.silence_ms == 0
    run([S], detector=d)
    assert d.silence_ms == 0  # speech, no run
    run([N, N], detector=d, first_end=64)
    assert d.silence_ms == 64  # silent since 32, last chunk ends at 96
    run([0.4], detector=d, first_end=128)
    assert d.silence_ms == 96  # a band chunk lets the run go on
    run([S], detector=d, first_end=160)
    assert d.silence_ms == 0  # cancelled
    run([N] * SILENCE_CHUNKS, detector=d, first_end=192)
    assert not d.in_speech and d.silence_ms == 0  # stopped: between turns


def test_update_pause_ms_turns_pauses_on_mid_session() -> None:
    """Rule: `update(config, pause_ms=...)` sets the candidate pause; a turn in progress
    carries on, and its silence run pauses at the next chunk past pause_ms."""
    d = TurnDetector(DEFAULT)
    assert run([S] + [N] * 6, detector=d) == [(0, VadSpeechStarted(audio_start_ms=0))]
    d.update(DEFAULT, pause_ms=PAUSE)  # silent since 32 ms, last chunk ends at 224
    assert run([N], detector=d, first_end=256) == [(0, VadPaused(speech_end_ms=32, at_ms=256))]


def test_update_without_pause_ms_turns_pauses_off() -> None:
    """Rule: no pause event without `pause_ms`, also after an update that drops it."""
    d = paused_detector()
    d.update(DEFAULT, pause_ms=None)
    events = run([S] + [N] * 40, detector=d)
    assert [type(e) for _, e in events] == [VadSpeechStarted, VadSpeechStopped]


@pytest.mark.parametrize(
    ("eagerness", "wait_ms"), [("low", 8000), ("medium", 4000), ("high", 2000), ("auto", 4000)]
)
def test_semantic_vad_stops_by_itself_at_the_eagerness_longest_wait(
    eagerness: Eagerness, wait_ms: int
) -> None:
    """Rule: a SemanticVad's silence_duration_ms is its eagerness's longest wait, so the
    detector stops at that wait whatever the model says (OpenAI's server_vad defaults under
    it: threshold 0.5, prefix padding 300 ms)."""
    cfg = SemanticVad(eagerness=eagerness)
    assert cfg.silence_duration_ms == wait_ms == EAGERNESS[eagerness].longest_wait_ms
    assert (cfg.threshold, cfg.prefix_padding_ms, cfg.idle_timeout_ms) == (0.5, 300, None)
    d = TurnDetector(cfg, pause_ms=PAUSE)
    chunks = math.ceil(wait_ms / CHUNK_MS)  # the first chunk whose end is >= 32 + wait
    events = run([N] * 20 + [S] + [N] * (chunks + 5), detector=d)
    # Onset chunk [640, 672); the run starts at 672.
    assert events == [
        (20, VadSpeechStarted(audio_start_ms=640 - 300)),
        (25, VadPaused(speech_end_ms=672, at_ms=672 + PAUSE)),
        (20 + chunks, VadSpeechStopped(audio_end_ms=672 + CHUNK_MS * chunks)),
    ]


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


@settings(max_examples=300, deadline=None)
@given(
    cfg=configs,
    probs=probabilities,
    gaps=steps,
    pause_ms=st.one_of(st.integers(0, 1500), st.integers(0, 20).map(lambda k: 32 * k)),
)
def test_pauses_change_no_turn_and_come_once_per_silence_run(
    cfg: ServerVad, probs: list[float], gaps: list[int], pause_ms: int
) -> None:
    """Rules: pause events are extra (the turns are those of a detector without pause_ms);
    within a turn they alternate VadPaused / VadResumed, each VadPaused at >= pause_ms and
    < the silence limit after its run's start (on the first chunk past pause_ms), and
    VadResumed only after a VadPaused."""
    plain, paused = TurnDetector(cfg), TurnDetector(cfg, pause_ms=pause_ms)
    end = 0
    turns: list[VadEvent] = []
    marks: list[VadEvent] = []
    for i, p in enumerate(probs):
        end += gaps[i]
        before = paused.silence_ms  # the run so far, 0 outside one
        expected = plain.feed(p, end)
        got = paused.feed(p, end)
        assert [e for e in got if not isinstance(e, VadPaused | VadResumed)] == expected
        for e in got:
            if isinstance(e, VadPaused):
                assert e.at_ms == end
                assert pause_ms <= e.at_ms - e.speech_end_ms < cfg.silence_duration_ms
                assert before == 0 or before < pause_ms  # the first chunk past pause_ms
            elif isinstance(e, VadResumed):
                assert p >= cfg.threshold
                assert e.at_ms == max(end - CHUNK_MS, end - gaps[i])
        turns.extend(expected)
        marks.extend(got)
    in_turn = False
    was_paused = False
    for e in marks:
        if isinstance(e, VadSpeechStarted):
            in_turn, was_paused = True, False
        elif isinstance(e, VadSpeechStopped):
            in_turn = False
        else:
            assert in_turn
            assert was_paused == isinstance(e, VadResumed)
            was_paused = isinstance(e, VadPaused)

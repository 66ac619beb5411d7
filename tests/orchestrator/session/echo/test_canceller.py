"""The echo canceller's wrapper (orchestrator/session/echo/canceller.py), in the bench's room:
the assistant's flite voice through a pyroomacoustics room (bench/rooms.py), delayed by the
playout delay, over a -85 dBFS floor (bench/echo_canceller_choice.py, rule 1)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from bench import echo_canceller_choice as room
from orchestrator.session.echo.canceller import (
    EchoCanceller,
    NoiseReduction,
    NoiseSuppressor,
)

RATE = 24000
FRAME = RATE // 100
SECONDS = 8  # of the assistant's answer: converged after 3 s, double talk from 4 s


@pytest.fixture(scope="module")
def voices() -> room.Voices:
    sounds = room.voices()
    return room.Voices(sounds.far[: SECONDS * RATE], sounds.near)


def _echo(far: room.Audio, delay_s: float, level_db: float, rt60_s: float) -> room.Audio:
    """The microphone with echo alone: `level_db` relative to the user's -20 dBFS speech."""
    echo = room.echo_of(far, room.room_impulse_response(rt60_s), delay_s, -20 + level_db)
    return echo + room.noise(len(far))


def _in_chunks(aec: EchoCanceller, near: room.Pcm, far: room.Pcm, sizes: list[int]) -> room.Pcm:
    out, i = [], 0
    for size in itertools.cycle(sizes):
        if i >= len(near):
            break
        out.append(aec.process(near[i : i + size], far[i : i + size]))
        i += size
    return np.concatenate(out)


@pytest.mark.parametrize(
    ("delay_s", "level_db", "rt60_s"), [(0.04, 0.0, 0.2), (0.4, -10.0, 0.6), (0.12, -20.0, 0.4)]
)
def test_echo_is_cancelled_after_convergence(
    voices: room.Voices, delay_s: float, level_db: float, rt60_s: float
) -> None:
    # Rule 2: AEC3 finds the delay itself. ERLE (mic energy / output energy, echo alone) from
    # 3 s after the echo starts to the end must reach 15 dB (measured: 26-38 dB here).
    mic = _echo(voices.far, delay_s, level_db, rt60_s)
    out = room.to_float(EchoCanceller().process(room.to_pcm(mic), room.to_pcm(voices.far)))
    after = int((delay_s + 3) * RATE)
    assert room.db(room.energy(mic[after:]), room.energy(out[after:])) >= 15


def test_the_user_is_kept_during_double_talk(voices: room.Voices) -> None:
    # Rule 2: the user speaking 10 dB over the echo (4 s into the answer) comes through.
    # Against the canceller's output for the user alone (its own filtering and delay are not
    # damage): energy within 4 dB (measured 1.5 dB down), median voiced 10 ms frame within
    # 6 dB (measured 2.0), SNR at least 3 dB (measured 5.7; AEC3's suppressor, not the
    # linear filter, is what costs here: the echo alone is cancelled by ~40 dB).
    far, at = voices.far, 4 * RATE
    user = np.zeros(len(far), np.float32)
    user[at : at + len(voices.near)] = voices.near[: len(far) - at]
    silent = np.zeros(len(far), np.int16)
    heard = EchoCanceller().process(
        room.to_pcm(_echo(far, 0.12, -10, 0.3) + user), room.to_pcm(far)
    )
    alone = EchoCanceller().process(room.to_pcm(room.noise(len(far)) + user), silent)
    delay = room.lag_of(room.to_float(alone)[at:], user[at:], 4 * FRAME)  # 19 ms
    span = slice(at + delay, min(at + delay + len(voices.near), len(far)))
    out, ref = room.to_float(heard)[span], room.to_float(alone)[span]
    assert room.db(room.energy(out), room.energy(ref)) >= -4
    frames = room._frame_power(ref)
    voiced = frames > frames.max() * 1e-3
    kept = 10 * np.log10((room._frame_power(out)[voiced] + 1e-12) / frames[voiced])
    assert np.median(kept) >= -6
    assert room.db(room.energy(ref), room.energy(out - ref)) >= 3


@pytest.mark.parametrize("noise_reduction", [None, "far_field"])
def test_any_chunking_gives_the_same_output(
    voices: room.Voices, noise_reduction: NoiseReduction | None
) -> None:
    # Rule 3: 10 ms chunks, and odd ones (a sample, less than a frame, more, none at all).
    far = voices.far[: 3 * RATE]
    near = room.to_pcm(_echo(far, 0.1, 0.0, 0.3))
    ref = room.to_pcm(far)
    framed = _in_chunks(EchoCanceller(noise_reduction=noise_reduction), near, ref, [FRAME])
    odd = _in_chunks(
        EchoCanceller(noise_reduction=noise_reduction),
        near,
        ref,
        [1, 7, 239, 0, 241, 1001, 4800, 13],
    )
    assert np.array_equal(framed, odd)


def test_the_output_is_one_frame_late(voices: room.Voices) -> None:
    # Rule 3: the framing's delay is one 10 ms frame, zeros first, whatever the chunk size.
    aec = EchoCanceller()
    assert aec.framing_delay == FRAME
    near = room.to_pcm(voices.near)
    first = aec.process(near[:100], None)
    assert len(first) == 100 and not first.any()
    assert len(aec.process(near[100:], None)) == len(near) - 100


@pytest.mark.parametrize("noise_reduction", [None, "near_field", "far_field"])
def test_silence_in_gives_silence_out(noise_reduction: NoiseReduction | None) -> None:
    # Rules 2 and 7: no comfort noise, no artefact: digital silence comes out as no more than
    # the dither (rms under 1 LSB, peaks of a few LSB: -80 dBFS and below).
    aec = EchoCanceller(noise_reduction=noise_reduction)
    silence = np.zeros(2 * RATE, np.int16)
    out = _in_chunks(aec, silence, silence, [333]).astype(np.float64)
    assert np.abs(out).max() <= 4 and np.sqrt(np.mean(out**2)) < 1


class _Recording:
    """AEC3 as the wrapper calls it, recording what it is given."""

    def __init__(self, inner: object) -> None:
        self.inner = inner
        self.given: list[tuple[np.ndarray, np.ndarray]] = []

    def process(self, near: np.ndarray, far: np.ndarray) -> np.ndarray:
        self.given.append((near.copy(), far.copy()))
        return self.inner.process(near, far)  # type: ignore[attr-defined, no-any-return]


def test_rule7_aec3_never_sees_digital_silence() -> None:
    # Rule 7: on digital zeros AEC3's filters decay into subnormal floats and its CPU goes up
    # 8x; both of its inputs are dithered by +-1 LSB, the same whatever the chunking.
    aec = EchoCanceller()
    spy = _Recording(aec._aec)
    aec._aec = spy  # type: ignore[assignment]
    silence = np.zeros(RATE, np.int16)
    _in_chunks(aec, silence, silence, [333, 2400, 17])
    near = np.concatenate([n for n, _ in spy.given])
    far = np.concatenate([f for _, f in spy.given])
    for side in (near, far):
        assert np.abs(side.astype(np.int32)).max() == 1
        assert np.count_nonzero(side) > len(side) // 3
        assert abs(float(side.mean())) < 0.05
    assert abs(np.corrcoef(near, far)[0, 1]) < 0.05  # the two dithers are unrelated
    again = EchoCanceller()
    spy_again = _Recording(again._aec)
    again._aec = spy_again  # type: ignore[assignment]
    _in_chunks(again, silence, silence, [RATE])
    assert np.array_equal(np.concatenate([n for n, _ in spy_again.given]), near)


def test_noise_suppressor_lowers_stationary_noise(voices: room.Voices) -> None:
    # Rule 5: white noise, after the suppressor's first second: near_field (level 1, at most
    # 12 dB) lowers it by 10 dB or more (measured 12.4), far_field (level 2, at most 18 dB)
    # by 15 dB or more (measured 18.0), and the user's speech over it keeps its level
    # (within 2 dB; measured 0.5 dB down).
    hiss = room.noise(3 * RATE, -45, seed=3)
    clean = np.concatenate([np.zeros(2 * RATE, np.float32), voices.near])
    hiss_under = room.noise(len(clean), -45, seed=4)
    bounds: tuple[tuple[NoiseReduction, float], ...] = (("near_field", 10), ("far_field", 15))
    for kind, bound in bounds:
        out = room.to_float(NoiseSuppressor(kind).process(room.to_pcm(hiss)))
        assert room.db(room.energy(hiss[RATE:]), room.energy(out[RATE:])) >= bound, kind
        speech = room.to_float(NoiseSuppressor(kind).process(room.to_pcm(clean + hiss_under)))
        said = slice(2 * RATE + FRAME, len(clean))
        assert room.db(room.energy(speech[said]), room.energy(clean[2 * RATE :])) >= -2, kind


def test_changing_noise_reduction_keeps_the_echo_cancelled(voices: room.Voices) -> None:
    # Rule 5: a new suppressor, not a new canceller: the adaptation survives, so the second
    # after the change is cancelled as well as converged audio is (>= 15 dB).
    mic, ref = room.to_pcm(_echo(voices.far, 0.12, 0.0, 0.3)), room.to_pcm(voices.far)
    aec = EchoCanceller()
    split = 4 * RATE
    before = aec.process(mic[:split], ref[:split])
    aec.noise_reduction = "near_field"
    after = aec.process(mic[split : split + RATE], ref[split : split + RATE])
    assert len(before) == split
    mic_f = room.to_float(mic[split : split + RATE])
    assert room.db(room.energy(mic_f), room.energy(room.to_float(after))) >= 15


def test_misaligned_or_wrong_audio_is_refused() -> None:
    # Rule 2: the reference aligns sample for sample; samples are 1-d int16.
    aec = EchoCanceller()
    with pytest.raises(ValueError, match="align"):
        aec.process(np.zeros(10, np.int16), np.zeros(11, np.int16))
    with pytest.raises(ValueError, match="int16"):
        aec.process(np.zeros(10, np.float32))
    with pytest.raises(ValueError, match="rate"):
        EchoCanceller(rate=22050)

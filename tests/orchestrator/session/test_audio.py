"""Wire audio codecs and resampling: G.711 against the ITU reference, streaming vs one-shot."""

from __future__ import annotations

import importlib
import itertools
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import soxr
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.protocol.session_config import PCM16, PCMA, PCMU, AudioFormat
from orchestrator.session.audio import (
    InputAudio,
    OutputAudio,
    VadFrames,
    alaw_decode,
    alaw_encode,
    bytes_to_ms,
    decode_input,
    float_to_pcm16,
    ms_to_bytes,
    pcm16_duration_ms,
    pcm16_to_float,
    to_pcm16,
    ulaw_decode,
    ulaw_encode,
)

ALL_PCM16 = np.arange(-32768, 32768, dtype=np.int16)


# --- ITU-T G.191 reference (g711.c), transliterated one sample at a time -----------------------


def ref_ulaw_compress(x: int) -> int:
    absno = ((~x) >> 2) + 33 if x < 0 else (x >> 2) + 33
    absno = min(absno, 0x1FFF)
    i = absno >> 6
    segno = 1
    while i != 0:
        segno += 1
        i >>= 1
    high_nibble = 0x8 - segno
    low_nibble = 0xF - ((absno >> segno) & 0xF)
    code = (high_nibble << 4) | low_nibble
    if x >= 0:
        code |= 0x80
    return code


def ref_ulaw_expand(code: int) -> int:
    sign = -1 if code < 0x80 else 1
    mantissa = ~code
    exponent = (mantissa >> 4) & 0x7
    segment = exponent + 1
    mantissa &= 0xF
    step = 4 << segment
    return sign * ((0x80 << exponent) + step * mantissa + step // 2 - 4 * 33)


def ref_alaw_compress(x: int) -> int:
    ix = (~x) >> 4 if x < 0 else x >> 4
    if ix > 15:
        iexp = 1
        while ix > 16 + 15:
            ix >>= 1
            iexp += 1
        ix -= 16
        ix += iexp << 4
    if x >= 0:
        ix |= 0x80
    return ix ^ 0x55


def ref_alaw_expand(code: int) -> int:
    ix = (code ^ 0x55) & 0x7F
    iexp = ix >> 4
    mant = ix & 0xF
    if iexp > 0:
        mant += 16
    mant = (mant << 4) + 0x8
    if iexp > 1:
        mant <<= iexp - 1
    return mant if code > 127 else -mant


# --- G.711 -------------------------------------------------------------------------------------


def test_ulaw_decode_matches_itu_reference_for_all_256_codes() -> None:
    got = ulaw_decode(bytes(range(256)))
    assert got.dtype == np.int16
    assert got.tolist() == [ref_ulaw_expand(c) for c in range(256)]


def test_alaw_decode_matches_itu_reference_for_all_256_codes() -> None:
    got = alaw_decode(bytes(range(256)))
    assert got.dtype == np.int16
    assert got.tolist() == [ref_alaw_expand(c) for c in range(256)]


def test_ulaw_encode_matches_itu_reference_for_all_65536_values() -> None:
    got = list(ulaw_encode(ALL_PCM16))
    assert got == [ref_ulaw_compress(int(x)) for x in ALL_PCM16]


def test_alaw_encode_matches_itu_reference_for_all_65536_values() -> None:
    got = list(alaw_encode(ALL_PCM16))
    assert got == [ref_alaw_compress(int(x)) for x in ALL_PCM16]


def test_g711_known_values() -> None:
    pcm = np.array([0, -1, 32767, -32768], dtype=np.int16)
    # mu-law: silence is 0xFF (0x7F is "negative zero"), full scale 0x80 / 0x00.
    assert ulaw_encode(pcm) == bytes([0xFF, 0x7F, 0x80, 0x00])
    assert ulaw_decode(bytes([0xFF, 0x7F, 0x80, 0x00, 0xFE, 0xEF])).tolist() == [
        0,
        0,
        32124,
        -32124,
        8,
        132,
    ]
    # A-law: even bits inverted, silence is 0xD5 / 0x55, full scale +-32256.
    assert alaw_encode(pcm) == bytes([0xD5, 0x55, 0xAA, 0x2A])
    assert alaw_decode(bytes([0xD5, 0x55, 0xAA, 0x2A])).tolist() == [8, -8, 32256, -32256]


def test_g711_code_round_trip() -> None:
    codes = bytes(range(256))
    assert alaw_encode(alaw_decode(codes)) == codes
    # mu-law has two zeros; 0x7F (-0) decodes to 0, which encodes as +0 (0xFF).
    expected = bytes(0xFF if c == 0x7F else c for c in range(256))
    assert ulaw_encode(ulaw_decode(codes)) == expected


G711 = [(ulaw_encode, ulaw_decode), (alaw_encode, alaw_decode)]


@pytest.mark.parametrize(("encode", "decode"), G711, ids=["ulaw", "alaw"])
def test_g711_quantiser_is_monotonic_and_bounded(
    encode: Callable[[npt.NDArray[np.int16]], bytes],
    decode: Callable[[bytes], npt.NDArray[np.int16]],
) -> None:
    back = decode(encode(ALL_PCM16)).astype(np.int32)
    assert np.all(np.diff(back) >= 0)
    # Worst case is the clipped top of the last segment (mu-law 32767 -> 32124).
    assert np.abs(back - ALL_PCM16.astype(np.int32)).max() <= 1024


def test_g711_decode_agrees_with_audioop_where_it_still_exists() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            audioop = importlib.import_module("audioop")
        except ImportError:
            pytest.skip("audioop is gone (Python 3.13+)")
    codes = bytes(range(256))
    assert audioop.ulaw2lin(codes, 2) == ulaw_decode(codes).astype("<i2").tobytes()
    assert audioop.alaw2lin(codes, 2) == alaw_decode(codes).astype("<i2").tobytes()


def test_float_pcm16_conversion_rounds_and_saturates() -> None:
    x = np.array([0.0, 1.0, -1.0, 2.0, -2.0, 0.5, 1 / 65536, float("nan")], dtype=np.float32)
    assert float_to_pcm16(x).tolist() == [0, 32767, -32768, 32767, -32768, 16384, 0, 0]
    assert pcm16_to_float(np.array([-32768, 16384], dtype=np.int16)).tolist() == [-1.0, 0.5]


# --- Durations ---------------------------------------------------------------------------------


def test_duration_helpers() -> None:
    assert pcm16_duration_ms(48) == 1
    assert pcm16_duration_ms(47) == 0
    assert pcm16_duration_ms(4800) == 100
    assert bytes_to_ms(PCM16, 4801) == 100
    assert bytes_to_ms(PCMU, 8000) == 1000
    assert bytes_to_ms(PCMA, 7) == 0
    assert ms_to_bytes(PCM16, 100) == 4800
    assert ms_to_bytes(PCMU, 100) == 800


# --- Signals -----------------------------------------------------------------------------------


def tone(freq: float, rate: int, seconds: float, level: float = 0.5) -> npt.NDArray[np.float64]:
    t = np.arange(round(rate * seconds)) / rate
    x: npt.NDArray[np.float64] = level * np.sin(2 * np.pi * freq * t)
    return x


def wire(fmt: AudioFormat, x: npt.ArrayLike) -> bytes:
    pcm = float_to_pcm16(x)
    if fmt.type == "audio/pcmu":
        return ulaw_encode(pcm)
    if fmt.type == "audio/pcma":
        return alaw_encode(pcm)
    return pcm.astype("<i2").tobytes()


def peak(y: npt.NDArray[np.floating[Any]], rate: int) -> tuple[float, float]:
    """(frequency, amplitude) of the strongest component, from a Hann-windowed FFT."""
    spectrum = np.abs(np.fft.rfft(y * np.hanning(len(y))))
    k = int(np.argmax(spectrum))
    return k * rate / len(y), float(spectrum[k] / (len(y) / 4))


def push_split(stream: InputAudio, data: bytes, cuts: list[int]) -> npt.NDArray[np.float32]:
    bounds = [0, *sorted(set(c % (len(data) + 1) for c in cuts)), len(data)]
    parts = [stream.push(data[a:b]) for a, b in itertools.pairwise(bounds)]
    return np.concatenate([*parts, stream.flush()])


FORMATS = [PCM16, PCMU, PCMA]


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.type)
def test_input_tone_keeps_frequency_and_level(fmt: AudioFormat) -> None:
    data = wire(fmt, tone(440, fmt.rate, 1.0))
    rng = np.random.default_rng(7)
    y = push_split(InputAudio(fmt), data, rng.integers(0, len(data), 300).tolist())
    assert len(y) == 16000 and y.dtype == np.float32
    freq, level = peak(y, 16000)
    assert freq == 440
    assert level == pytest.approx(0.5, rel=0.01)


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.type)
def test_input_chunking_matches_one_append_and_one_shot(fmt: AudioFormat) -> None:
    data = wire(fmt, tone(440, fmt.rate, 0.5) + tone(3000, fmt.rate, 0.5, 0.2))
    whole = push_split(InputAudio(fmt), data, [])
    rng = np.random.default_rng(11)
    for _ in range(5):
        cuts = rng.integers(0, len(data), int(rng.integers(1, 200))).tolist()
        np.testing.assert_allclose(push_split(InputAudio(fmt), data, cuts), whole, atol=1e-6)
    # decode_input is the one-shot path (HQ); the stream may use a shorter filter for 8 kHz.
    np.testing.assert_allclose(whole, decode_input(data, fmt), atol=1e-3)


@settings(max_examples=50, deadline=None)
@given(
    fmt=st.sampled_from(FORMATS),
    nbytes=st.integers(0, 3000),
    cuts=st.lists(st.integers(0, 3000), max_size=30),
)
def test_input_duration_is_exact_in_samples(fmt: AudioFormat, nbytes: int, cuts: list[int]) -> None:
    data = bytes(range(256)) * (nbytes // 256 + 1)
    data = data[:nbytes]
    stream = InputAudio(fmt)
    bounds = [0, *sorted(c for c in set(cuts) if c <= nbytes), nbytes]
    width = 2 if fmt.type == "audio/pcm" else 1
    for a, b in itertools.pairwise(bounds):
        stream.push(data[a:b])
        assert stream.samples == b // width
        assert stream.duration_ms == (b // width) * 1000 // fmt.rate
        assert stream.output_ms <= stream.samples * 1000 / fmt.rate


def test_odd_byte_appends_keep_the_dangling_byte() -> None:
    pcm = np.array([0x0201, -2, 12345], dtype=np.int16).astype("<i2").tobytes()
    stream = InputAudio(PCM16, rate=24000)  # equal rates: samples come straight through
    out = [stream.push(pcm[:1]), stream.push(pcm[1:4]), stream.push(pcm[4:5]), stream.push(pcm[5:])]
    assert [len(o) for o in out] == [0, 2, 0, 1]
    assert stream.samples == 3
    got = float_to_pcm16(np.concatenate(out)).tolist()
    assert got == [0x0201, -2, 12345]


def test_resampler_output_is_on_the_input_clock() -> None:
    # An impulse at input 500 ms must come out at 16 kHz sample 8000: soxr compensates its delay,
    # so VAD chunk n ends at input time 32 * (n + 1) ms.
    for fmt in FORMATS:
        x = np.zeros(fmt.rate)
        x[fmt.rate // 2] = 0.9
        y = push_split(InputAudio(fmt), wire(fmt, x), list(range(0, 2 * fmt.rate, 333)))
        assert int(np.argmax(np.abs(y))) == 8000, fmt.type


def test_input_trails_by_resampler_delay_and_flush_drains_it() -> None:
    stream = InputAudio(PCM16)
    data = wire(PCM16, tone(440, 24000, 0.3))
    stream.push(data)
    assert 0 < stream.output_ms < stream.duration_ms == 300
    assert stream.duration_ms - stream.output_ms < 40
    stream.flush()
    assert stream.output_samples == 4800
    with pytest.raises(RuntimeError):
        stream.push(b"\x00\x00")


def test_empty_push() -> None:
    stream = InputAudio(PCMU)
    assert stream.push(b"").shape == (0,)
    assert stream.samples == 0


def test_vad_frames_cut_512_sample_chunks_on_the_input_clock() -> None:
    frames = VadFrames()
    got: list[int] = []
    total = 0
    for n in (100, 500, 1000, 13, 1435):
        for chunk, end_ms in frames.push(np.ones(n, dtype=np.float32)):
            assert chunk.shape == (512,)
            got.append(end_ms)
        total += n
    assert got == [32 * (i + 1) for i in range(total // 512)]
    later = VadFrames(start_ms=1000).push(np.zeros(1024, dtype=np.float32))
    assert [end for _, end in later] == [1032, 1064]


# --- Output ------------------------------------------------------------------------------------


def test_output_pcm16_is_bit_exact_passthrough_with_odd_splits() -> None:
    data = wire(PCM16, tone(440, 24000, 0.1))
    out = OutputAudio(PCM16)
    parts = [out.push_pcm16(data[a : a + 101]) for a in range(0, len(data), 101)]
    assert all(len(p) % 2 == 0 for p in parts)
    assert b"".join(parts) + out.flush() == data
    assert out.samples == 2400 and out.duration_ms == 100 and out.bytes_out == len(data)


def test_output_pcm16_from_float() -> None:
    out = OutputAudio(PCM16)
    assert (
        out.push(np.array([0.0, 0.5, -1.0], dtype=np.float32))
        == np.array([0, 16384, -32768], dtype="<i2").tobytes()
    )
    assert out.flush() == b""


@pytest.mark.parametrize("fmt", [PCMU, PCMA], ids=lambda f: f.type)
def test_output_g711_tone_keeps_frequency_and_level(fmt: AudioFormat) -> None:
    x = tone(440, 24000, 1.0)
    data = wire(PCM16, x)
    out = OutputAudio(fmt)
    encoded = b"".join(out.push_pcm16(data[a : a + 999]) for a in range(0, len(data), 999))
    encoded += out.flush()
    assert len(encoded) == 8000 == out.bytes_out
    assert out.duration_ms == 1000
    y = pcm16_to_float(ulaw_decode(encoded) if fmt.type == "audio/pcmu" else alaw_decode(encoded))
    freq, level = peak(y, 8000)
    assert freq == 440
    assert level == pytest.approx(0.5, rel=0.01)
    # Float input and pcm16 input of the same audio give the same bytes, however chunked.
    out2 = OutputAudio(fmt)
    floats = pcm16_to_float(float_to_pcm16(x))
    again = b"".join(out2.push(floats[a : a + 480]) for a in range(0, len(floats), 480))
    assert again + out2.flush() == encoded


def test_output_g711_chunking_matches_one_shot() -> None:
    x = pcm16_to_float(float_to_pcm16(tone(440, 24000, 0.5) + tone(2500, 24000, 0.5, 0.2)))
    out = OutputAudio(PCMU)
    streamed = b"".join(out.push(x[a : a + 317]) for a in range(0, len(x), 317)) + out.flush()
    one_shot = ulaw_encode(float_to_pcm16(soxr.resample(x, 24000, 8000, quality="HQ")))
    assert streamed == one_shot


def test_to_pcm16_for_conversation_items() -> None:
    data = wire(PCM16, tone(440, 24000, 0.1))
    assert to_pcm16(PCM16, data + b"\x01") == data
    mu = wire(PCMU, tone(440, 8000, 0.1))
    converted = to_pcm16(PCMU, mu)
    assert len(converted) == 2 * 2400
    freq, level = peak(pcm16_to_float(np.frombuffer(converted, dtype="<i2")), 24000)
    assert freq == pytest.approx(440, abs=10)
    assert level == pytest.approx(0.5, rel=0.02)

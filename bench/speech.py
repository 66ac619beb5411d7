"""Reference speech for tests and benchmarks: flite and festival voices, at any sample rate.

Rules:
- The binaries, never a model's own synthesis: `flite` (`-voice`, default "slt"; "kal" is the
  binary's own default) and festival's `text2wave`; both are apt packages that `make test`
  and `make bench` install (APT_PACKAGES). A missing one is an AssertionError that says so.
- Float32 mono in [-1, 1], resampled with soxr from the voice's own rate (8 kHz for kal,
  16 kHz for the others) to `rate`.
- `trimmed` cuts the leading near-silence (10 ms frames below an RMS of 0.02), so sample 0 is
  the speech onset; `padded` puts silence around speech; `pcm16` is the wire's little-endian
  16-bit form.
- Here, not under tests/: bench/ must not import from tests/, and tests may import from bench/.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import wave
from pathlib import Path

import numpy as np
import numpy.typing as npt
import soxr

Audio = npt.NDArray[np.float32]
RATE = 24000


def read_wav(path: Path, rate: int = RATE) -> Audio:
    """A 16-bit mono WAV file as float32 at `rate`."""
    with wave.open(str(path)) as wav:
        assert (wav.getnchannels(), wav.getsampwidth()) == (1, 2), "expected 16-bit mono"
        source = wav.getframerate()
        pcm = np.frombuffer(wav.readframes(wav.getnframes()), "<i2")
    audio = pcm.astype(np.float32) / 32768.0
    if source == rate:
        return audio
    return np.asarray(soxr.resample(audio, source, rate), np.float32)


def _synthesize(command: list[str], text_input: bytes | None, rate: int) -> Audio:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "speech.wav"
        subprocess.run([*command, str(path)], input=text_input, check=True)
        return read_wav(path, rate)


def flite(text: str, voice: str = "slt", rate: int = RATE) -> Audio:
    """`text` spoken by the flite binary's `voice`."""
    binary = shutil.which("flite")
    assert binary, "flite is not installed: `make test` installs it with apt (APT_PACKAGES)"
    return _synthesize([binary, "-voice", voice, "-t", text, "-o"], None, rate)


def flite_paced(text: str, voice: str, stretch: float, rate: int = RATE) -> Audio:
    """`text` spoken by flite's `voice` with its durations scaled by `stretch` (flite's own
    `duration_stretch`: 0.8 speaks 20% faster), e.g. to keep a backchannel short."""
    binary = shutil.which("flite")
    assert binary, "flite is not installed: `make test` installs it with apt (APT_PACKAGES)"
    command = [binary, "-voice", voice, "--setf", f"duration_stretch={stretch}", "-t", text, "-o"]
    return _synthesize(command, None, rate)


def spoken_part(audio: Audio, rate: int = RATE, threshold: float = 0.02) -> Audio:
    """`audio` without its leading and trailing near-silence (`trimmed` at both ends)."""
    head = trimmed(audio, rate, threshold)
    return np.ascontiguousarray(trimmed(head[::-1], rate, threshold)[::-1])


def flite_from_onset(text: str, voice: str = "slt", rate: int = RATE) -> Audio:
    """flite speech with its leading near-silence cut off (`trimmed`): the onset is sample 0,
    so the first append of it holds speech (the load generator's microphone)."""
    return trimmed(flite(text, voice, rate), rate)


def festival(text: str, rate: int = RATE) -> Audio:
    """`text` spoken by festival's default voice (`text2wave`)."""
    binary = shutil.which("text2wave")
    assert binary, "festival is not installed: `make test` installs it (APT_PACKAGES)"
    return _synthesize([binary, "-o"], text.encode(), rate)


def festival_paced(text: str, stretch: float, rate: int = RATE) -> Audio:
    """`text` spoken by festival's default voice with its durations scaled by `stretch`
    (festival's `Duration_Stretch` parameter)."""
    binary = shutil.which("text2wave")
    assert binary, "festival is not installed: `make test` installs it (APT_PACKAGES)"
    command = [binary, "-eval", f"(Parameter.set 'Duration_Stretch {stretch})", "-o"]
    return _synthesize(command, text.encode(), rate)


def trimmed(audio: Audio, rate: int = RATE, threshold: float = 0.02) -> Audio:
    """`audio` from its first 10 ms frame louder than `threshold` (RMS): the onset at 0."""
    frame = rate // 100
    frames = audio[: len(audio) // frame * frame].reshape(-1, frame)
    loud = np.flatnonzero(np.sqrt((frames**2).mean(axis=1)) > threshold)
    return audio[int(loud[0]) * frame :] if loud.size else audio


def silence(seconds: float, rate: int = RATE) -> Audio:
    return np.zeros(int(seconds * rate), np.float32)


def padded(audio: Audio, before_s: float, after_s: float, rate: int = RATE) -> Audio:
    """`audio` with `before_s` of silence before it and `after_s` after it."""
    return np.concatenate([silence(before_s, rate), audio, silence(after_s, rate)])


def pcm16(audio: Audio) -> bytes:
    """Little-endian 16-bit samples, clipped to [-1, 1] first."""
    return (np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes()

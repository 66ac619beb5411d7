"""A labelled corpus of overlaps: what a user says (or coughs) while the assistant answers.

Each item is one sound that starts at sample 0 (its onset) and a place in the answer, the
offset after the answer's first audio at which the client's microphone carries it; the client
streams room tone (`room_tone`) before and after. Three classes, two labels:
- `interruption` (label `interrupt`): a question or command, 1-3 s of speech ("Wait, stop,
  stop.", "Can you say that again?", ...);
- `backchannel` (`not-interrupt`): "yeah", "uh-huh", "okay", "right", "mm-hmm", "I see", ...,
  0.2-0.8 s of speech. Words that a voice speaks longer than 0.8 s (flite's and festival's
  "mm-hmm" take 0.9-1.0 s) are synthesised again faster (the engine's own duration stretch,
  0.75), never cut: the stretch is kept on the item;
- `burst` (`not-interrupt`): non-speech, filtered noise from a seeded generator: a cough, a
  double cough, a train of keyboard clicks, two knocks on the table.

Speech comes from every voice here except flite's `slt` (the cascade's assistant voice):
flite `kal16`, `awb`, `rms` and festival's default voice (`kal_diphone`), taking turns so that
each phrase is spoken by another voice at each offset. Speech is cut to its spoken part (10 ms
frames above an RMS of 0.02, both ends) and scaled to an active level of -20 dBFS, then by a
seeded gain of -6..0 dB; bursts peak at -6 dBFS times the same kind of gain.

Deterministic: the same `CorpusPlan` gives the same samples (flite and festival are
deterministic; every random draw comes from `numpy.random.default_rng([seed, index])`).
Synthesis goes through temporary files only (bench/speech.py); nothing is cached.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import signal

from bench.speech import RATE, Audio, festival, festival_paced, flite, flite_paced, spoken_part

Kind = Literal["interruption", "backchannel", "burst"]
Label = Literal["interrupt", "not-interrupt"]
KINDS: tuple[Kind, ...] = ("interruption", "backchannel", "burst")

# Every voice but flite's slt, which speaks the cascade's answers.
VOICES = ("kal16", "awb", "rms", "festival")
INTERRUPTIONS = (
    "Wait, stop, stop.",
    "Can you say that again?",
    "No, I meant the other one.",
    "Hold on, that is not what I asked.",
    "Sorry, could you repeat the last part?",
    "Actually, cancel that and start over.",
    "What do you mean by that?",
    "Stop, I have a question.",
)
BACKCHANNELS = ("yeah", "uh-huh", "okay", "right", "mm-hmm", "I see", "sure", "got it")
BURSTS = ("cough", "double-cough", "clicks", "knock")

BACKCHANNEL_MAX_S = 0.8
INTERRUPTION_MIN_S = 1.0
FAST_STRETCH = 0.75  # what an over-long backchannel is spoken again with
SPEECH_RMS = 0.1  # -20 dBFS, over the spoken part
BURST_PEAK = 0.5  # -6 dBFS


@dataclass(frozen=True)
class CorpusPlan:
    """How many of each class, at which offsets (seconds after the answer's first audio)."""

    interruptions: int = 6
    backchannels: int = 6
    bursts: int = 4
    offsets_s: tuple[float, ...] = (0.5, 1.5, 3.0)
    seed: int = 14
    rate: int = RATE

    def __post_init__(self) -> None:
        limits = (
            (self.interruptions, len(INTERRUPTIONS)),
            (self.backchannels, len(BACKCHANNELS)),
            (self.bursts, len(BURSTS)),
        )
        if any(not 0 <= n <= most for n, most in limits):
            raise ValueError(f"at most {[most for _, most in limits]} items per class")
        if not self.offsets_s or min(self.offsets_s) < 0:
            raise ValueError("offsets must be given and >= 0")


@dataclass(frozen=True, eq=False)
class OverlapItem:
    """One overlap: its sound (onset at sample 0), its class and where in the answer it goes."""

    name: str
    kind: Kind
    source: str  # the words spoken, or the burst's name
    voice: str  # a flite voice, "festival", or "noise"
    offset_s: float
    audio: Audio
    rate: int
    stretch: float = 1.0  # the engine's duration stretch (1.0: as the voice speaks it)

    @property
    def label(self) -> Label:
        return "interrupt" if self.kind == "interruption" else "not-interrupt"

    @property
    def duration_s(self) -> float:
        return len(self.audio) / self.rate


def _speech(text: str, voice: str, stretch: float, rate: int) -> Audio:
    if voice == "festival":
        audio = festival(text, rate) if stretch == 1.0 else festival_paced(text, stretch, rate)
    else:
        audio = (
            flite(text, voice, rate) if stretch == 1.0 else flite_paced(text, voice, stretch, rate)
        )
    return spoken_part(audio, rate)


def _active_rms(audio: Audio, rate: int) -> float:
    frame = rate // 100
    frames = audio[: len(audio) // frame * frame].reshape(-1, frame)
    rms = np.sqrt((frames**2).mean(axis=1))
    loud = rms[rms > 0.02]
    return float(np.sqrt((loud**2).mean())) if loud.size else float(rms.max(initial=1e-9))


def _gain(rng: np.random.Generator) -> float:
    return float(10 ** (rng.uniform(-6.0, 0.0) / 20))


def _decaying(
    rng: np.random.Generator, rate: int, seconds: float, tau_s: float, band: tuple[float, float]
) -> Audio:
    """Band-passed noise with a 5 ms attack and an exponential decay: the shape of a cough
    or a knock, not a voice (no pitch, no formant movement)."""
    n = int(seconds * rate)
    sos = signal.butter(4, band, btype="bandpass", fs=rate, output="sos")
    noise = signal.sosfilt(sos, rng.standard_normal(n + rate // 10))[rate // 10 :]
    t = np.arange(n) / rate
    envelope = np.minimum(1.0, t / 0.005) * np.exp(-t / tau_s)
    out = noise * envelope
    return np.asarray(out / max(float(np.abs(out).max()), 1e-9), np.float32)


def burst(name: str, rng: np.random.Generator, rate: int = RATE) -> Audio:
    """One non-speech burst, peak 1.0, onset at sample 0."""
    if name == "cough":
        return _decaying(rng, rate, rng.uniform(0.25, 0.35), 0.07, (250.0, 3000.0))
    if name == "double-cough":
        first = _decaying(rng, rate, rng.uniform(0.2, 0.28), 0.06, (250.0, 3000.0))
        second = _decaying(rng, rate, rng.uniform(0.2, 0.28), 0.06, (250.0, 3000.0))
        gap = np.zeros(int(rng.uniform(0.1, 0.18) * rate), np.float32)
        return np.asarray(np.concatenate([first, gap, 0.8 * second]), np.float32)
    if name == "clicks":
        parts: list[Audio] = []
        for _ in range(int(rng.integers(5, 9))):
            parts.append(_decaying(rng, rate, 0.012, 0.002, (1500.0, 8000.0)))
            parts.append(np.zeros(int(rng.uniform(0.07, 0.15) * rate), np.float32))
        return np.concatenate(parts[:-1]).astype(np.float32)
    if name == "knock":
        knock = _decaying(rng, rate, 0.09, 0.02, (60.0, 500.0))
        gap = np.zeros(int(rng.uniform(0.12, 0.2) * rate), np.float32)
        return np.asarray(np.concatenate([knock, gap, 0.9 * knock]), np.float32)
    raise ValueError(f"unknown burst {name!r}")


def room_tone(seconds: float, seed: int, rate: int = RATE, rms: float = 0.002) -> Audio:
    """Seeded low-passed noise at about -54 dBFS: a quiet room, well under any VAD threshold,
    so that the microphone never sends digital silence."""
    rng = np.random.default_rng([seed, 0x700E])
    n = int(seconds * rate)
    sos = signal.butter(2, 1000.0, btype="lowpass", fs=rate, output="sos")
    tone = signal.sosfilt(sos, rng.standard_normal(n))
    return np.asarray(tone * (rms / max(float(np.sqrt((tone**2).mean())), 1e-12)), np.float32)


def build_corpus(plan: CorpusPlan = CorpusPlan()) -> tuple[OverlapItem, ...]:
    """Every item of `plan`: each phrase or burst at each offset, classes in `KINDS` order."""
    items: list[OverlapItem] = []
    rate = plan.rate
    for j, offset in enumerate(plan.offsets_s):
        for i, text in enumerate(INTERRUPTIONS[: plan.interruptions]):
            voice = VOICES[(i + j) % len(VOICES)]
            rng = np.random.default_rng([plan.seed, 1, i, j])
            audio = _speech(text, voice, 1.0, rate)
            audio = audio * (SPEECH_RMS * _gain(rng) / _active_rms(audio, rate))
            items.append(_item("interruption", text, voice, offset, audio, rate, 1.0))
        for i, text in enumerate(BACKCHANNELS[: plan.backchannels]):
            voice = VOICES[(i + j) % len(VOICES)]
            rng = np.random.default_rng([plan.seed, 2, i, j])
            stretch = 1.0
            audio = _speech(text, voice, stretch, rate)
            if len(audio) > BACKCHANNEL_MAX_S * rate:
                stretch = FAST_STRETCH
                audio = _speech(text, voice, stretch, rate)
            audio = audio * (SPEECH_RMS * _gain(rng) / _active_rms(audio, rate))
            items.append(_item("backchannel", text, voice, offset, audio, rate, stretch))
        for i, name in enumerate(BURSTS[: plan.bursts]):
            rng = np.random.default_rng([plan.seed, 3, i, j])
            audio = burst(name, rng, rate) * (BURST_PEAK * _gain(rng))
            items.append(_item("burst", name, "noise", offset, audio, rate, 1.0))
    return tuple(items)


def _item(
    kind: Kind, source: str, voice: str, offset: float, audio: Audio, rate: int, stretch: float
) -> OverlapItem:
    slug = "-".join("".join(c if c.isalnum() else " " for c in source.lower()).split())
    return OverlapItem(
        name=f"{kind}/{voice}/{slug}@{offset:g}s",
        kind=kind,
        source=source,
        voice=voice,
        offset_s=offset,
        audio=np.clip(audio, -1.0, 1.0).astype(np.float32),
        rate=rate,
        stretch=stretch,
    )

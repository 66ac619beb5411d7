"""The echo corpus (issue 26 item 3): the assistant's own answer, as each pipeline voices it,
coming back through a room into the microphone, with and without the user speaking over it.

Rules:
1. The answer (`ANSWER`) in two voices (`VOICES`), cut to its spoken part and scaled to an
   active level of `SPEECH_RMS` (bench/rooms.py), the level the user speaks at, so that a room's
   `level_db` is the echo against the user: -20 dB (quiet) to 0 dB (as loud as the user).
   - `cascade`: Piper's `joe`, the voice the cascade's `tts` speaks with by default, through
     the stage's own speech module, clause by clause as the stage speaks.
   - `omni`: Qwen3-Omni with the tiny random weights a CPU machine runs makes noise, not
     speech: an echo of it says nothing about a speech detector's or a canceller's behaviour on
     speech. Its stand-in is a second, different synthetic voice: festival's `kal_diphone`
     (male, diphone synthesis, another pitch and spectrum than joe's neural one; flite's
     voices speak the user's side). Qwen3-Omni's real voice is measured on a GPU node only.
2. Each item is one session: an answer plays through a room (`Room`: playout + capture delay,
   rt60, seed, echo level; None: no echo, a headset, the echo-free reference) with playout
   jitter, and either nothing else (`echo`: any barge-in or pause is false), a real
   interruption (`interruption`: a question or command, 1-3 s, from bench/overlap_corpus.py's
   phrases) or a backchannel (`backchannel`: "yeah", "uh-huh", ... 0.2-0.8 s) starting
   `offset_s` after the answer's first audio.
3. The user speaks in flite's `kal16`, `awb` and `rms` voices (never joe or festival, the
   assistant's), taking turns; with `human=True` and bench/human_speech.py present, also in
   human recordings (`human` source), reported per source. Every user sound is cut to its
   spoken part and scaled to `SPEECH_RMS` active level.
4. The grid: every echo level x every delay, rooms cycling through `RT60S` and, slower,
   through the loudspeaker-microphone distances `DISTANCES_M` (bench/rooms.py), with a seed
   per item; offsets cycling through `OFFSETS_S` (0.5 s first: no blind window at the start of
   an answer). Deterministic: the same `Plan` gives the same items and samples.
5. The echo-free items (a headset, the latency target's reference) are the items over echo's
   own user sounds at their own offsets: item i without a room is cell i's speech, for the
   first `PAIRED` cells at most (rule 4's cycles repeat every 48 cells: every pair once), so
   the echo-free median is of the same speech as the median over echo.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import cache
from typing import Literal

import numpy as np
import soxr

from bench import human_speech as human
from bench.overlap_corpus import BACKCHANNELS, INTERRUPTIONS, _active_rms, _speech
from bench.rooms import SPEECH_RMS, Room
from bench.speech import RATE, Audio, festival, spoken_part
from turntaker_models.cascade import speech
from turntaker_models.contract import OUTPUT_SAMPLE_RATE

Kind = Literal["echo", "interruption", "backchannel"]
KINDS: tuple[Kind, ...] = ("echo", "interruption", "backchannel")
Voice = Literal["cascade", "omni"]

ANSWER = (
    "The weather in Paris is mild in spring. Expect light rain on most afternoons, so take "
    "an umbrella when you go out."
)
VOICES: dict[Voice, str] = {"cascade": "Piper joe", "omni": "festival kal_diphone (stand-in)"}
USER_VOICES = ("kal16", "awb", "rms")
LEVELS_DB = (-20.0, -10.0, -6.0, -3.0, 0.0)
DELAYS_MS = (40.0, 120.0, 250.0, 400.0)
RT60S = (0.2, 0.4, 0.6)
PAIRED = 48  # rule 5: 2 sources x 24 synthetic (phrase, voice) or 12 human, x 3 offsets
DISTANCES_M = (0.1, 0.5, 1.5)
OFFSETS_S = (0.5, 1.5, 3.0)
JITTER_MS = 40.0


@cache
def answer(voice: Voice, rate: int = RATE) -> Audio:
    """Rule 1: the answer in `voice`, at the user's active speech level."""
    audio = _cascade(rate) if voice == "cascade" else festival(ANSWER, rate)
    audio = spoken_part(audio, rate)
    audio = audio * (SPEECH_RMS / _active_rms(audio, rate))
    return np.clip(audio, -1.0, 1.0).astype(np.float32)


def _cascade(rate: int) -> Audio:
    clauses = [speech.synthesize(piece, "joe") for piece in speech.pieces(ANSWER)]
    audio = np.concatenate(clauses)
    if rate != OUTPUT_SAMPLE_RATE:
        audio = soxr.resample(audio, OUTPUT_SAMPLE_RATE, rate)
    return np.asarray(audio, np.float32)


@dataclass(frozen=True, eq=False)
class UserSound:
    kind: Kind
    text: str
    source: str  # "flite/kal16", "human/asterisk", ...
    audio: Audio


@dataclass(frozen=True, eq=False)
class EchoItem:
    """One session (rule 2)."""

    voice: Voice
    kind: Kind
    room: Room | None  # None: no echo (the echo-free reference)
    jitter_ms: float
    offset_s: float
    user: UserSound | None

    @property
    def level(self) -> str:
        return "none" if self.room is None else f"{self.room.level_db:g} dB"

    @property
    def name(self) -> str:
        room = "no-echo"
        if self.room is not None:
            r = self.room
            room = f"{r.level_db:g}dB-{r.delay_ms:g}ms-rt{r.rt60_s:g}-{r.distance_m:g}m-s{r.seed}"
        said = f"/{self.user.source}/{self.user.text}" if self.user else ""
        return f"{self.voice}/{self.kind}/{room}@{self.offset_s:g}s{said}"


@dataclass(frozen=True)
class Plan:
    """What to build (rule 4). `seeds`: rooms per (level, delay) cell and kind."""

    voices: tuple[Voice, ...] = ("cascade", "omni")
    levels_db: tuple[float, ...] = LEVELS_DB
    delays_ms: tuple[float, ...] = DELAYS_MS
    kinds: tuple[Kind, ...] = KINDS
    seeds: int = 1
    # Interruptions (and half as many backchannels) with no echo, per voice; None: rule 5's.
    echo_free: int | None = None
    jitter_ms: float = JITTER_MS
    human: bool = True  # where bench/human_speech.py and its packages are there
    seed: int = 26


def _scaled(audio: Audio, rate: int) -> Audio:
    cut = spoken_part(audio, rate)
    return np.clip(cut * (SPEECH_RMS / _active_rms(cut, rate)), -1.0, 1.0).astype(np.float32)


@cache
def _synthetic(kind: Kind, index: int, rate: int) -> UserSound:
    phrases = INTERRUPTIONS if kind == "interruption" else BACKCHANNELS
    text = phrases[index % len(phrases)]
    voice = USER_VOICES[index % len(USER_VOICES)]
    # Backchannels are spoken a quarter faster, so "mm-hmm" stays a backchannel's length.
    audio = _speech(text, voice, 1.0 if kind == "interruption" else 0.75, rate)
    return UserSound(kind, text, f"flite/{voice}", _scaled(audio, rate))


# Human acknowledgements (asterisk prompts): the nearest the human sets hold to a backchannel.
HUMAN_BACKCHANNELS = ("digits/oh", "auth-thankyou", "vm-no", "hello")


@cache
def _human_sounds(kind: Kind, rate: int) -> tuple[UserSound, ...]:
    """Rule 3's human recordings where bench/human_speech.py is there (and its packages are
    installed); () otherwise. Interruptions: its utterances of 1-3 s, sources taking turns."""
    if kind == "echo" or human.check_installed():
        return ()
    if kind == "backchannel":
        picked = [human.asterisk(name, rate) for name in HUMAN_BACKCHANNELS]
    else:
        fitting = [r for r in human.utterances(rate) if 1.0 <= r.duration_s <= 3.0]
        picked = list(human.round_robin(tuple(fitting)))[:12]
    return tuple(
        UserSound(kind, str(r.transcript or r.name), f"human/{r.source}", _scaled(r.audio, rate))
        for r in picked
    )


def build(plan: Plan, rate: int = RATE) -> tuple[EchoItem, ...]:
    """Every item of `plan`, in a fixed order (rule 4)."""
    items: list[EchoItem] = []
    counter = itertools.count()
    for voice in plan.voices:
        for kind in plan.kinds:
            cells = itertools.product(plan.levels_db, plan.delays_ms, range(plan.seeds))
            for c, (level, delay, _) in enumerate(cells):
                n = next(counter)
                rt60 = RT60S[c % len(RT60S)]
                distance = DISTANCES_M[(c // len(RT60S)) % len(DISTANCES_M)]
                room = Room(delay, rt60, level, seed=plan.seed * 1000 + n, distance_m=distance)
                offset = OFFSETS_S[c % len(OFFSETS_S)] if kind != "echo" else 0.0
                user = _user(kind, c, plan.human, rate)
                items.append(EchoItem(voice, kind, room, plan.jitter_ms, offset, user))
        grid = len(plan.levels_db) * len(plan.delays_ms) * plan.seeds
        paired = min(PAIRED, grid) if plan.echo_free is None else plan.echo_free  # rule 5
        free: list[tuple[Kind, int]] = []
        if "interruption" in plan.kinds:
            free += [("interruption", i) for i in range(paired)]
        if "backchannel" in plan.kinds:
            free += [("backchannel", i) for i in range(paired // 2)]
        for kind, i in free:
            offset = OFFSETS_S[i % len(OFFSETS_S)]
            items.append(EchoItem(voice, kind, None, 0.0, offset, _user(kind, i, plan.human, rate)))
    return tuple(items)


def _user(kind: Kind, index: int, human: bool, rate: int) -> UserSound | None:
    """The user's sound for the `index`-th item of `kind`: synthetic and human in turn."""
    if kind == "echo":
        return None
    recorded = _human_sounds(kind, rate) if human else ()
    if recorded and index % 2:
        return recorded[(index // 2) % len(recorded)]
    return _synthetic(kind, index // (2 if recorded else 1), rate)

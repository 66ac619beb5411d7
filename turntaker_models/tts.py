"""Text to speech for the `tts` model: the flite binary, resampled to 24 kHz with soxr.

The `cascade` ensemble sends one request per llm response (a text delta, and the sentence it
completed, if any), and this stage streams each sentence's audio back in chunks. Three choices
shape it:
- Clause by clause: a sentence is cut at clause punctuation (and at most `MAX_PIECE_WORDS`
  words) and each piece is synthesised by its own flite run, so the first audio leaves after the
  first clause rather than the whole sentence, and a cancel lands between pieces instead of
  after the whole sentence has been synthesised. flite pauses at commas anyway, so the seams
  sound like the pauses it would have made.
- Ordered: sentences of one request id must play in order, so every request id is pinned to
  one worker thread (a bounded queue each); different ids may run on other workers.
- Cancellable: before each piece and each chunk the worker asks the stream and the cancel board
  (Triton does not pass stream cancels into ensemble steps; see cancel_board.py).

Text passes through: Triton 2.51 refuses an ensemble whose outputs come from two different
decoupled steps, so in `cascade` the llm's text deltas reach the client through this stage too.
Every llm response is one request here (TEXT_DELTA, SENTENCE). `Speaker.submit` sends a non-empty
delta on at once, from the caller's thread (Triton's execute(), in arrival order), ahead of the
audio still queued for earlier sentences: text stays in order among itself, and the text of a
sentence may go out before that sentence's audio, never after it. A request with no sentence
to speak (most of them: one per token) ends right there; only sentences go to the workers.
"""

from __future__ import annotations

import queue
import re
import shutil
import subprocess
import tempfile
import threading
import unicodedata
import wave
import zlib
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import numpy.typing as npt
import soxr

from turntaker_models.cancel_board import CancelBoard
from turntaker_models.contract import (
    OUTPUT_SAMPLE_RATE,
    ContractError,
    GenerationParameters,
    decode_parameters,
)

Audio = npt.NDArray[np.float32]
STAGE = "tts"

FLITE_VOICES = ("slt", "kal", "kal16", "awb", "rms")
# slt is flite's clearest 16 kHz voice (kal is an 8 kHz diphone voice).
DEFAULT_VOICE = "slt"
# OpenAI Realtime voice names, so a client that asks for one gets a fitting flite voice.
OPENAI_VOICES = {
    "alloy": "slt",
    "ash": "rms",
    "ballad": "awb",
    "cedar": "rms",
    "coral": "slt",
    "echo": "rms",
    "fable": "awb",
    "marin": "slt",
    "nova": "slt",
    "onyx": "kal16",
    "sage": "slt",
    "shimmer": "slt",
    "verse": "awb",
}

# A sentence longer than this is not a sentence: refuse it rather than talk for minutes.
MAX_SENTENCE_CHARS = 4000
MAX_PIECE_WORDS = 24
# First chunk small so playback can start early; later ones larger for fewer responses.
FIRST_CHUNK_SAMPLES = OUTPUT_SAMPLE_RATE // 20
CHUNK_SAMPLES = OUTPUT_SAMPLE_RATE // 5
# flite pads every utterance with ~0.2 s of silence at each end. Leading silence is pure
# latency; the trailing pause is kept short so that clause seams sound like commas.
KEEP_LEAD_S = 0.02
KEEP_TRAIL_S = 0.15
FLITE_TIMEOUT_S = 30.0
# Stop records already written, per worker pool: one per cancelled id is enough.
_REMEMBERED_STOPS = 1024

_CLAUSE_END = re.compile(r"(?<=[,;:.!?])\s+")
_SPEAKABLE = re.compile(r"[A-Za-z0-9]")


class TtsError(RuntimeError):
    """Synthesis failed; the message is for the caller."""


def flite_voice(name: str) -> str:
    """The flite voice for a GenerationParameters.voice: flite names, OpenAI names, else default."""
    key = name.strip().lower()
    if key in FLITE_VOICES:
        return key
    return OPENAI_VOICES.get(key, DEFAULT_VOICE)


def clean_text(text: str) -> str:
    # flite reads bytes as Latin-1-ish ASCII: fold accents, drop what it would mispronounce.
    folded = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    return " ".join(folded.split())


def pieces(text: str, max_words: int = MAX_PIECE_WORDS) -> list[str]:
    """The sentence cut into clauses of at most `max_words` words; unspeakable ones dropped."""
    out: list[str] = []
    for clause in _CLAUSE_END.split(clean_text(text)):
        words = clause.split()
        for i in range(0, len(words), max_words):
            piece = " ".join(words[i : i + max_words])
            if _SPEAKABLE.search(piece):
                out.append(piece)
    return out


def find_flite() -> str:
    flite = shutil.which("flite")
    if flite is None:
        raise TtsError("the flite binary is not installed (apt-get install flite)")
    return flite


def _read_wav(path: Path) -> tuple[Audio, int]:
    with wave.open(str(path)) as wav:
        if (wav.getnchannels(), wav.getsampwidth()) != (1, 2):
            raise TtsError("flite wrote something other than 16-bit mono")
        rate = wav.getframerate()
        pcm = np.frombuffer(wav.readframes(wav.getnframes()), np.int16)
    return pcm.astype(np.float32) / 32768.0, rate


def trim_silence(
    audio: Audio, rate: int, lead_s: float = KEEP_LEAD_S, trail_s: float = KEEP_TRAIL_S
) -> Audio:
    """`audio` with its silent ends cut down to `lead_s` and `trail_s`."""
    frame = max(1, rate // 100)
    n = audio.shape[0] // frame
    if n == 0:
        return audio
    rms = np.sqrt((audio[: n * frame].astype(np.float64).reshape(n, frame) ** 2).mean(axis=1))
    loud = np.flatnonzero(rms > max(1e-4, 0.02 * float(rms.max())))
    if loud.size == 0:
        return audio[:0]
    start = max(0, int(loud[0]) * frame - int(lead_s * rate))
    end = min(audio.shape[0], (int(loud[-1]) + 1) * frame + int(trail_s * rate))
    return audio[start:end]


def synthesize(text: str, voice: str, flite: str | None = None) -> Audio:
    """One flite run: `text` spoken by flite `voice`, 24 kHz mono float32 in [-1, 1]."""
    if len(text) > MAX_SENTENCE_CHARS:
        raise ContractError(
            f"SENTENCE has {len(text)} characters, at most {MAX_SENTENCE_CHARS} allowed"
        )
    binary = flite or find_flite()
    with tempfile.TemporaryDirectory(prefix="turntaker-tts-") as tmp:
        source, target = Path(tmp) / "text.txt", Path(tmp) / "speech.wav"
        # Through a file, not argv: text that starts with "-" can never be read as an option.
        source.write_text(text, encoding="ascii", errors="ignore")
        try:
            done = subprocess.run(
                [binary, "-voice", flite_voice(voice), "-f", str(source), "-o", str(target)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                timeout=FLITE_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise TtsError(f"flite took more than {FLITE_TIMEOUT_S:.0f} s") from None
        if done.returncode != 0 or not target.exists():
            detail = done.stderr.decode(errors="replace").strip()[-300:]
            raise TtsError(f"flite failed with exit code {done.returncode}: {detail}")
        audio, rate = _read_wav(target)
    audio = trim_silence(audio, rate)
    if rate != OUTPUT_SAMPLE_RATE and audio.shape[0]:
        audio = soxr.resample(audio, rate, OUTPUT_SAMPLE_RATE, quality="HQ")
    return np.clip(np.asarray(audio, dtype=np.float32), -1.0, 1.0)


def chunks(audio: Audio, first: int, size: int = CHUNK_SAMPLES) -> Iterator[Audio]:
    """`audio` cut into a chunk of `first` samples and then chunks of `size`."""
    start = 0
    step = max(1, first)
    while start < audio.shape[0]:
        yield audio[start : start + step]
        start += step
        step = size


class Sink(Protocol):
    """Where one request's responses go (a Triton response sender in the model).

    A request ends with exactly one of `final()`, `text(..., final=True)` or `error()` (the
    error response carries the final flag itself).
    """

    def text(self, text: bytes, final: bool) -> None: ...

    def chunk(self, audio: Audio) -> None: ...

    def error(self, message: str) -> None: ...

    def final(self) -> None: ...

    def cancelled(self) -> bool: ...


@dataclass(frozen=True)
class SpeechJob:
    """One request as it arrived: decoded by the worker, so errors keep the request order."""

    request_id: str
    sentence: bytes
    parameters: bytes
    # The text delta to pass on (see the module docstring); b"" when there is none.
    text: bytes = b""

    def needs_worker(self) -> bool:
        """Whether anything but passing the text on is left: a sentence to speak, or an error
        to report in order. False for the per-token requests without a sentence and for
        text-only generations (audio=false), which end at once."""
        if not self.sentence.strip():
            return False
        if not self.request_id:
            return True
        try:
            return decode_parameters(self.parameters).audio
        except ContractError:
            return True


class Speaker:
    """Speaks jobs on `workers` threads; jobs of one request id run in order on one thread."""

    def __init__(
        self,
        board: CancelBoard,
        workers: int = 2,
        queue_size: int = 64,
        flite: str | None = None,
    ) -> None:
        self.board = board
        self.flite = flite or find_flite()
        self._stopped: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()
        self._queues: list[queue.Queue[tuple[SpeechJob, Sink] | None]] = [
            queue.Queue(queue_size) for _ in range(max(1, workers))
        ]
        self._threads = [
            threading.Thread(target=self._loop, args=(q,), name=f"tts-{i}", daemon=True)
            for i, q in enumerate(self._queues)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, job: SpeechJob, sink: Sink) -> None:
        """Pass `job`'s text on now; queue its sentence, if any, else end the request.

        Blocks while the worker's queue is full (back-pressure on Triton); only requests with
        a sentence (or an error to report) take a place in it.
        """
        speak = job.needs_worker()
        # A cancelled id passes no more text on (a board check costs ~12 µs).
        text = job.text if job.text and not self.board.cancelled(job.request_id) else b""
        if not speak:
            if text:
                sink.text(text, final=True)
            else:
                sink.final()
            return
        if text:
            sink.text(text, final=False)
        q = self._queues[zlib.crc32(job.request_id.encode()) % len(self._queues)]
        q.put((job, sink))

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop the workers after the jobs already queued; gives up after `timeout_s` each."""
        for q in self._queues:
            try:
                q.put(None, timeout=timeout_s)
            except queue.Full:
                # A worker stuck on a full queue is a daemon thread: the stub's exit ends it.
                continue
        for thread in self._threads:
            thread.join(timeout_s)

    def _loop(self, jobs: queue.Queue[tuple[SpeechJob, Sink] | None]) -> None:
        while (item := jobs.get()) is not None:
            job, sink = item
            try:
                self.run(job, sink)
            except Exception:
                # The sender itself failed (client gone): nothing more can reach the caller,
                # but the worker must live on for the other streams.
                continue

    def _is_cancelled(self, request_id: str, sink: Sink) -> bool:
        if not (sink.cancelled() or self.board.cancelled(request_id)):
            return False
        # Also serialises record_stop: the board's flock is per open file, so it does not keep
        # this process's worker threads apart.
        with self._lock:
            if request_id not in self._stopped:
                self.board.record_stop(request_id, STAGE)
            self._stopped[request_id] = None
            while len(self._stopped) > _REMEMBERED_STOPS:
                self._stopped.popitem(last=False)
        return True

    def run(self, job: SpeechJob, sink: Sink) -> None:
        """Stream `job`'s audio to `sink`, then the final flag; or one error response, final."""
        try:
            self._speak(job, sink)
        except (ContractError, TtsError) as error:
            sink.error(f"tts: {error}")
            return
        except Exception as error:
            sink.error(f"tts: {type(error).__name__}: {error}")
            return
        sink.final()

    def _speak(self, job: SpeechJob, sink: Sink) -> None:
        if not job.request_id:
            raise ContractError("REQUEST_ID must be a non-empty id")
        params: GenerationParameters = decode_parameters(job.parameters)
        try:
            sentence = job.sentence.decode()
        except UnicodeDecodeError:
            raise ContractError("SENTENCE is not UTF-8") from None
        if len(sentence) > MAX_SENTENCE_CHARS:
            raise ContractError(
                f"SENTENCE has {len(sentence)} characters, at most {MAX_SENTENCE_CHARS}"
            )
        if not params.audio:
            return
        first = FIRST_CHUNK_SAMPLES
        for piece in pieces(sentence):
            if self._is_cancelled(job.request_id, sink):
                return
            audio = synthesize(piece, params.voice, self.flite)
            for chunk in chunks(audio, first):
                if self._is_cancelled(job.request_id, sink):
                    return
                sink.chunk(np.ascontiguousarray(chunk, dtype=np.float32))
            first = CHUNK_SAMPLES

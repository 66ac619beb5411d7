"""Text to speech for the `tts` model: flite in process, 24 kHz, text sent with its audio.

The `cascade` ensemble sends one request per llm response (a text delta, and the sentence it
completed, if any), and this stage streams each sentence's audio back in chunks. Rules:
- Text rides with the chunk where its audio ends (docs/protocol.md rule 5: text counts as
  heard only where all of the audio it goes with was played). A TEXT_DELTA is held, per id,
  until the sentence it belongs to is spoken; then each word of it goes out on the AUDIO_CHUNK
  in which that word's audio ends (flite's segment end times, `WORD_END_GUARD_S` later, so
  that the word's last sound is surely in or before that chunk), and never on an earlier one.
  Text that flite says nothing for (punctuation, a dash) rides with the word before it; the
  whitespace after a sentence rides with its last word. A held text that does not line up with
  the sentence's words (a caller other than `cascade`) rides whole on the sentence's last
  chunk. All text of a spoken reply comes out, in order, exactly as the llm wrote it.
- Text alone passes at once where no audio is coming for it: `audio=false` generations, a
  request without REQUEST_ID, whitespace while nothing is held or being spoken for that id,
  and a sentence with nothing speakable (its text goes out as a text-only response after the
  audio before it).
- Clause by clause: a sentence is cut at clause punctuation (and at most `MAX_PIECE_WORDS`
  words) and each piece is synthesised on its own, so the first audio leaves after the first
  clause rather than the whole sentence, and a cancel lands between pieces instead of after
  the whole sentence has been synthesised. flite pauses at commas anyway, so the seams sound
  like the pauses it would have made.
- Ordered: sentences of one request id must play in order, so every request id is pinned to
  one worker thread (a bounded queue each); different ids may run on other workers.
- Cancellable: before each piece and each chunk the worker asks the stream and the cancel board
  (Triton does not pass stream cancels into ensemble steps; see cancel_board.py); a cancelled
  id's held text is dropped and no more of its text passes.
- Bounded: text is held for at most `MAX_HELD_STREAMS` ids (the least recently used goes
  first) and `MAX_HELD_CHARS` characters each.
- Function calls pass through, never spoken: a request's TOOL_CALL (a contract
  `ToolCallDelta`, the llm's; only SENTENCE is ever spoken, and the llm never puts a call
  there) goes out as its own response, after the audio and text of everything this id sent
  before it. With audio coming, it takes its place in the id's worker queue (behind the
  sentences before it; text still held then, which no sentence will speak, goes out just
  before it); with audio=false, or no id, it passes at once, after the request's text. A
  cancelled id passes no call either.

Every data response carries all three outputs (an empty TEXT_DELTA or TOOL_CALL, a zero-size
AUDIO_CHUNK): an ensemble only forms a response when all its requested outputs have a tensor of
the same iteration, so a response with one output missing would be held back and misalign the
rest.

Text passes through this stage at all because Triton 2.51 refuses an ensemble whose outputs come
from two different decoupled steps, so in `cascade` the llm's text deltas reach the client
through this stage too. A request with no sentence to speak (most of them: one per token) ends
at once with the final flag; its text waits here for its sentence's audio.
"""

from __future__ import annotations

import bisect
import codecs
import queue
import re
import threading
import unicodedata
import zlib
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import soxr

from turntaker_models import flite
from turntaker_models.cancel_board import CancelBoard
from turntaker_models.contract import (
    OUTPUT_SAMPLE_RATE,
    ContractError,
    GenerationParameters,
    decode_parameters,
)
from turntaker_models.triton_adapter import (
    ModelContext,
    PipelineSink,
    Reply,
    first_bytes,
)

Audio = npt.NDArray[np.float32]
STAGE = "tts"

FLITE_VOICES = flite.VOICES
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
# A word's audio may ring on after its last segment's end time: measured on the five voices,
# the energy of an utterance's last word fades out at most 49 ms after it (awb; the others
# before it). A word counts as ending this much after its last segment.
WORD_END_GUARD_S = 0.06
MAX_HELD_STREAMS = 1024
MAX_HELD_CHARS = 64 * 1024
# Stop records already written, per worker pool: one per cancelled id is enough.
_REMEMBERED_STOPS = 1024

_CLAUSE_PUNCTUATION = tuple(",;:.!?")
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


@dataclass(frozen=True)
class Piece:
    """One clause to synthesise: its cleaned text and which words of the sentence it holds."""

    text: str
    words: tuple[int, ...]

    @property
    def speakable(self) -> bool:
        return _SPEAKABLE.search(self.text) is not None


def plan(sentence: str, max_words: int = MAX_PIECE_WORDS) -> tuple[list[str], list[Piece]]:
    """The sentence's words (whitespace-separated, as written) and its clauses.

    A clause ends after a word ending in clause punctuation, or at `max_words` words. A word
    that cleans to nothing (a dash, an emoji) belongs to no piece: it has no audio.
    """
    words = sentence.split()
    out: list[Piece] = []
    texts: list[str] = []
    members: list[int] = []
    for index, word in enumerate(words):
        # One word stays one word: a compatibility form may fold to text with a space in it
        # ("a\u00a8b" -> "a b"), which would shift every later word's timing.
        cleaned = clean_text(word).replace(" ", "")
        if not cleaned:
            continue
        texts.append(cleaned)
        members.append(index)
        if cleaned.endswith(_CLAUSE_PUNCTUATION) or len(members) == max_words:
            out.append(Piece(" ".join(texts), tuple(members)))
            texts, members = [], []
    if members:
        out.append(Piece(" ".join(texts), tuple(members)))
    return words, out


def pieces(text: str, max_words: int = MAX_PIECE_WORDS) -> list[str]:
    """The sentence cut into clauses of at most `max_words` words; unspeakable ones dropped."""
    return [piece.text for piece in plan(text, max_words)[1] if piece.speakable]


def _loud_span(audio: Audio, rate: int, lead_s: float, trail_s: float) -> tuple[int, int]:
    frame = max(1, rate // 100)
    n = audio.shape[0] // frame
    if n == 0:
        return 0, audio.shape[0]
    rms = np.sqrt((audio[: n * frame].astype(np.float64).reshape(n, frame) ** 2).mean(axis=1))
    loud = np.flatnonzero(rms > max(1e-4, 0.02 * float(rms.max())))
    if loud.size == 0:
        return 0, 0
    start = max(0, int(loud[0]) * frame - int(lead_s * rate))
    end = min(audio.shape[0], (int(loud[-1]) + 1) * frame + int(trail_s * rate))
    return start, end


def trim_silence(
    audio: Audio, rate: int, lead_s: float = KEEP_LEAD_S, trail_s: float = KEEP_TRAIL_S
) -> Audio:
    """`audio` with its silent ends cut down to `lead_s` and `trail_s`."""
    start, end = _loud_span(audio, rate, lead_s, trail_s)
    return audio[start:end]


@dataclass(frozen=True)
class Speech:
    """One piece spoken: 24 kHz audio, and per word of the piece's text the sample count at
    which that word's audio has ended (non-decreasing, at most the audio's length)."""

    audio: Audio
    word_ends: tuple[int, ...]


def _word_ends(
    text: str, tokens: Sequence[flite.TokenTime], rate: int, start: int, length: int
) -> tuple[int, ...]:
    words = text.split(" ")
    starts: list[int] = []
    at = 0
    for word in words:
        starts.append(at)
        at += len(word) + 1
    ends = [0] * len(words)
    guard = WORD_END_GUARD_S * rate
    cursor = 0
    for token in tokens:
        found = text.find(token.name, cursor)
        if found < 0:
            if token.end_s is not None:
                # Sound we cannot place: every word of the piece ends with the piece.
                return tuple([length] * len(words))
            continue
        cursor = found + len(token.name)
        if token.end_s is None:
            continue
        native = token.end_s * rate + guard - start
        sample = min(length, max(0, round(native * OUTPUT_SAMPLE_RATE / rate)))
        owner = bisect.bisect_right(starts, found) - 1
        ends[owner] = max(ends[owner], sample)
    running = 0
    for i, end in enumerate(ends):
        # A word flite said nothing for ends with the word before it.
        running = max(running, end)
        ends[i] = running
    return tuple(ends)


def speak(text: str, voice: str) -> Speech:
    """One flite synthesis of `text` (one clause) by `voice`, with the end of every word."""
    if len(text) > MAX_SENTENCE_CHARS:
        raise ContractError(
            f"SENTENCE has {len(text)} characters, at most {MAX_SENTENCE_CHARS} allowed"
        )
    text = clean_text(text)
    if not text:
        return Speech(np.zeros(0, np.float32), ())
    try:
        synthesis = flite.synth(text, flite_voice(voice))
    except flite.FliteError as error:
        raise TtsError(str(error)) from None
    rate = synthesis.rate
    native = synthesis.pcm.astype(np.float32) / 32768.0
    start, end = _loud_span(native, rate, KEEP_LEAD_S, KEEP_TRAIL_S)
    audio: Audio = native[start:end]
    if rate != OUTPUT_SAMPLE_RATE and audio.shape[0]:
        audio = np.asarray(soxr.resample(audio, rate, OUTPUT_SAMPLE_RATE, quality="HQ"))
    audio = np.clip(np.asarray(audio, dtype=np.float32), -1.0, 1.0)
    return Speech(audio, _word_ends(text, synthesis.tokens, rate, start, audio.shape[0]))


def synthesize(text: str, voice: str) -> Audio:
    """`text` spoken by flite `voice`, 24 kHz mono float32 in [-1, 1]."""
    return speak(text, voice).audio


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

    def chunk(self, audio: Audio, text: bytes = b"") -> None: ...

    def tool_call(self, call: bytes, final: bool) -> None: ...

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
    # The call delta to pass on (JSON ToolCallDelta), never spoken; b"" when there is none.
    tool_call: bytes = b""

    def needs_worker(self) -> bool:
        """Whether anything but passing the text (and call) on is left: a sentence to speak,
        a call to send after the audio before it, or an error to report in order. False for
        the per-token requests without either and for text-only generations (audio=false),
        which end at once."""
        if self.tool_call and self.request_id and self.audio():
            return True
        if not self.sentence.strip():
            return False
        if not self.request_id:
            return True
        return self.audio()

    def audio(self) -> bool:
        """Whether audio is coming for this id (bad PARAMETERS: assume so; the worker reports
        them in order)."""
        try:
            return decode_parameters(self.parameters).audio
        except ContractError:
            return True


@dataclass
class _Held:
    # Text received for one id and not yet sent; `base` is its offset in all text received.
    text: str = ""
    base: int = 0
    jobs: int = 0
    decoder: codecs.IncrementalDecoder = field(
        default_factory=lambda: codecs.getincrementaldecoder("utf-8")(errors="replace")
    )


def align(text: str, words: Sequence[str]) -> list[int] | None:
    """Where each of `words` ends in `text`, which must hold them in order, separated by
    whitespace only, from its start; None when it does not."""
    ends: list[int] = []
    at = 0
    for word in words:
        while at < len(text) and text[at].isspace():
            at += 1
        if not text.startswith(word, at):
            return None
        at += len(word)
        ends.append(at)
    return ends


class HeldText:
    """The text each request id received and has not sent yet (see the module docstring)."""

    def __init__(
        self, max_streams: int = MAX_HELD_STREAMS, max_chars: int = MAX_HELD_CHARS
    ) -> None:
        self._streams: OrderedDict[str, _Held] = OrderedDict()
        self._lock = threading.Lock()
        self._max_streams = max_streams
        self._max_chars = max_chars

    def __len__(self) -> int:
        return len(self._streams)

    def submit(self, request_id: str, text: bytes, sentence: bool) -> bytes:
        """Hold `text` for `request_id` (and count a sentence job if `sentence`); returns the
        text to pass on at once instead (whitespace with nothing held or being spoken)."""
        with self._lock:
            held = self._streams.get(request_id)
            if held is None:
                if not sentence and (not text or text.isspace()):
                    return text
                held = self._streams[request_id] = _Held()
                while len(self._streams) > self._max_streams:
                    self._streams.popitem(last=False)
            else:
                if not sentence and not held.jobs and not held.text and text.isspace():
                    return text
                self._streams.move_to_end(request_id)
            piece = held.decoder.decode(text)
            if len(held.text) + len(piece) <= self._max_chars:
                held.text += piece
            if sentence:
                held.jobs += 1
            return b""

    def snapshot(self, request_id: str) -> tuple[int, str]:
        with self._lock:
            held = self._streams.get(request_id)
            return (held.base, held.text) if held is not None else (0, "")

    def take(self, request_id: str, upto: int, whitespace_after: bool = False) -> bytes:
        """The held text up to offset `upto` (of all text received), and the whitespace held
        right after it if `whitespace_after`; removed from the store."""
        with self._lock:
            held = self._streams.get(request_id)
            if held is None:
                return b""
            cut = max(0, min(len(held.text), upto - held.base))
            if whitespace_after:
                while cut < len(held.text) and held.text[cut].isspace():
                    cut += 1
            out, held.text = held.text[:cut], held.text[cut:]
            held.base += cut
            return out.encode()

    def take_all(self, request_id: str) -> bytes:
        """All the text held for `request_id`, removed from the store."""
        with self._lock:
            held = self._streams.get(request_id)
            if held is None:
                return b""
            out, held.text = held.text, ""
            held.base += len(out)
            return out.encode()

    def done(self, request_id: str) -> None:
        """A sentence job of `request_id` ended; the id is forgotten once nothing is left."""
        with self._lock:
            held = self._streams.get(request_id)
            if held is None:
                return
            held.jobs = max(0, held.jobs - 1)
            if not held.jobs and not held.text:
                del self._streams[request_id]

    def drop(self, request_id: str) -> None:
        with self._lock:
            self._streams.pop(request_id, None)


class _Release:
    """Which held text goes out with which chunk of one sentence."""

    def __init__(self, held: HeldText, request_id: str, words: Sequence[str]) -> None:
        self.held = held
        self.request_id = request_id
        base, text = held.snapshot(request_id)
        ends = align(text, words)
        # Offsets (in all text received) where each word's text ends; None: not lined up.
        self.char_ends = None if ends is None else [base + end for end in ends]
        # Not lined up: all that is known of the text held now is that it came before this
        # sentence was spoken, so it rides on the sentence's last chunk.
        self.held_end = base + len(text)
        # Per word, the sentence sample at which its audio has ended (None: not spoken yet).
        self.sample_ends: list[int | None] = [None] * len(words)
        self.next = 0

    def known(self, word: int, sample: int) -> None:
        self.sample_ends[word] = sample

    def silent(self, word: int) -> None:
        # No audio at all: it rides with the words before it.
        if self.sample_ends[word] is None:
            self.sample_ends[word] = 0

    def upto(self, played: int) -> bytes:
        """The text of the words not sent yet whose audio has ended by sample `played`."""
        if self.char_ends is None:
            return b""
        while self.next < len(self.sample_ends):
            end = self.sample_ends[self.next]
            if end is None or end > played:
                break
            self.next += 1
        if self.next == 0:
            return b""
        return self.held.take(self.request_id, self.char_ends[self.next - 1])

    def rest(self) -> bytes:
        """Everything of this sentence not sent yet, with the whitespace after it."""
        self.next = len(self.sample_ends)
        if self.char_ends is None:
            return self.held.take(self.request_id, self.held_end)
        last = self.char_ends[-1] if self.char_ends else 0
        return self.held.take(self.request_id, last, whitespace_after=True)


class Speaker:
    """Speaks jobs on `workers` threads; jobs of one request id run in order on one thread."""

    def __init__(self, board: CancelBoard, workers: int = 2, queue_size: int = 64) -> None:
        self.board = board
        try:
            # Every voice now: a missing library fails the model's load, not a request.
            flite.load_voices()
        except flite.FliteError as error:
            raise TtsError(str(error)) from None
        self.held = HeldText()
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
        """Hold `job`'s text for its audio (or pass it on now); queue its sentence, if any,
        else end the request.

        Blocks while the worker's queue is full (back-pressure on Triton); only requests with
        a sentence (or an error to report) take a place in it.
        """
        speak = job.needs_worker()
        # A cancelled id passes no more text on (a board check costs ~12 µs), nor a call.
        cancelled = bool(job.text or job.tool_call) and self.board.cancelled(job.request_id)
        text = job.text if job.text and not cancelled else b""
        if job.request_id and job.audio():
            text = self.held.submit(job.request_id, text, sentence=speak)
        if not speak:
            call = job.tool_call if not cancelled else b""
            if text:
                sink.text(text, final=not call)
            if call:
                sink.tool_call(call, final=True)
            elif not text:
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
                self.held.drop(job.request_id)
                continue
            finally:
                self.held.done(job.request_id)

    def _is_cancelled(self, request_id: str, sink: Sink) -> bool:
        if not (sink.cancelled() or self.board.cancelled(request_id)):
            return False
        self.held.drop(request_id)
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
            self.held.drop(job.request_id)
            sink.error(f"tts: {error}")
            return
        except Exception as error:
            self.held.drop(job.request_id)
            sink.error(f"tts: {type(error).__name__}: {error}")
            return
        sink.final()

    def _speak(self, job: SpeechJob, sink: Sink) -> None:
        if job.sentence.strip() or not job.tool_call:
            self._say(job, sink)
        else:
            # A call alone: its PARAMETERS are still checked, in order, as a sentence's are.
            decode_parameters(job.parameters)
        if not job.tool_call or self._is_cancelled(job.request_id, sink):
            return
        # Everything this id sent before the call has been spoken: text still held belongs to
        # no sentence (none comes after a call), so it goes out now, just before the call.
        rest = self.held.take_all(job.request_id)
        if rest:
            sink.text(rest, final=False)
        sink.tool_call(job.tool_call, final=False)

    def _say(self, job: SpeechJob, sink: Sink) -> None:
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
        words, clauses = plan(sentence)
        release = _Release(self.held, job.request_id, words)
        spoken = {word for piece in clauses if piece.speakable for word in piece.words}
        for word in range(len(words)):
            if word not in spoken:
                release.silent(word)
        speakable = [i for i, piece in enumerate(clauses) if piece.speakable]
        last_piece = speakable[-1] if speakable else -1
        first = FIRST_CHUNK_SAMPLES
        offset = 0
        finished = False
        for index, piece in enumerate(clauses):
            if not piece.speakable:
                continue
            if self._is_cancelled(job.request_id, sink):
                return
            speech = speak(piece.text, params.voice)
            for word, end in zip(piece.words, speech.word_ends, strict=True):
                release.known(word, offset + end)
            parts = list(chunks(speech.audio, first))
            played = offset
            for number, chunk in enumerate(parts):
                if self._is_cancelled(job.request_id, sink):
                    return
                played += chunk.shape[0]
                finished = index == last_piece and number == len(parts) - 1
                text = release.rest() if finished else release.upto(played)
                sink.chunk(np.ascontiguousarray(chunk, dtype=np.float32), text)
            offset = played
            if parts:
                first = CHUNK_SAMPLES
        if finished or self._is_cancelled(job.request_id, sink):
            return
        # Nothing was spoken for what is left (no speakable piece, or its audio was silence):
        # it goes out as text alone, after the audio before it.
        rest = release.rest()
        if rest:
            sink.text(rest, final=False)


class ReplySink(PipelineSink):
    """One request's Reply (turntaker_models.triton_adapter) seen as a `Sink`."""

    def text(self, text: bytes, final: bool) -> None:
        self.send(text, final=final)

    def chunk(self, audio: Audio, text: bytes = b"") -> None:
        self.send(text, audio)

    def tool_call(self, call: bytes, final: bool) -> None:
        self.send(b"", final=final, tool_call=call)


class TtsService:
    """The `tts` model behind the Triton adapter: each request becomes a `SpeechJob`."""

    INPUTS = ("REQUEST_ID", "TEXT_DELTA", "SENTENCE", "PARAMETERS", "TOOL_CALL")

    def __init__(self, board: CancelBoard, workers: int = 2) -> None:
        self.board = board
        self.speaker = Speaker(board, workers=workers)

    def submit(self, tensors: dict[str, npt.NDArray[Any]], reply: Reply) -> None:
        # Decoding the id is left lenient here; the worker checks it and answers in order.
        job = SpeechJob(
            request_id=first_bytes(tensors.get("REQUEST_ID")).decode(errors="replace"),
            sentence=first_bytes(tensors.get("SENTENCE")),
            parameters=first_bytes(tensors.get("PARAMETERS")),
            text=first_bytes(tensors.get("TEXT_DELTA")),
            tool_call=first_bytes(tensors.get("TOOL_CALL")),
        )
        self.speaker.submit(job, ReplySink(reply, tool_calls=True))

    def close(self) -> None:
        self.speaker.close()
        self.board.close()


def make_service(context: ModelContext) -> TtsService:
    """The `tts` service from its config: WORKERS threads (default 2)."""
    return TtsService(
        CancelBoard.open(context.settings.board_path), workers=context.integer("WORKERS", 2)
    )

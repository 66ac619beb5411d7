"""Text to speech for the `tts` model: Piper's joe (default) or flite, 24 kHz, text sent with
its audio.

The `cascade` ensemble sends one request per llm response (a text delta, and the sentence it
completed, if any), and this stage streams each sentence's audio back in chunks. Rules:
- Text rides with the chunk where its audio ends (docs/protocol.md rule 5: text counts as
  heard only where all of the audio it goes with was played). A TEXT_DELTA is held, per id,
  until the sentence it belongs to is spoken; then each word of it goes out on the AUDIO_CHUNK
  in which that word's audio ends (the voice's own times, `WORD_END_GUARD_S` later, so
  that the word's last sound is surely in or before that chunk), and never on an earlier one.
  Text the voice says nothing for (punctuation, a dash) rides with the word before it; the
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
  the whole sentence has been synthesised. Both engines pause at commas anyway, so the seams
  sound like the pauses they would have made.
- Ordered: sentences of one request id must play in order, so every request id is pinned to
  one worker thread (a bounded queue each); different ids may run on other workers.
- Cancellable: before each piece and each chunk the worker asks the stream and the cancel board
  (Triton does not pass stream cancels into ensemble steps; see cancel_board.py); a cancelled
  id's held text is dropped and no more of its text passes.
  A cancel can also land while no sentence of the id is queued (the voice is faster than the
  llm): the llm then stops and no request of that id comes again, so every worker looks at
  the board every `SWEEP_S` (between jobs when busy, on a timeout when idle) for the ids
  pinned to it that hold text, drops a cancelled one's text and records the stop, instead of
  holding it until it is evicted. A busy worker sweeps too: one whose queue never empties for
  that long (other streams' sentences back to back) would otherwise never sweep.
- Bounded: text is held for at most `MAX_HELD_STREAMS` ids (the least recently used goes
  first) and `MAX_HELD_CHARS` characters each.
- Function calls pass through, never spoken: a request's TOOL_CALL (a contract
  `ToolCallDelta`, the llm's; only SENTENCE is ever spoken, and the llm never puts a call
  there) goes out as its own response, after the audio and text of everything this id sent
  before it. With audio coming, it takes its place in the id's worker queue (behind the
  sentences before it; text still held then, which no sentence will speak, goes out just
  before it); with audio=false, or no id, it passes at once, after the request's text. A
  cancelled id passes no call either.
- End reasons pass the same way as calls: a request's END_REASON (contract `EndReason`, the
  llm's last response when max_tokens cut its answer) goes out as its own response, after the
  audio and text of everything this id sent before it, so it is the id's last word.

The voices (names: voices.py; Piper: piper.py; flite: flite.py), clauses, word ends and chunks
are speech.py's; which held text goes out
with which chunk is held_text.py's. This module is the stage: its worker threads, order,
cancels and calls.

Every data response carries all four outputs (an empty TEXT_DELTA, TOOL_CALL or END_REASON, a
zero-size AUDIO_CHUNK): an ensemble only forms a response when all its requested outputs have a
tensor of the same iteration, so a response with one output missing would be held back and
misalign the rest.

Text passes through this stage at all because Triton 2.51 refuses an ensemble whose outputs come
from two different decoupled steps, so in `cascade` the llm's text deltas reach the client
through this stage too. A request with no sentence to speak (most of them: one per token) ends
at once with the final flag; its text waits here for its sentence's audio.
"""

from __future__ import annotations

import queue
import threading
import time
import zlib
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from turntaker_models.cancel_board import CancelBoard
from turntaker_models.cascade import flite, piper, voices
from turntaker_models.cascade.held_text import HeldText, WordRelease
from turntaker_models.cascade.speech import (
    CHUNK_SAMPLES,
    FIRST_CHUNK_SAMPLES,
    MAX_SENTENCE_CHARS,
    Audio,
    TtsError,
    chunks,
    plan,
    speak,
)
from turntaker_models.contract import (
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

STAGE = "tts"
# Stop records already written, per worker pool: one per cancelled id is enough.
_REMEMBERED_STOPS = 1024
# How often a worker checks the board for the ids pinned to it that hold text: a cancel is
# seen within one llm token's time (~50 ms), as in the llm itself; a busy worker, after the
# job it is on.
SWEEP_S = 0.05


class Sink(Protocol):
    """Where one request's responses go (a Triton response sender in the model).

    A request ends with exactly one of `final()`, `text(..., final=True)` or `error()` (the
    error response carries the final flag itself).
    """

    def text(self, text: bytes, final: bool) -> None: ...

    def chunk(self, audio: Audio, text: bytes = b"") -> None: ...

    def tool_call(self, call: bytes, final: bool) -> None: ...

    def end(self, reason: bytes, final: bool) -> None: ...

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
    # The end reason to pass on (contract EndReason); b"" when there is none.
    end_reason: bytes = b""

    def needs_worker(self) -> bool:
        """Whether anything but passing the text (and call, end reason) on is left: a sentence
        to speak, a call or an end reason to send after the audio before it, or an error to
        report in order. False for the per-token requests without either and for text-only
        generations (audio=false), which end at once."""
        if (self.tool_call or self.end_reason) and self.request_id and self.audio():
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


class Speaker:
    """Speaks jobs on `workers` threads; jobs of one request id run in order on one thread."""

    def __init__(
        self,
        board: CancelBoard,
        workers: int = 2,
        queue_size: int = 64,
        voice: str = voices.DEFAULT_VOICE,
    ) -> None:
        self.board = board
        try:
            # Every voice now: a missing library fails the model's load, not a request.
            self.voice = voices.check_voice(voice)
            flite.load_voices()
            piper.load()
        except (ValueError, flite.FliteError, piper.PiperError) as error:
            raise TtsError(str(error)) from None
        self.held = HeldText()
        self._stopped: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()
        self._queues: list[queue.Queue[tuple[SpeechJob, Sink] | None]] = [
            queue.Queue(queue_size) for _ in range(max(1, workers))
        ]
        self._threads = [
            threading.Thread(target=self._loop, args=(i,), name=f"tts-{i}", daemon=True)
            for i in range(len(self._queues))
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
        passes = job.text or job.tool_call or job.end_reason
        cancelled = bool(passes) and self.board.cancelled(job.request_id)
        text = job.text if job.text and not cancelled else b""
        if job.request_id and job.audio():
            text = self.held.submit(job.request_id, text, sentence=speak)
        if not speak:
            call = job.tool_call if not cancelled else b""
            reason = job.end_reason if not cancelled else b""
            if text:
                sink.text(text, final=not (call or reason))
            if call:
                sink.tool_call(call, final=not reason)
            if reason:
                sink.end(reason, final=True)
            elif not (text or call):
                sink.final()
            return
        if text:
            sink.text(text, final=False)
        self._queues[self._worker(job.request_id)].put((job, sink))

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

    def _worker(self, request_id: str) -> int:
        return zlib.crc32(request_id.encode()) % len(self._queues)

    def _loop(self, index: int) -> None:
        jobs = self._queues[index]
        sweep_at = time.monotonic() + SWEEP_S
        while True:
            now = time.monotonic()
            if now >= sweep_at:
                self._sweep(index)
                sweep_at = now + SWEEP_S
            try:
                item = jobs.get(timeout=max(0.0, sweep_at - time.monotonic()))
            except queue.Empty:
                continue
            if item is None:
                return
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

    def _sweep(self, index: int) -> None:
        """Stop the cancelled ids pinned to worker `index` that hold text and no job."""
        for request_id in self.held.waiting():
            if self._worker(request_id) == index and self.board.cancelled(request_id):
                self._stop(request_id)

    def _is_cancelled(self, request_id: str, sink: Sink) -> bool:
        if not (sink.cancelled() or self.board.cancelled(request_id)):
            return False
        self._stop(request_id)
        return True

    def _stop(self, request_id: str) -> None:
        self.held.drop(request_id)
        # Also serialises record_stop: the board's flock is per open file, so it does not keep
        # this process's worker threads apart.
        with self._lock:
            if request_id not in self._stopped:
                self.board.record_stop(request_id, STAGE)
            self._stopped[request_id] = None
            while len(self._stopped) > _REMEMBERED_STOPS:
                self._stopped.popitem(last=False)

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
        trailer = job.tool_call or job.end_reason
        if job.sentence.strip() or not trailer:
            self._say(job, sink)
        else:
            # A call (or end reason) alone: its PARAMETERS are still checked, in order, as a
            # sentence's are.
            decode_parameters(job.parameters)
        if not trailer or self._is_cancelled(job.request_id, sink):
            return
        # Everything this id sent before the call (or the end) has been spoken: text still
        # held belongs to no sentence (none comes after either), so it goes out now, before.
        rest = self.held.take_all(job.request_id)
        if rest:
            sink.text(rest, final=False)
        if job.tool_call:
            sink.tool_call(job.tool_call, final=False)
        if job.end_reason:
            sink.end(job.end_reason, final=False)

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
        release = WordRelease(self.held, job.request_id, words)
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
            speech = speak(piece.text, params.voice, self.voice)
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

    def end(self, reason: bytes, final: bool) -> None:
        self.send(b"", final=final, end_reason=reason)


class TtsService:
    """The `tts` model behind the Triton adapter: each request becomes a `SpeechJob`."""

    INPUTS = ("REQUEST_ID", "TEXT_DELTA", "SENTENCE", "PARAMETERS", "TOOL_CALL", "END_REASON")

    def __init__(
        self, board: CancelBoard, workers: int = 2, voice: str = voices.DEFAULT_VOICE
    ) -> None:
        self.board = board
        self.speaker = Speaker(board, workers=workers, voice=voice)

    def submit(self, tensors: dict[str, npt.NDArray[Any]], reply: Reply) -> None:
        # Decoding the id is left lenient here; the worker checks it and answers in order.
        job = SpeechJob(
            request_id=first_bytes(tensors.get("REQUEST_ID")).decode(errors="replace"),
            sentence=first_bytes(tensors.get("SENTENCE")),
            parameters=first_bytes(tensors.get("PARAMETERS")),
            text=first_bytes(tensors.get("TEXT_DELTA")),
            tool_call=first_bytes(tensors.get("TOOL_CALL")),
            end_reason=first_bytes(tensors.get("END_REASON")),
        )
        self.speaker.submit(job, ReplySink(reply, tool_calls=True, end_reasons=True))

    def close(self) -> None:
        self.speaker.close()
        self.board.close()


def make_service(context: ModelContext) -> TtsService:
    """The `tts` service from its config: WORKERS threads (default 2), the settings' voice
    for requests that name none of ours."""
    return TtsService(
        CancelBoard.open(context.settings.board_path),
        workers=context.integer("WORKERS", 2),
        voice=context.settings.tts_voice,
    )

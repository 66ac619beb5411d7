"""Test helpers for `asr` and `tts`: reference speech, word error rate, asr calls, tts streams.

A `TtsStream` owns one sync gRPC client and its one stream, the way pipeline_client.py does;
several requests may share the stream, and their responses are told apart by the Triton
request id each was sent with.
"""

from __future__ import annotations

import queue
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import jiwer
import numpy as np
import numpy.typing as npt
import soxr
import tritonclient.grpc as grpcclient

from bench import speech
from turntaker_models.cascade.llm import SentenceCutter
from turntaker_models.contract import GenerationParameters, encode

Audio = npt.NDArray[np.float32]
ASR_RATE = 16000
TTS_RATE = 24000


def flite_speech(tmp_path: Path, text: str, voice: str = "slt") -> Audio:
    """flite speech at the ASR rate (`bench.speech`; `tmp_path` is no longer needed)."""
    return speech.flite(text, voice, ASR_RATE)


def festival_speech(tmp_path: Path, text: str) -> Audio:
    """festival speech at the ASR rate (`bench.speech`; `tmp_path` is no longer needed)."""
    return speech.festival(text, ASR_RATE)


def llm_steps(reply: str) -> list[tuple[str, str]]:
    """`reply` as `cascade`'s llm streams it into tts: per word-sized delta, (delta, the
    sentences it completed, joined), the last one flushing the rest
    (turntaker_models.cascade.llm)."""
    cutter = SentenceCutter()
    deltas = re.findall(r"\s*\S+|\s+$", reply)
    assert "".join(deltas) == reply
    steps = []
    for i, delta in enumerate(deltas):
        sentences = cutter.feed(delta)
        if i == len(deltas) - 1 and (rest := cutter.flush()):
            sentences.append(rest)
        steps.append((delta, " ".join(sentences)))
    return steps


def loud_runs(audio: Audio, rate: int = TTS_RATE, min_gap_s: float = 0.08) -> list[tuple[int, int]]:
    """(start, end) samples of the runs of sound (10 ms frames above 2% of the loudest RMS)
    separated by at least `min_gap_s` of quiet: where speech ends, from the audio alone."""
    frame = rate // 100
    n = audio.shape[0] // frame
    if n == 0:
        return []
    rms = np.sqrt((audio[: n * frame].astype(np.float64).reshape(n, frame) ** 2).mean(axis=1))
    runs: list[tuple[int, int]] = []
    gap = round(min_gap_s * 100)
    for i in np.flatnonzero(rms > 0.02 * float(rms.max())):
        if runs and i - runs[-1][1] < gap:
            runs[-1] = (runs[-1][0], int(i) + 1)
        else:
            runs.append((int(i), int(i) + 1))
    return [(start * frame, end * frame) for start, end in runs]


def normalise(text: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9' ]+", " ", text.lower()).replace("'", "").split())


def word_error_rate(reference: str, hypothesis: str) -> float:
    return float(jiwer.wer(normalise(reference), normalise(hypothesis) or "<empty>"))


def to_asr_rate(audio: Audio) -> Audio:
    return np.asarray(soxr.resample(audio, TTS_RATE, ASR_RATE), np.float32)


def asr_inputs(segments: Sequence[Audio]) -> list[grpcclient.InferInput]:
    flat = [np.asarray(s, np.float32).reshape(-1) for s in segments]
    audio = np.concatenate(flat) if flat else np.zeros(0, np.float32)
    lengths = np.array([s.shape[0] for s in flat], np.int32)
    return raw_asr_inputs(audio, lengths)


def raw_asr_inputs(audio: Audio, lengths: npt.NDArray[np.int32]) -> list[grpcclient.InferInput]:
    audio_in = grpcclient.InferInput("AUDIO", [audio.shape[0]], "FP32")
    audio_in.set_data_from_numpy(np.asarray(audio, np.float32))
    lengths_in = grpcclient.InferInput("AUDIO_LENGTHS", [lengths.shape[0]], "INT32")
    lengths_in.set_data_from_numpy(np.asarray(lengths, np.int32))
    return [audio_in, lengths_in]


def transcribe(client: grpcclient.InferenceServerClient, segments: Sequence[Audio]) -> list[str]:
    result = client.infer("asr", asr_inputs(segments))
    return [t.decode() for t in result.as_numpy("TEXT").reshape(-1)]


def _bytes(name: str, value: bytes) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput(name, [1], "BYTES")
    tensor.set_data_from_numpy(np.array([value], dtype=np.object_))
    return tensor


def tts_inputs(
    request_id: str,
    sentence: str,
    parameters: GenerationParameters | bytes,
    text: str | None = None,
) -> list[grpcclient.InferInput]:
    """The tts inputs; `text` is the optional TEXT_DELTA to pass on (None: input left out)."""
    params = parameters if isinstance(parameters, bytes) else encode(parameters)
    inputs = [
        _bytes("REQUEST_ID", request_id.encode()),
        _bytes("SENTENCE", sentence.encode()),
        _bytes("PARAMETERS", params),
    ]
    if text is not None:
        inputs.append(_bytes("TEXT_DELTA", text.encode()))
    return inputs


@dataclass
class Spoken:
    """What one tts request streamed back."""

    sent_at: float
    chunks: list[Audio] = field(default_factory=list)
    chunk_times: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    final_at: float | None = None
    # Non-empty TEXT_DELTA responses (the pass-through) and when they came.
    texts: list[str] = field(default_factory=list)
    text_times: list[float] = field(default_factory=list)

    @property
    def audio(self) -> Audio:
        return np.concatenate(self.chunks) if self.chunks else np.zeros(0, np.float32)

    @property
    def first_chunk_s(self) -> float | None:
        return self.chunk_times[0] - self.sent_at if self.chunk_times else None


class TtsStream:
    """One gRPC stream to `tts`; a context manager."""

    def __init__(self, url: str) -> None:
        self._client = grpcclient.InferenceServerClient(url)
        self._items: queue.Queue[tuple[float, Any, Any]] = queue.Queue()
        self._client.start_stream(callback=self._callback)
        self._count = 0
        # Triton request ids in the order their responses arrived, over the last collect().
        self.order: list[str] = []
        # Every data response of the last collect(), in arrival order: (request id, text,
        # samples of audio), so tests can see which text rode with which chunk.
        self.timeline: list[tuple[str, str, int]] = []

    def _callback(self, result: Any = None, error: Any = None) -> None:
        self._items.put((time.monotonic(), result, error))

    def send(
        self,
        request_id: str,
        sentence: str,
        parameters: GenerationParameters | bytes | None = None,
        text: str | None = None,
    ) -> str:
        """Send one sentence (and a TEXT_DELTA to pass on, if `text` is not None); returns the
        Triton request id its responses carry."""
        self._count += 1
        tag = f"{request_id}#{self._count}"
        self._client.async_stream_infer(
            "tts",
            tts_inputs(
                request_id,
                sentence,
                GenerationParameters() if parameters is None else parameters,
                text,
            ),
            request_id=tag,
            enable_empty_final_response=True,
        )
        return tag

    def collect(
        self,
        tags: Sequence[str],
        sent_at: float,
        timeout_s: float = 30.0,
        on_chunk: Callable[[str, Spoken], None] | None = None,
    ) -> dict[str, Spoken]:
        """Responses of `tags` until each has its final flag; `on_chunk` after each chunk."""
        spoken = {tag: Spoken(sent_at) for tag in tags}
        order: list[str] = []
        timeline: list[tuple[str, str, int]] = []
        deadline = time.monotonic() + timeout_s
        while any(s.final_at is None for s in spoken.values()):
            try:
                at, result, error = self._items.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise TimeoutError(f"tts streams not final after {timeout_s} s") from None
            if error is not None:
                # An error carries no request id in the sync client: only one may be pending.
                pending = [s for s in spoken.values() if s.final_at is None]
                assert len(pending) == 1, "an error while several requests were pending"
                pending[0].errors.append(str(error))
                # The error response carries the final flag: it is the request's last one.
                pending[0].final_at = at
                continue
            response = result.get_response()
            current = spoken[response.id]
            order.append(response.id)
            names = {o.name for o in response.outputs}
            text = result.as_numpy("TEXT_DELTA") if "TEXT_DELTA" in names else None
            if text is not None and text.size and text.reshape(-1)[0]:
                current.texts.append(text.reshape(-1)[0].decode())
                current.text_times.append(at)
            chunk = result.as_numpy("AUDIO_CHUNK") if "AUDIO_CHUNK" in names else None
            said = text.reshape(-1)[0].decode() if text is not None and text.size else ""
            if said or (chunk is not None and chunk.size):
                timeline.append((response.id, said, 0 if chunk is None else int(chunk.size)))
            # Text responses carry a zero-size AUDIO_CHUNK: not a chunk.
            if chunk is not None and chunk.size:
                current.chunks.append(np.asarray(chunk, np.float32).reshape(-1))
                current.chunk_times.append(at)
                if on_chunk is not None:
                    on_chunk(response.id, current)
            final = response.parameters.get("triton_final_response")
            if final is not None and final.bool_param:
                current.final_at = at
        self.order = order
        self.timeline = timeline
        return spoken

    def speak(
        self,
        request_id: str,
        sentence: str,
        parameters: GenerationParameters | bytes | None = None,
        timeout_s: float = 30.0,
        on_chunk: Callable[[str, Spoken], None] | None = None,
    ) -> Spoken:
        sent_at = time.monotonic()
        tag = self.send(request_id, sentence, parameters)
        return self.collect([tag], sent_at, timeout_s, on_chunk)[tag]

    def speak_with_text(
        self,
        request_id: str,
        text: str,
        sentence: str,
        parameters: GenerationParameters | bytes | None = None,
        timeout_s: float = 30.0,
    ) -> Spoken:
        """One request with a TEXT_DELTA to pass on, as `cascade` sends them."""
        sent_at = time.monotonic()
        tag = self.send(request_id, sentence, parameters, text=text)
        return self.collect([tag], sent_at, timeout_s)[tag]

    def cancel_stream(self) -> None:
        self._client.stop_stream(cancel_requests=True)

    def close(self) -> None:
        self._client.stop_stream()
        self._client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

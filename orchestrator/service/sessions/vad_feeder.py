"""The VAD feeder: one task per session that asks the VAD about each append's chunks.

Rules:
- The core asks (`DetectSpeech`); the feeder answers with a core input, in order:
  `SpeechProbabilities`, or `VadDown` when the VAD is unavailable. It decides nothing.
- Credits bound the backlog and break the wait cycle: the reader takes a credit before it
  mails an append (`acquire`), and the credit is returned once that append's chunks are
  answered, or at once when the append asked nothing of the VAD (`release`). `submit` never
  blocks, so the session actor never waits on the VAD; when the VAD falls behind, the reader
  waits, and the session stops reading the client.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import trio

from orchestrator.service.backends.vad_batcher import VadUnavailable
from orchestrator.service.sessions.services import VadService
from orchestrator.session.actions import DetectSpeech
from orchestrator.session.inputs import SpeechProbabilities, VadDown

Post = Callable[[SpeechProbabilities | VadDown], Awaitable[None]]


@dataclass(frozen=True)
class _Job:
    request: DetectSpeech
    credit: bool


class VadFeeder:
    def __init__(self, vad: VadService, backlog: int, post: Post) -> None:
        self._vad = vad
        self._post = post
        self._limit = backlog
        self._credits = trio.Semaphore(backlog, max_value=backlog)
        # Never full: every job in it holds a credit (one spare for a job without one).
        self._send, self._recv = trio.open_memory_channel[_Job](backlog + 1)

    @property
    def backlog(self) -> int:
        """Appends waiting for the VAD's answer (at most `backlog`)."""
        return self._limit - self._credits.value

    async def acquire(self) -> None:
        await self._credits.acquire()

    def release(self) -> None:
        self._credits.release()

    def submit(self, request: DetectSpeech, *, credit: bool) -> None:
        self._send.send_nowait(_Job(request, credit))

    async def run(self) -> None:
        stream = self._vad.open_stream()
        async for job in self._recv:
            request = job.request
            answer: SpeechProbabilities | VadDown
            try:
                # An append's chunks are consecutive: one VAD row, one round trip for all.
                probabilities = await self._vad.probabilities(stream, list(request.chunks))
            except VadUnavailable as error:
                answer = VadDown(str(error))
            else:
                answer = SpeechProbabilities(tuple(probabilities), request.chunk_end_ms)
            try:
                await self._post(answer)
            finally:
                if job.credit:
                    self._credits.release()

"""The response actor: one Trio task per response that owns its Triton pipeline stream.

It places the response on a healthy endpoint, opens the stream, turns each streamed chunk into
a typed backend event tagged with the response's fence number, and posts it to the session's
mailbox, where the core (and the response's chart in it) decides what reaches the client.
Which text rides with which audio is rule 5's alignment (orchestrator/session/history/
alignment.py): this actor posts what it says. A chunk's function call piece
(`PipelineChunk.tool_call`) is posted as `BackendToolCall`, after the chunk's text and audio;
it counts as an output token like a text piece. A chunk's `end_reason` (the pipeline's own
limit cut the answer short; it may come on any chunk, ahead of the audio still coming) is the
stream's, and goes with its `BackendDone`: the response ends `incomplete`.
Cancelling it (barge-in, `response.cancel`, session end) writes the request id on that
endpoint's cancel board and cancels the gRPC stream, so every pipeline stage stops; output
that was already in flight is dropped by the fence in the core.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import trio

from orchestrator.service.backends.endpoints import Endpoint, EndpointPool, NoHealthyEndpoint
from orchestrator.service.backends.requests import DecodedAudio, pipeline_request
from orchestrator.session.actions import StartBackend
from orchestrator.session.history.alignment import TextAlignment
from orchestrator.session.inputs import (
    BackendAudio,
    BackendDone,
    BackendEvent,
    BackendFailed,
    BackendText,
    BackendToolCall,
)
from orchestrator.triton.pipeline_client import PipelineChunk, PipelineError
from orchestrator.triton.trio_bridge import TritonStream, open_pipeline_stream

Post = Callable[[BackendEvent], Awaitable[None]]


@dataclass(frozen=True)
class ResponseServices:
    pool: EndpointPool
    pipeline: str
    default_max_tokens: int
    # A hung endpoint: a stream whose first chunk takes longer than this (prefill included), or
    # whose next chunk takes longer than `chunk_timeout_s`, fails and its endpoint is marked
    # down until a health check passes again.
    first_chunk_timeout_s: float = 30.0
    chunk_timeout_s: float = 30.0
    # The pipeline sends each piece of text with the audio chunk where its audio ends (the
    # cascade's tts, `null`). Qwen3-Omni's Thinker text runs ahead of the Talker's audio: its
    # text goes to the core unaligned, and a cut reply keeps none of it (docs/protocol.md rule 5).
    text_aligned: bool = True


def pcm16(samples: npt.NDArray[np.float32]) -> bytes:
    clipped = np.clip(np.asarray(samples, np.float32), -1.0, 1.0)
    return (clipped * 32767.0).astype("<i2").tobytes()


class ResponseActor:
    def __init__(
        self,
        action: StartBackend,
        request_id: str,
        services: ResponseServices,
        *,
        post: Post,
        audio_with_transcript: bool = True,
        decoded: DecodedAudio | None = None,
    ) -> None:
        self.action = action
        self.request_id = request_id
        self.services = services
        self._post = post
        # False for the cascade, which hears through the core's transcripts (in the action).
        self._audio_with_transcript = audio_with_transcript
        # The session's history audio already at 16 kHz (requests.py).
        self._decoded = decoded
        self._cancelled = False
        self._current: trio.CancelScope | None = None

    def cancel(self) -> None:
        self._cancelled = True
        if self._current is not None:
            self._current.cancel()

    @contextmanager
    def _cancellable(self) -> Iterator[trio.CancelScope]:
        """A scope that `cancel()` cancels, also when it was called before the scope began."""
        scope = trio.CancelScope()
        if self._cancelled:
            scope.cancel()
        self._current = scope
        try:
            with scope:
                yield scope
        finally:
            self._current = None

    async def run(self) -> None:
        action = self.action
        rid, seq = action.response_id, action.seq
        try:
            endpoint = self.services.pool.choose()
        except NoHealthyEndpoint as error:
            await self._post(BackendFailed(rid, seq, str(error)))
            return
        if self._cancelled:
            return  # the core already closed this response (fence and terminal)
        request = pipeline_request(
            self.request_id,
            action.request,
            default_max_tokens=self.services.default_max_tokens,
            transcripts=action.transcripts,
            audio_with_transcript=self._audio_with_transcript,
            decoded=self._decoded,
        )
        align = TextAlignment(audio=request.parameters.audio, aligned=self.services.text_aligned)
        tokens = 0
        end_reason = None
        with self.services.pool.lease(endpoint):
            try:
                async with open_pipeline_stream(
                    endpoint.url, self.services.pipeline, request
                ) as stream:
                    with self._cancellable() as streaming:
                        first = True
                        while True:
                            chunk = await self._next_chunk(stream, endpoint, first)
                            if chunk is None:
                                return  # failed; leaving writes the board and stops the stream
                            first = False
                            # Which text goes with which audio: rule 5's alignment.
                            if chunk.text:
                                tokens += 1
                                if (alone := align.text(chunk.text)) is not None:
                                    await self._post(BackendText(rid, seq, alone))
                            if chunk.audio.size:
                                heard = align.audio()
                                await self._post(BackendAudio(rid, seq, pcm16(chunk.audio), heard))
                            if (call := chunk.tool_call) is not None:
                                tokens += 1
                                if held := align.flush():
                                    await self._post(BackendText(rid, seq, held))
                                piece = BackendToolCall(rid, seq, call.name, call.arguments)
                                await self._post(piece)
                            end_reason = chunk.end_reason or end_reason
                            if chunk.final:
                                if held := align.flush():
                                    await self._post(BackendText(rid, seq, held))
                                done = BackendDone(rid, seq, tokens, end_reason)
                                await self._post(done)
                                return
                    if streaming.cancelled_caught:
                        # Board write + stream cancel: every stage, inside the ensemble too.
                        with trio.CancelScope(shield=True):
                            await stream.cancel()
            except PipelineError as error:
                if _unreachable(error):
                    self.services.pool.mark_failed(endpoint)
                await self._post(BackendFailed(rid, seq, f"pipeline error: {error}"))

    async def _next_chunk(
        self, stream: TritonStream, endpoint: Endpoint, first: bool
    ) -> PipelineChunk | None:
        """The stream's next chunk, or None once the response was failed for want of one.

        The failure is posted here, before the stream is closed: closing writes the cancel
        board, which a hung server answers only at the board's own timeout.
        """
        services = self.services
        timeout = services.first_chunk_timeout_s if first else services.chunk_timeout_s
        rid, seq = self.action.response_id, self.action.seq
        ended = False
        with trio.move_on_after(timeout):
            try:
                return await stream.receive()
            except trio.EndOfChannel:
                ended = True
        if ended:
            await self._post(BackendFailed(rid, seq, f"the {services.pipeline} stream ended early"))
            return None
        # Placing new streams there would hang them too; the health checks bring it back.
        services.pool.mark_failed(endpoint)
        silence = "sent no output within" if first else "went silent mid-response for"
        await self._post(
            BackendFailed(
                rid,
                seq,
                f"the model at {endpoint.url} {silence} {timeout:g} s; the stream was failed "
                "and the endpoint marked down",
            )
        )
        return None


def _unreachable(error: PipelineError) -> bool:
    """A transport failure (the endpoint is down), not a model's error about this request."""
    text = str(error).lower()
    return any(
        s in text
        for s in (
            "unavailable",
            "failed to connect",
            "connection refused",
            "socket closed",
            "deadline exceeded",
        )
    )

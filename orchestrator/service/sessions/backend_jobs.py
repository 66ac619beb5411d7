"""A session's backend work: responses, transcriptions and turn predictions, as tasks in the
session's nursery, each posting its answer to the session's mailbox.

Plumbing only. The core asks (`StartBackend`, `CancelBackend`, `Transcribe`, `PredictTurn`);
these tasks ask the backends and post what comes back, a fault as a typed answer (the core
decides what it means). Which decode a transcription gets is orchestrator/session/decoding.py's.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio

from orchestrator.service.backends.requests import DecodedAudio
from orchestrator.service.backends.response_actor import ResponseActor
from orchestrator.service.config import ServiceConfig
from orchestrator.service.sessions.services import SessionServices
from orchestrator.session.actions import PredictTurn, StartBackend, Transcribe
from orchestrator.session.core import CoreInput
from orchestrator.session.decoding import fast_decode
from orchestrator.session.inputs import TranscriptReady, TurnPrediction

Post = Callable[[CoreInput], Awaitable[None]]

__all__ = ["BackendJobs", "pipeline_request_id"]


class BackendJobs:
    def __init__(self, config: ServiceConfig, services: SessionServices, post: Post) -> None:
        self._config = config
        self._services = services
        self._post = post
        self._responses: dict[str, ResponseActor] = {}
        # Each turn's audio decoded to 16 kHz once, not for every response (requests.py).
        self._decoded = DecodedAudio()

    def start_response(self, nursery: trio.Nursery, action: StartBackend) -> None:
        # The board key must be unique across every orchestrator sharing a Triton.
        request_id = pipeline_request_id(self._config, action.response_id)
        actor = ResponseActor(
            action,
            request_id,
            self._services.responses,
            post=self._post,
            audio_with_transcript=not self._services.transcripts_for_pipeline,
            decoded=self._decoded,
        )
        self._responses[action.response_id] = actor

        async def run() -> None:
            try:
                await actor.run()
            finally:
                self._responses.pop(action.response_id, None)

        nursery.start_soon(run)

    def cancel_response(self, response_id: str) -> None:
        actor = self._responses.get(response_id)
        if actor is not None:
            actor.cancel()

    def cancel_all(self) -> None:
        """Every response actor (their streams are cancelled on the way out)."""
        for actor in list(self._responses.values()):
            actor.cancel()

    async def transcribe(self, job: Transcribe) -> None:
        transcriber = self._services.transcriber
        assert transcriber is not None  # the core asks only when told there is one
        seconds = job.audio16k.shape[0] / 16000
        asked = trio.current_time()
        try:
            text = await transcriber.transcribe(job.audio16k, partial=fast_decode(job.purpose))
        except Exception as error:  # the model's message reaches the client as-is
            answer = TranscriptReady(job.item_id, None, str(error), seconds, job.purpose, job.token)
        else:
            answer = TranscriptReady(job.item_id, text, None, seconds, job.purpose, job.token)
        if job.purpose == "overlap":
            latency = self._services.metrics.partial_transcript_latency
            latency.observe(trio.current_time() - asked)
        await self._post(answer)

    async def predict_turn(self, job: PredictTurn) -> None:
        turn = self._services.turn
        assert turn is not None  # the core offers semantic_vad only when told there is one
        try:
            probability = await turn.predict(job.audio16k)
        except Exception as error:  # an outage: the core falls back to the silence rule
            answer = TurnPrediction(job.token, None, str(error) or type(error).__name__)
        else:
            answer = TurnPrediction(job.token, probability)
        await self._post(answer)


def pipeline_request_id(config: ServiceConfig, response_id: str) -> str:
    return f"{config.instance_id}:{response_id}"

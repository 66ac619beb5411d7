"""One session's contribution to the service metrics, read off what the session sends.

Observation only: nothing here decides. Barge-in latency runs from the VAD's answer to the
step that cleared the client's audio; time to first audio from `response.created` to the
first audio delta (a cascade response's wait for its turn's transcript included). Pause
mode's decisions are counted from `overlap.decision` (those whose `transcript` is null also as
made without a transcript). The end of each VAD turn (by cause), what became of each
preemptive response and which echo rule held each chunk heard over the echo come from the
step's notes. State is one timestamp per response in flight, dropped at its `response.done`.
"""

from __future__ import annotations

import trio

from orchestrator.protocol import server as se
from orchestrator.service.metrics import Metrics
from orchestrator.session.core import Step
from orchestrator.session.core_types import PreemptNoted, TurnEnded
from orchestrator.session.echo.verdict import EchoVerdict


class SessionMetrics:
    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics
        self._first_audio_pending: dict[str, float] = {}

    def vad_step(self, step: Step, decided_at: float) -> None:
        if any(isinstance(e, se.OutputAudioBufferCleared) for e in step.events):
            self._metrics.observe("barge_in_latency", trio.current_time() - decided_at)
            self._metrics.interruptions.inc()

    def noted(self, step: Step) -> None:
        for note in step.notes:
            if isinstance(note, TurnEnded):
                self._metrics.end_of_turn.labels(note.cause).inc()
            elif isinstance(note, PreemptNoted):
                self._metrics.preemptive_responses.labels(note.outcome).inc()
            elif isinstance(note, EchoVerdict):
                self._metrics.echo_verdict(note)

    def sent(self, event: se.ServerEvent) -> None:
        if isinstance(event, se.ResponseCreated):
            self._first_audio_pending[event.response.id] = trio.current_time()
        elif isinstance(event, se.ResponseOutputAudioDelta):
            began = self._first_audio_pending.pop(event.response_id, None)
            if began is not None:
                self._metrics.observe("time_to_first_audio", trio.current_time() - began)
        elif isinstance(event, se.OverlapDecision):
            self._metrics.overlap_decisions.labels(event.decision, event.reason).inc()
            if event.transcript is None:
                labels = self._metrics.overlap_decisions_untranscribed.labels
                labels(event.decision, event.reason).inc()
        elif isinstance(event, se.ResponseDone):
            self._metrics.responses.labels(event.response.status).inc()
            self._first_audio_pending.pop(event.response.id, None)

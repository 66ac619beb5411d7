"""SessionChart: one realtime session, its input side and its output side in parallel.

The input region follows the user (listening -> user_speaking -> committed); the output
region follows the session's latest response (idle -> generating -> draining, or
interrupted). One event may move both regions at once, which is exactly barge-in: the same
`speech_started` that starts the user's turn interrupts the assistant.

Rules it guarantees (docs/protocol.md):

- Rule 1, barge-in: with server VAD and `interrupt_response`, `speech_started` while the
  latest response is generating, or draining (generated, audio not yet acknowledged as
  played), enters `interrupted`, which emits `InterruptResponses("turn_detected")`: every
  live response is stopped. The speech itself starts the next user turn in the input
  region (`AnnounceSpeechStarted`), so the interrupting speech is kept.
- Turn detection is a guard: VAD events move the input region only in server VAD mode;
  in manual mode only a client `commit` commits, and auto response needs server VAD with
  `create_response` (or a commit that asks for it).
- Rule 4, clear addressing: `clear` (`output_audio_buffer.clear`) and `cancel`
  (`response.cancel`) interrupt only when they target the latest live response; one naming an
  older response emits `InterruptResponse` for that one, and the output region does not move.
  A clear of the latest response with nothing live is still answered (`AnswerClear`): the
  client's buffer is empty now.
- Rule 3: a `cancel` with nothing live (no live latest response, and the named one, if any,
  not live either) is rejected (`Reject("response_not_active")`), like the empty commit.
- `close` (the session ends: expiry, drain) interrupts the latest response only while it is
  generating, so it gets its terminal; a reply already generated is left as it stands.
- The output region hears of a response's end only through the response chart's own
  `ResponseFinished` / `ResponseSettled` effects, routed here by the core as
  `response_finished` / `response_settled`: nothing keeps the two charts in step by hand.
- The vllm-omni commit bridge: a commit with `final=False` is acknowledged and ignored.
- A commit with no audio is rejected (`Reject`), never a silent empty turn (rule 7).
"""

from __future__ import annotations

from typing import Literal

from statemachine import State

from statecharts.base import Chart
from statecharts.effects import (
    AnnounceSpeechStarted,
    AnnounceSpeechStopped,
    AnswerClear,
    CommitInput,
    CreateResponse,
    InterruptResponse,
    InterruptResponses,
    Reject,
)

TurnDetection = Literal["server_vad", "manual"]


class SessionChart(Chart):
    """Session-level turn taking. Holds only small scalars: no history, no audio."""

    class session(State.Parallel):
        class input(State.Compound):
            listening = State(initial=True)
            user_speaking = State()
            committed = State()

            speech_started = listening.to(user_speaking, cond="server_vad", on="_on_speech_started")
            speech_stopped = user_speaking.to(committed, cond="server_vad", on="_on_speech_stopped")
            commit = (
                listening.to(committed, cond=["commit_is_final", "has_audio"])
                | user_speaking.to(committed, cond=["commit_is_final", "has_audio"])
                | listening.to.itself(internal=True, cond="commit_is_final", on="_reject_empty")
                | user_speaking.to.itself(internal=True, cond="commit_is_final", on="_reject_empty")
            )
            clear_input = user_speaking.to(listening)
            committed.to(listening)

        class output(State.Compound):
            idle = State(initial=True)
            generating = State()
            draining = State()
            interrupted = State()

            response_started = (
                idle.to(generating, on="_on_response_started")
                | draining.to(generating, on="_on_response_started")
                | interrupted.to(generating, on="_on_response_started")
            )
            response_finished = generating.to(
                draining, cond=["is_latest", "audio_pending"]
            ) | generating.to(idle, cond="is_latest")
            response_settled = draining.to(idle, cond="is_latest")
            speech_started = generating.to(
                interrupted, cond=["server_vad", "interrupt_response"], on="_on_barge_in"
            ) | draining.to(
                interrupted, cond=["server_vad", "interrupt_response"], on="_on_barge_in"
            )
            clear = (
                generating.to(interrupted, cond="targets_latest", on="_on_clear_latest")
                | draining.to(interrupted, cond="targets_latest", on="_on_clear_latest")
                | generating.to.itself(internal=True, on="_on_clear_older")
                | draining.to.itself(internal=True, on="_on_clear_older")
                | idle.to.itself(internal=True, cond="targets_latest", on="_answer_clear")
                | interrupted.to.itself(internal=True, cond="targets_latest", on="_answer_clear")
                | idle.to.itself(internal=True, on="_on_clear_older")
                | interrupted.to.itself(internal=True, on="_on_clear_older")
            )
            cancel = (
                generating.to(interrupted, cond="targets_latest", on="_on_clear_latest")
                | draining.to(interrupted, cond="targets_latest", on="_on_clear_latest")
                | generating.to.itself(internal=True, on="_on_clear_older")
                | draining.to.itself(internal=True, on="_on_clear_older")
                | idle.to.itself(internal=True, cond="names_live_response", on="_on_clear_older")
                | interrupted.to.itself(
                    internal=True, cond="names_live_response", on="_on_clear_older"
                )
                | idle.to.itself(internal=True, on="_reject_cancel")
                | interrupted.to.itself(internal=True, on="_reject_cancel")
            )
            close = generating.to(interrupted, on="_on_clear_latest")
            interrupted.to(idle)

    def __init__(
        self,
        *,
        turn_detection: TurnDetection = "server_vad",
        create_response: bool = True,
        interrupt_response: bool = True,
    ) -> None:
        self.turn_detection: TurnDetection = turn_detection
        self.create_response = create_response
        self.interrupt_response_enabled = interrupt_response
        self.latest_response_id: str | None = None
        super().__init__()

    def configure(
        self, *, turn_detection: TurnDetection, create_response: bool, interrupt_response: bool
    ) -> None:
        """Apply a `session.update`: guards read these on the next event."""
        self.turn_detection = turn_detection
        self.create_response = create_response
        self.interrupt_response_enabled = interrupt_response

    # Guards ---------------------------------------------------------------------------
    def server_vad(self) -> bool:
        return self.turn_detection == "server_vad"

    def interrupt_response(self) -> bool:
        return self.interrupt_response_enabled

    def commit_is_final(self, final: bool | None = None) -> bool:
        return final is not False

    def has_audio(self, buffered_ms: int = 0) -> bool:
        return buffered_ms > 0

    def is_latest(self, response_id: str) -> bool:
        return response_id == self.latest_response_id

    def audio_pending(self, audio_pending: bool = False) -> bool:
        return audio_pending

    def targets_latest(self, response_id: str | None = None) -> bool:
        return response_id is None or response_id == self.latest_response_id

    def names_live_response(
        self, response_id: str | None = None, target_live: bool = False
    ) -> bool:
        """A cancel naming a response that is still live (the caller knows which are)."""
        return response_id is not None and target_live

    # Actions --------------------------------------------------------------------------
    def _on_speech_started(self, audio_start_ms: int) -> None:
        self.emit(AnnounceSpeechStarted(audio_start_ms))

    def _on_speech_stopped(self, audio_end_ms: int) -> None:
        self.emit(AnnounceSpeechStopped(audio_end_ms))

    def on_enter_committed(
        self, audio_end_ms: int | None = None, create_response: bool | None = None
    ) -> None:
        self.emit(CommitInput(audio_end_ms))
        # A VAD commit answers per session config; a client commit only when it asks.
        wanted = (
            create_response
            if create_response is not None
            else (self.server_vad() and self.create_response and audio_end_ms is not None)
        )
        if wanted:
            self.emit(CreateResponse())

    def _reject_cancel(self) -> None:
        self.emit(Reject("response_not_active", "There is no active response to cancel."))

    def _answer_clear(self, response_id: str | None = None) -> None:
        self.emit(AnswerClear(response_id))

    def _reject_empty(self) -> None:
        self.emit(
            Reject(
                "input_audio_buffer_commit_empty",
                "Error committing input audio buffer: the buffer is empty.",
            )
        )

    def _on_response_started(self, response_id: str) -> None:
        self.latest_response_id = response_id

    def _on_barge_in(self) -> None:
        self.emit(InterruptResponses("turn_detected"))

    def _on_clear_latest(self) -> None:
        self.emit(InterruptResponses("client_cancelled"))

    def _on_clear_older(self, response_id: str | None = None) -> None:
        if response_id is not None and response_id != self.latest_response_id:
            self.emit(InterruptResponse(response_id, "client_cancelled"))

    # Queries --------------------------------------------------------------------------
    @property
    def is_output_live(self) -> bool:
        return "generating" in self.active or "draining" in self.active

    @property
    def is_generating(self) -> bool:
        return "generating" in self.active

    @property
    def user_speaking(self) -> bool:
        return "user_speaking" in self.active

"""ResponseChart: the life of one response, from `response.created` to its last heard ms.

Rules it guarantees (docs/protocol.md):

- Rule 3, exactly one terminal: `SendResponseDone` is emitted only on a transition that leaves
  `created` or `generating`; both are left at most once, so every response gets exactly one
  `response.done` (completed, incomplete, cancelled or failed). `draining` already sent its
  terminal.
- Rule 3's `incomplete`: `complete` with a `reason` (the pipeline's own limit cut the reply
  short: `max_output_tokens`) ends the response `incomplete` with that reason instead of
  `completed`; it is a completion in every other way: the same transitions, its audio drains
  and is heard (rule 5) as a completed reply's is, since what was generated is what is played.
- Rule 2, fencing: `ForwardOutput` is emitted only by the `output` event while `generating`.
  In every other state `output` has no transition and is dropped, so no delta of a response
  reaches the client after it was interrupted, cancelled, failed or completed. `forward()` is
  the same event without the engine's dispatch (one call per audio chunk is the server's
  hottest path; bench/load.py): it changes no state and decides exactly as `output` does.
- Rule 1, barge-in: `barge_in` while generating cancels the backend stream (`CancelBackend`)
  before anything else, clears the client's audio (`SendCleared`) and ends the response as
  `cancelled` with reason `turn_detected`. While draining (generated, not yet heard in full)
  it clears the audio and cuts the reply at what was heard.
- Rule 4: `cancel` (a client's `response.cancel` or `output_audio_buffer.clear`) interrupts
  only this response; which response a clear names is the SessionChart's decision.
- Rule 5: history is written only by `CommitHistory`: `full` only after the whole reply was
  played (`played`), or at completion when there is no audio to play; `cut` on every
  interruption. A final state has no outgoing transition, so a later ACK can never undo a cut.
- Rule 5 for function calls: a call has no audio, so it is heard once complete, and complete
  only when its stream ended on its own: `CommitCall` is emitted by `complete` without a
  reason alone (before the terminal). Every other way out of `generating` (barge-in, cancel,
  truncate, failure, and `complete` with a reason: the budget cut the call's arguments) ends
  the response without it, so a call cut before its arguments were complete never reaches the
  history.
- Rule 8: `fail` ends a generating response as `failed` with the backend's reason.
- An adopted preemptive response (`adopt`) starts generating without `OpenStream`: its
  stream was started before its turn was committed (orchestrator/session/turns/preemption.py); from
  then on
  every rule above applies to it as to any response.
- The session chart is told by effects, never kept in step by hand: every transition that
  leaves `generating` emits `ResponseFinished` (with whether audio is still to be heard), and
  every `CommitHistory` is followed by `ResponseSettled`. The core hands both, at one routing
  point, to the session chart, whose output region follows the latest response.
"""

from __future__ import annotations

from statemachine import State

from statecharts.base import Chart
from statecharts.effects import (
    CancelBackend,
    CommitCall,
    CommitHistory,
    Effect,
    ForwardOutput,
    HistoryMode,
    OpenStream,
    ResponseFinished,
    ResponseSettled,
    SendCleared,
    SendResponseDone,
)
from statecharts.response_events import ResponseEvent
from statecharts.vocabulary import IncompleteReason


class ResponseChart(Chart):
    """One response. `response_id` names it in every effect; `seq` is its fence number (only
    carried into `OpenStream` and `CancelBackend`)."""

    created = State(initial=True)
    generating = State()
    draining = State()
    done = State(final=True)
    interrupted = State(final=True)
    cancelled = State(final=True)
    failed = State(final=True)

    start = created.to(generating, on="_on_start")
    # A preemptive response adopted at its turn's commit: its stream runs already.
    adopt = created.to(generating)
    output = generating.to.itself(internal=True, on="_on_output")
    complete = generating.to(draining, cond="audio_pending", on="_on_complete") | generating.to(
        done, on="_on_complete_unheard_nothing"
    )
    played = draining.to(done, on="_on_played")
    barge_in = generating.to(interrupted, on="_on_stop_generating") | draining.to(
        interrupted, on="_on_stop_draining"
    )
    cancel = (
        created.to(cancelled, on="_on_cancel_before_start")
        | generating.to(cancelled, on="_on_stop_generating")
        | draining.to(cancelled, on="_on_stop_draining")
    )
    truncate = generating.to(cancelled, on="_on_truncate_generating") | draining.to(
        done, on="_on_truncate_draining"
    )
    fail = created.to(failed, on="_on_fail") | generating.to(failed, on="_on_fail")

    def __init__(self, response_id: str, seq: int) -> None:
        self.response_id = response_id
        self.seq = seq
        self.status: str | None = None
        super().__init__()

    # Guards ---------------------------------------------------------------------------
    def audio_pending(self, audio_pending: bool = False) -> bool:
        return audio_pending

    # Actions --------------------------------------------------------------------------
    def _done(self, status: str, reason: str | None) -> None:
        self.status = status
        self.emit(SendResponseDone(self.response_id, status, reason))  # type: ignore[arg-type]

    def _finished(self, audio_pending: bool) -> None:
        self.emit(ResponseFinished(self.response_id, audio_pending))

    def _commit(self, mode: HistoryMode, audio_end_ms: int | None = None) -> None:
        self.emit(CommitHistory(self.response_id, mode, audio_end_ms))
        self.emit(ResponseSettled(self.response_id))

    def _cancel_backend(self) -> None:
        self.emit(CancelBackend(self.response_id, self.seq))

    def _on_start(self) -> None:
        self.emit(OpenStream(self.response_id, self.seq))

    def _on_output(self, chunk: object) -> None:
        self.emit(ForwardOutput(self.response_id, chunk))

    def forward(self, chunk: object) -> list[Effect]:
        """`handle("output", chunk=chunk)` at a fraction of the cost: `output` is an internal
        self-transition of `generating` with no guard, so the decision is whether `generating`
        is active; the engine's dispatch (about 0.1 ms an event) adds nothing to it."""
        if self.generating.value in self.configuration_values:
            return [ForwardOutput(self.response_id, chunk)]
        return []

    def _ended(self, reason: IncompleteReason | None) -> None:
        """Rule 3's terminal of a stream that ended on its own; rule 5's call commit, only
        when nothing cut it short."""
        if reason is None:
            self.emit(CommitCall(self.response_id))
            self._done("completed", None)
        else:
            self._done("incomplete", reason)

    def _on_complete(self, reason: IncompleteReason | None = None) -> None:
        self._ended(reason)
        self._finished(audio_pending=True)

    def _on_complete_unheard_nothing(self, reason: IncompleteReason | None = None) -> None:
        # Nothing to play (text only, a call, or empty): heard as soon as it is complete.
        self._ended(reason)
        self._finished(audio_pending=False)
        self._commit("full")

    def _on_played(self) -> None:
        self._commit("full")

    def _on_stop_generating(self, event: str, reason: str | None = None) -> None:
        # Cancel first: every later effect is cheap, the backend is the one still burning.
        self._cancel_backend()
        self.emit(SendCleared(self.response_id))
        default = "turn_detected" if event == "barge_in" else "client_cancelled"
        self._done("cancelled", reason or default)
        self._finished(audio_pending=False)
        self._commit("cut")

    def _on_stop_draining(self) -> None:
        self.emit(SendCleared(self.response_id))
        self._commit("cut")

    def _on_cancel_before_start(self, reason: str | None = None) -> None:
        self._done("cancelled", reason or "client_cancelled")
        self._finished(audio_pending=False)

    def _on_truncate_generating(self, audio_end_ms: int) -> None:
        self._cancel_backend()
        self._done("cancelled", "truncated")
        self._finished(audio_pending=False)
        self._commit("cut", audio_end_ms)

    def _on_truncate_draining(self, audio_end_ms: int) -> None:
        self._commit("cut", audio_end_ms)

    def _on_fail(self, reason: str = "backend_error") -> None:
        self._cancel_backend()
        self._done("failed", reason)
        self._finished(audio_pending=False)
        self._commit("cut")

    def feed(self, event: ResponseEvent) -> list[Effect]:
        """Feed one of this chart's typed events (statecharts/response_events.py)."""
        return self._feed(event)

    # Queries --------------------------------------------------------------------------
    @property
    def is_generating(self) -> bool:
        return bool(self.generating.is_active)

    @property
    def is_live(self) -> bool:
        """Generating, or generated with audio the client has not yet played in full."""
        return bool(self.generating.is_active or self.draining.is_active)

    @property
    def is_terminal(self) -> bool:
        return bool(self.is_terminated)

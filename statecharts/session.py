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
- Turn detection is a guard: VAD events move the input region only with VAD turns
  (server_vad or semantic_vad: `vad_turns`);
  in manual mode only a client `commit` commits, and auto response needs VAD turns with
  `create_response` (or a commit that asks for it).
- Rule 4, clear addressing: `clear` (`output_audio_buffer.clear`) and `cancel`
  (`response.cancel`) interrupt only when they target the latest live response; one naming an
  older response emits `InterruptResponse` for that one, and the output region does not move.
  A clear of the latest response with nothing live is still answered (`AnswerClear`): the
  client's buffer is empty now.
- Rule 3: one active response at a time: `response_requested` (the client's `response.create`,
  a VAD turn's response, an adopted preemptive one) while the latest response is generating
  (paused or not) is refused (`Reject("conversation_already_has_active_response")`).
- Rule 3: a `cancel` with nothing live (no live latest response, and the named one, if any,
  not live either) is rejected (`Reject("response_cancel_not_active")`), like the empty commit.
- `close` (the session ends: expiry, drain) interrupts the latest response only while it is
  generating, so it gets its terminal; a reply already generated is left as it stands.
- Drain, the lifetime region (serving -> winding_down -> ended): the server drains
  (`server_draining`, a deploy). A latest response still generating (paused or not) may
  finish: `WindDown` (the core arms the drain's bound), then its `response_finished`
  (completed, cancelled by the user's barge-in or the client: any end is a turn boundary)
  or the bound (`drain_over`) ends the session (`EndSession`: the core closes it as `close`
  does, so a reply still generating at the bound gets its terminal). With nothing
  generating it ends at once. A reply already generated is not waited for: its audio is
  the client's to play.
- The output region hears of a response's end only through the response chart's own
  `ResponseFinished` / `ResponseSettled` effects, routed here by the core as
  `response_finished` / `response_settled`: nothing keeps the two charts in step by hand.
- The vllm-omni commit bridge: a commit with `final=False` is acknowledged and ignored.
- A commit with no audio is rejected (`Reject`), never a silent empty turn (rule 7).
- `clear` and `cancel` are built from the same rows (`_client_stop`); guards on where the
  chart is are SCXML's `In()`, settings are attribute guards.
- Each region is in exactly one state at a time. Self-transitions of atomic states are
  external: python-statemachine 3.2's internal self-transition of an atomic state in one
  region re-enters the other region's initial state (a corrupt configuration).

History basis (docs/protocol.md "History without acknowledgements"), the heard_by region
(generated -> acknowledged):

- A session starts as OpenAI's does: a reply is heard once generated, cut by the client's
  truncate or, at a barge-in, clear or cancel, at the server's playout estimate.
- The first valid `playback.ack` (`playback_acked`) moves it to `acknowledged` for good,
  emitting `HearByAcknowledgement` once: rule 5 as written decides from then on. No event
  leads back.

Preemptive responses (`preemptive_response`, docs/protocol.md "Semantic end of turn and
preemptive responses"), the preemption region (standby -> running):

- `turn_paused` (a candidate pause of the user's turn) starts one (`StartPreemptive`) only
  with VAD turns, `create_response`, the output idle (no other response live: rule 3) and the
  user speaking; at most one runs.
- Nothing of it is on the wire until it is adopted. It is dropped (`DropPreemptive`, and
  nothing of it is ever sent) when the user speaks on (`speech_resumed`), when what it was
  given changes (`context_changed`: an item, a setting, the client's own response), when its
  stream fails or its held output overflows (`preempt_failed`), on `clear_input` and on
  `close`.
- The turn's end (`speech_stopped`, or the client's `commit`) while one runs: if the commit
  wants a response (as the input region's commit decides it) the one emitted after
  `CommitInput` is `AdoptPreemptive` instead of `CreateResponse`, so `committed` precedes
  `response.created` exactly as without it; else it is dropped (`not_answered`).

Pause mode (`interruption.mode == "pause"`, docs/protocol.md "Interruption policy"):

- Speech onset while the latest response is generating or draining enters `paused` (its
  sub-state remembers which: `paused_generating`, `paused_draining`, or `paused_settled` once
  the reply was heard in full), emitting `PauseOutput` after `AnnounceSpeechStarted`. Nothing
  is cancelled: the backend goes on and its deltas still flow (the client queues them), so no
  audio is lost on resume. A reply that finishes generating while paused moves to
  `paused_draining` and drains normally after a resume.
- Exactly one `OverlapDecided` per pause: `paused`'s exit emits it (its decision and reason
  by the event that leaves, `_DECISIONS`), so every way out emits one and nothing else does.
- Interrupt (`reason="speech"`): `overlap_heard` with `sounds_like_interruption` (its partial
  holds an interrupt word, `urgent`, however short the speech; or the speech lasted
  `min_speech_ms` and its partial holds other words than backchannels, or none came back
  within the grace: `waited`), or `speech_stopped` with `ends_turn` (long enough, not
  cleared by a partial). Then `InterruptResponses("turn_detected")`: the backend is cancelled
  only here (and by the client's own events below), exactly as rule 1.
- The overlap's speech is not committed while undecided: its `speech_stopped` moves the input
  region to `held`. An interrupt while `held` commits it (`held -> committed`: the speech is
  the next user turn, its response per session config); a resume drops it (`DropInput`).
- Resume: `resume_timer` (the core arms it when the speech stopped; new speech cancels it,
  and `speech_started` takes `held` back to `user_speaking`: the same overlap goes on), guard
  `In('held')`, back to the sub-state's origin (`generating`, `draining` or `idle`) with
  `OverlapDecided("resume", short | backchannel | noise)` and `ResumeOutput`.
- The client ends a pause as in v1: `clear`, `cancel` (of the latest), `truncate` and a
  `commit` leave `paused` for `interrupted` with `OverlapDecided("interrupt", "client")`
  before v1's effects (from `paused_settled`, with nothing live, v1's answer to a clear or
  cancel of nothing: `AnswerClear`, or rule 3's `Reject`); `clear_input` resumes
  (`"client"`: the overlap's audio is gone); `close` interrupts (`"closed"`) and every live
  reply gets its terminal; a `response_started` (the client's `response.create` once the
  paused reply finished) resumes it.
"""

from __future__ import annotations

from typing import Any, Literal

from statemachine import State
from statemachine.transition_list import TransitionList

from statecharts.base import Chart
from statecharts.effects import (
    AdoptPreemptive,
    AnnounceSpeechStarted,
    AnnounceSpeechStopped,
    AnswerClear,
    CommitInput,
    CreateResponse,
    DropInput,
    DropPreemptive,
    Effect,
    EndSession,
    HearByAcknowledgement,
    InterruptResponse,
    InterruptResponses,
    OverlapDecided,
    OverlapSpeechStarted,
    OverlapSpeechStopped,
    PauseOutput,
    PreemptDropReason,
    Reject,
    ResumeOutput,
    StartPreemptive,
    WindDown,
)
from statecharts.session_events import SessionEvent
from statecharts.vocabulary import (
    Heard,
    InterruptionMode,
    OverlapDecisionKind,
    OverlapReason,
    TurnMode,
)

# The helpers below take the states a class body declares (typed Any: the library builds them
# from class statements, which mypy sees as classes).
# Guards on where the chart is, as the library intends (SCXML's `In()`).
OVERLAP = "In('paused')"
HELD = "In('held')"
SPEAKING = "In('user_speaking')"


def _held_is_next_turn(held: Any, committed: Any) -> TransitionList:
    """A client's clear, cancel or truncate of the latest response while the overlap's
    speech is held: the speech is the next user turn."""
    rows: TransitionList = held.to(committed, cond="targets_latest")
    return rows


def _resume(
    paused: Any, generating: Any, draining: Any, idle: Any, cond: str | None = None
) -> TransitionList:
    """Leave the pause back to the sub-state's origin (the decision is the pause's exit)."""
    conds = [cond] if cond else []
    rows: TransitionList = (
        paused.paused_generating.to(generating, cond=conds, on="_on_resumed")
        | paused.paused_draining.to(draining, cond=conds, on="_on_resumed")
        | paused.paused_settled.to(idle, cond=conds, on="_on_resumed")
    )
    return rows


def _client_stop(
    paused: Any,
    generating: Any,
    draining: Any,
    idle: Any,
    interrupted: Any,
    *,
    settled: str,
) -> TransitionList:
    """Rule 4's rows that `clear` and `cancel` share: the latest live response is stopped;
    an older one named is stopped alone and the output region stays; `settled` answers the
    latest when paused with nothing live."""
    rows: TransitionList = (
        generating.to(interrupted, cond="targets_latest", on="_on_clear_latest")
        | draining.to(interrupted, cond="targets_latest", on="_on_clear_latest")
        | paused.paused_settled.to(interrupted, cond="targets_latest", on=settled)
        | paused.to(interrupted, cond="targets_latest", on="_on_clear_latest")
        | generating.to.itself(on="_on_clear_older")
        | draining.to.itself(on="_on_clear_older")
        # Another response named: the pause stays in its own sub-state (rule 4).
        | paused.paused_generating.to.itself(unless="targets_latest", on="_on_clear_older")
        | paused.paused_draining.to.itself(unless="targets_latest", on="_on_clear_older")
        | paused.paused_settled.to.itself(unless="targets_latest", on="_on_clear_older")
    )
    return rows


def _nothing_live(
    idle: Any, interrupted: Any, cond: str, then: str, otherwise: str
) -> TransitionList:
    """Rows for a clear or cancel with no live latest response: `then` when `cond` holds,
    `otherwise` else."""
    rows: TransitionList = (
        idle.to.itself(cond=cond, on=then)
        | interrupted.to.itself(cond=cond, on=then)
        | idle.to.itself(on=otherwise)
        | interrupted.to.itself(on=otherwise)
    )
    return rows


# Pause mode's one decision, by the event that leaves `paused` (`resume_timer` resumes, its
# reason what was heard: `_resume_reason`).
_DECISIONS: dict[str, tuple[OverlapDecisionKind, OverlapReason]] = {
    "overlap_heard": ("interrupt", "speech"),
    "speech_stopped": ("interrupt", "speech"),
    "clear": ("interrupt", "client"),
    "cancel": ("interrupt", "client"),
    "truncate": ("interrupt", "client"),
    "commit": ("interrupt", "client"),
    "close": ("interrupt", "closed"),
    "clear_input": ("resume", "client"),
    "response_started": ("resume", "client"),
}


class SessionChart(Chart):
    """Session-level turn taking. Holds only small scalars: no history, no audio."""

    class session(State.Parallel):
        class input(State.Compound):
            listening = State(initial=True)
            user_speaking = State()
            # Pause mode: the overlap's speech stopped, undecided; its audio stays buffered.
            held = State()
            committed = State()

            speech_started = (
                listening.to(user_speaking, cond=["vad_turns", OVERLAP], on="_on_overlap_speech")
                | listening.to(user_speaking, cond="vad_turns", on="_on_speech_started")
                | held.to(user_speaking, cond=["vad_turns", OVERLAP], on="_on_overlap_speech")
                | held.to(user_speaking, cond="vad_turns", on="_on_speech_started")
            )
            # `before`: said before the pause's exit decides (speech_stopped, then the decision).
            speech_stopped = user_speaking.to(
                held, cond=["vad_turns", OVERLAP], unless="ends_turn", on="_on_hold"
            ) | user_speaking.to(committed, cond="vad_turns", before="_on_speech_stopped")
            commit = (
                listening.to(committed, cond=["commit_is_final", "has_audio"])
                | user_speaking.to(committed, cond=["commit_is_final", "has_audio"])
                | held.to(committed, cond=["commit_is_final", "has_audio"])
                | listening.to.itself(cond="commit_is_final", on="_reject_empty")
                | user_speaking.to.itself(cond="commit_is_final", on="_reject_empty")
            )
            clear_input = user_speaking.to(listening) | held.to(listening)
            # An interrupt decided after the overlap's speech stopped: it is the next turn.
            overlap_heard = held.to(committed, cond="sounds_like_interruption")
            # The client's act on the latest response while held: the speech is the next turn.
            clear = _held_is_next_turn(held, committed)
            cancel = _held_is_next_turn(held, committed)
            truncate = _held_is_next_turn(held, committed)
            # Resumed: the overlap never becomes a user turn.
            resume_timer = held.to(listening, cond=OVERLAP, on="_on_drop_input")
            response_started = held.to(listening, on="_on_drop_input")
            committed.to(listening)

        class output(State.Compound):
            idle = State(initial=True)
            generating = State()
            draining = State()
            interrupted = State()

            class paused(State.Compound):
                paused_generating = State(initial=True)
                paused_draining = State()
                paused_settled = State()

                response_finished = paused_generating.to(
                    paused_draining, cond=["is_latest", "audio_pending"]
                ) | paused_generating.to(paused_settled, cond="is_latest")
                response_settled = paused_draining.to(paused_settled, cond="is_latest")

            response_started = (
                idle.to(generating, on="_on_response_started")
                | draining.to(generating, on="_on_response_started")
                | interrupted.to(generating, on="_on_response_started")
                | paused.to(generating, on=["_on_resumed", "_on_response_started"])
            )
            response_finished = generating.to(
                draining, cond=["is_latest", "audio_pending"]
            ) | generating.to(idle, cond="is_latest")
            response_settled = draining.to(idle, cond="is_latest")
            speech_started = (
                generating.to(
                    paused, cond=["vad_turns", "interrupt_response", "pause_mode"], on="_on_pause"
                )
                | draining.to(
                    paused.paused_draining,
                    cond=["vad_turns", "interrupt_response", "pause_mode"],
                    on="_on_pause",
                )
                | generating.to(
                    interrupted, cond=["vad_turns", "interrupt_response"], on="_on_barge_in"
                )
                | draining.to(
                    interrupted, cond=["vad_turns", "interrupt_response"], on="_on_barge_in"
                )
            )
            overlap_heard = paused.to(
                interrupted, cond="sounds_like_interruption", on="_on_barge_in"
            )
            speech_stopped = paused.to(interrupted, cond="ends_turn", on="_on_barge_in")
            resume_timer = _resume(paused, generating, draining, idle, cond=HELD)
            clear_input = _resume(paused, generating, draining, idle)
            # Rule 4: `clear` and `cancel` share every row but what answers a latest response
            # with nothing live (a clear is answered, a cancel rejected unless it names a live
            # older one).
            clear = _client_stop(
                paused, generating, draining, idle, interrupted, settled="_answer_clear"
            ) | _nothing_live(
                idle, interrupted, "targets_latest", "_answer_clear", "_on_clear_older"
            )
            cancel = _client_stop(
                paused, generating, draining, idle, interrupted, settled="_reject_cancel"
            ) | _nothing_live(
                idle, interrupted, "names_live_response", "_on_clear_older", "_reject_cancel"
            )
            # Rule 3: one active response at a time; a request while one generates is refused.
            response_requested = generating.to.itself(
                on="_reject_active"
            ) | paused.paused_generating.to.itself(on="_reject_active")
            # The core runs the response chart's truncate; this only ends the pause.
            truncate = paused.to(interrupted, cond="targets_latest")
            # The client made the overlap a user turn: a barge-in by that turn.
            commit = paused.to(
                interrupted, cond=["commit_is_final", "has_audio"], on="_on_barge_in"
            )
            close = generating.to(interrupted, on="_on_clear_latest") | paused.to(
                interrupted, on="_on_clear_latest"
            )
            interrupted.to(idle)

        class heard_by(State.Compound):
            generated = State(initial=True)
            acknowledged = State()

            playback_acked = generated.to(acknowledged, on="_on_first_ack")

        class preemption(State.Compound):
            standby = State(initial=True)
            running = State()

            turn_paused = standby.to(
                running,
                cond=["vad_turns", "preemptive", "create_response", "In('idle')", SPEAKING],
                on="_on_preempt",
            )
            speech_resumed = running.to(standby, on="_on_speech_resumed")
            context_changed = running.to(standby, on="_on_context_changed")
            preempt_failed = running.to(standby, on="_on_preempt_failed")
            clear_input = running.to(standby, on="_on_input_cleared")
            close = running.to(standby, on="_on_closed")
            speech_stopped = running.to(standby, cond="vad_turns", on="_on_turn_over")
            commit = running.to(standby, cond=["commit_is_final", "has_audio"], on="_on_turn_over")

        class lifetime(State.Compound):
            serving = State(initial=True)
            winding_down = State()
            ended = State(final=True)

            # Drain: an answer still generating may finish (up to the bound); else end now.
            server_draining = (
                serving.to(winding_down, cond="In('generating')", on="_on_wind_down")
                | serving.to(winding_down, cond="In('paused_generating')", on="_on_wind_down")
                | serving.to(ended, on="_on_end_session")
            )
            response_finished = winding_down.to(ended, cond="is_latest", on="_on_end_session")
            drain_over = winding_down.to(ended, on="_on_end_session")

    def __init__(
        self,
        *,
        turn_detection: TurnMode = "server_vad",
        create_response: bool = True,
        interrupt_response: bool = True,
        interruption: InterruptionMode = "immediate",
        min_speech_ms: int = 400,
        preemptive: bool = False,
    ) -> None:
        self.turn_detection: TurnMode = turn_detection
        self.create_response = create_response
        self.interrupt_response_enabled = interrupt_response
        self.interruption: InterruptionMode = interruption
        self.min_speech_ms = min_speech_ms
        self.preemptive = preemptive
        self.latest_response_id: str | None = None
        # Set by the preemption region's turn-over transition, read by the input region's
        # entry into `committed` in the same step (SCXML: transition actions run before
        # entries): which response effect the commit emits.
        self._adopt = False
        # Where the held overlap's speech stopped: its commit, if interrupted, is a VAD commit.
        self._held_end_ms: int | None = None
        super().__init__()

    def configure(
        self,
        *,
        turn_detection: TurnMode,
        create_response: bool,
        interrupt_response: bool,
        interruption: InterruptionMode = "immediate",
        min_speech_ms: int = 400,
        preemptive: bool = False,
    ) -> None:
        """Apply a `session.update`: guards read these on the next event."""
        self.turn_detection = turn_detection
        self.create_response = create_response
        self.interrupt_response_enabled = interrupt_response
        self.interruption = interruption
        self.min_speech_ms = min_speech_ms
        self.preemptive = preemptive

    # Guards ---------------------------------------------------------------------------
    def vad_turns(self) -> bool:
        """The VAD drives turns (server_vad or semantic_vad), not the client's commits."""
        return self.turn_detection != "manual"

    def interrupt_response(self) -> bool:
        return self.interrupt_response_enabled

    def pause_mode(self) -> bool:
        return self.interruption == "pause"

    def sounds_like_interruption(
        self, speech_ms: int = 0, heard: Heard = "nothing", waited: bool = False
    ) -> bool:
        """An interrupt word, at any length; or long enough, and the partial transcript says
        words, or none came back in time."""
        return heard == "urgent" or (
            speech_ms >= self.min_speech_ms
            and (heard == "words" or (heard == "nothing" and waited))
        )

    def ends_turn(self, speech_ms: int = 0, heard: Heard = "nothing") -> bool:
        """The overlap's speech stopped having lasted long enough, and no partial cleared it
        (a backchannel or noise waits for the resume timer)."""
        return heard == "urgent" or (
            speech_ms >= self.min_speech_ms and heard in ("words", "nothing")
        )

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

    def _on_overlap_speech(self, audio_start_ms: int) -> None:
        # Speech while a reply is already paused: the same overlap goes on.
        self.emit(AnnounceSpeechStarted(audio_start_ms))
        self.emit(OverlapSpeechStarted(audio_start_ms))

    def _on_hold(self, audio_end_ms: int) -> None:
        self._held_end_ms = audio_end_ms
        self.emit(AnnounceSpeechStopped(audio_end_ms))
        self.emit(OverlapSpeechStopped(audio_end_ms))

    def _on_drop_input(self) -> None:
        self._held_end_ms = None
        self.emit(DropInput())

    def on_enter_committed(
        self,
        source: State,
        event: str,
        audio_end_ms: int | None = None,
        create_response: bool | None = None,
    ) -> None:
        if source.id == "held" and event != "commit":
            # A held overlap decided an interrupt: committed as its speech_stopped would have.
            audio_end_ms = self._held_end_ms
        self._held_end_ms = None
        self.emit(CommitInput(audio_end_ms))
        if self._wants_response(audio_end_ms, create_response):
            self.emit(AdoptPreemptive() if self._adopt else CreateResponse())
        self._adopt = False

    def _wants_response(self, audio_end_ms: int | None, create_response: bool | None) -> bool:
        """A VAD commit answers per session config; a client commit only when it asks."""
        if create_response is not None:
            return create_response
        return self.vad_turns() and self.create_response and audio_end_ms is not None

    # The heard_by region --------------------------------------------------------------
    def _on_first_ack(self, response_id: str) -> None:
        self.emit(HearByAcknowledgement(response_id))

    # The preemption region -------------------------------------------------------------
    def _on_preempt(self) -> None:
        self.emit(StartPreemptive())

    def _drop(self, reason: PreemptDropReason) -> None:
        self.emit(DropPreemptive(reason))

    def _on_speech_resumed(self) -> None:
        self._drop("speech_resumed")

    def _on_context_changed(self) -> None:
        self._drop("context_changed")

    def _on_preempt_failed(self, reason: Literal["failed", "overflow"] = "failed") -> None:
        self._drop(reason)

    def _on_input_cleared(self) -> None:
        self._drop("input_cleared")

    def _on_closed(self) -> None:
        self._drop("closed")

    # The lifetime region ---------------------------------------------------------------
    def _on_wind_down(self) -> None:
        self.emit(WindDown())

    def _on_end_session(self) -> None:
        self.emit(EndSession())

    def _on_turn_over(
        self, audio_end_ms: int | None = None, create_response: bool | None = None
    ) -> None:
        self._adopt = self._wants_response(audio_end_ms, create_response)
        if not self._adopt:
            self._drop("not_answered")

    def _reject_cancel(self) -> None:
        # OpenAI's code and message: Pipecat ignores this code only (any other error is fatal
        # to it), LiveKit this message's opening.
        self.emit(
            Reject("response_cancel_not_active", "Cancellation failed: no active response found")
        )

    def _reject_active(self) -> None:
        # OpenAI's words (clients match "already has an active response").
        self.emit(
            Reject(
                "conversation_already_has_active_response",
                "Conversation already has an active response in progress: "
                f"{self.latest_response_id}. Wait until the response is finished before "
                "creating a new one.",
            )
        )

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

    # Pause mode: one decision per pause, emitted on leaving `paused` (whatever the event).
    def on_exit_paused(self, event: str, speech_ms: int = 0, heard: Heard = "nothing") -> None:
        assert self.latest_response_id is not None  # paused only while a response is latest
        decision: OverlapDecisionKind
        reason: OverlapReason
        if str(event) == "resume_timer":
            decision, reason = "resume", self._resume_reason(speech_ms, heard)
        else:
            # A way out of `paused` without its decision in the table is a bug: KeyError.
            decision, reason = _DECISIONS[str(event)]
        self.emit(OverlapDecided(self.latest_response_id, decision, reason))

    def _resume_reason(self, speech_ms: int, heard: Heard) -> OverlapReason:
        if heard == "backchannel":
            return "backchannel"
        if heard == "noise" and speech_ms >= self.min_speech_ms:
            return "noise"
        return "short"

    def _on_pause(self, audio_start_ms: int) -> None:
        assert self.latest_response_id is not None
        self.emit(PauseOutput(self.latest_response_id))
        self.emit(OverlapSpeechStarted(audio_start_ms))

    def _on_resumed(self) -> None:
        self.emit(ResumeOutput(self.latest_response_id or ""))

    def _on_clear_older(self, response_id: str | None = None) -> None:
        if response_id is not None and response_id != self.latest_response_id:
            self.emit(InterruptResponse(response_id, "client_cancelled"))

    def feed(self, event: SessionEvent) -> list[Effect]:
        """Feed one of this chart's typed events (statecharts/session_events.py)."""
        return self._feed(event)

    # Queries --------------------------------------------------------------------------
    @property
    def is_output_live(self) -> bool:
        return bool(
            {"generating", "draining", "paused_generating", "paused_draining"} & self.active
        )

    @property
    def is_generating(self) -> bool:
        return "generating" in self.active or "paused_generating" in self.active

    @property
    def is_paused(self) -> bool:
        return "paused" in self.active

    @property
    def is_held(self) -> bool:
        return "held" in self.active

    @property
    def user_speaking(self) -> bool:
        return "user_speaking" in self.active

"""The core's rule 11: a drain lets the answer being generated finish, up to its bound, and then
ends the session as kept (4001, resume it elsewhere) or over (1001).

The session chart's lifetime region decides (tests/statecharts/test_session_lifetime.py); these
check what a client sees of it: the order of the events, the end and the drain timer.
"""

from __future__ import annotations

from typing import Any

from orchestrator.protocol import client as ce
from orchestrator.protocol import items as wire
from orchestrator.protocol import server as se
from orchestrator.protocol.session_config import SessionPatch
from orchestrator.session.actions import ArmTimer, CancelBackend, SessionEnd, StartBackend
from orchestrator.session.core import SessionCore, Step
from orchestrator.session.inputs import (
    BackendAudio,
    BackendDone,
    DrainRequested,
    TimerFired,
)


def of(step: Step, cls: type[Any]) -> list[Any]:
    return [o for o in (*step.actions, *step.events) if isinstance(o, cls)]


def _kinds(step: Step) -> list[str]:
    return [type(e).__name__ for e in step.events]


def _answering() -> tuple[SessionCore, StartBackend]:
    """A session whose text turn's answer is generating."""
    core = SessionCore("t")
    core.open(0)
    core.handle(ce.SessionUpdate(session=SessionPatch(turn_detection=None)), 0)
    core.handle(
        ce.ConversationItemCreate(
            item=wire.MessageItem(role="user", content=(wire.InputText(text="hi"),))
        ),
        0,
    )
    [start] = of(core.handle(ce.ResponseCreate(), 0), StartBackend)
    core.handle(BackendAudio(start.response_id, start.seq, b"\x00\x00" * 2400, "Hel"), 10)
    return core, start


def test_rule11_with_nothing_generating_a_drain_ends_the_session_at_once() -> None:
    core = SessionCore("t")
    core.open(0)
    out = core.handle(DrainRequested(answer_ms=10_000, kept=True), 5)
    [error] = of(out, se.ErrorEvent)
    assert error.error.code == "server_restarting" and error.error.type == "server_error"
    assert of(out, SessionEnd) == [
        SessionEnd(4001, "server restarting; resume the session", "server_restarting")
    ]
    assert of(out, ArmTimer) == []


def test_rule11_a_drain_with_no_shared_store_ends_with_1001_as_before() -> None:
    core = SessionCore("t")
    core.open(0)
    out = core.handle(DrainRequested(answer_ms=10_000, kept=False), 5)
    [error] = of(out, se.ErrorEvent)
    assert error.error.code == "server_shutting_down"
    assert of(out, SessionEnd) == [
        SessionEnd(1001, "server is shutting down", "server_shutting_down")
    ]


def test_rule11_a_generating_answer_finishes_then_the_session_ends() -> None:
    core, start = _answering()
    held = core.handle(DrainRequested(answer_ms=10_000, kept=True), 20)
    # Nothing is cut or said yet: the answer goes on, under the drain's bound.
    assert of(held, SessionEnd) == [] and of(held, CancelBackend) == []
    assert of(held, se.ErrorEvent) == []
    [timer] = of(held, ArmTimer)
    assert timer.kind == "drain" and timer.deadline_ms == 20 + 10_000
    more = core.handle(BackendAudio(start.response_id, start.seq, b"\x00\x00" * 2400, "lo"), 30)
    assert any(isinstance(e, se.ResponseOutputAudioDelta) for e in more.events)
    done = core.handle(BackendDone(start.response_id, start.seq, output_tokens=2), 40)
    kinds = _kinds(done)
    assert kinds.index("ResponseDone") < kinds.index("ErrorEvent")
    [finished] = of(done, se.ResponseDone)
    assert finished.response.status == "completed"
    assert of(done, SessionEnd) == [
        SessionEnd(4001, "server restarting; resume the session", "server_restarting")
    ]
    # The bound's timer, when it fires later, changes nothing.
    late = core.handle(TimerFired("drain", timer.token), 10_020)
    assert late.events == () and of(late, SessionEnd) == []


def test_rule11_at_the_drains_bound_the_answer_is_cut_with_its_terminal() -> None:
    core, start = _answering()
    [timer] = of(core.handle(DrainRequested(answer_ms=500, kept=True), 20), ArmTimer)
    out = core.handle(TimerFired("drain", timer.token), 520)
    assert of(out, CancelBackend) == [CancelBackend(start.response_id, start.seq)]
    kinds = _kinds(out)
    assert kinds.index("ResponseDone") < kinds.index("ErrorEvent")
    [finished] = of(out, se.ResponseDone)
    assert finished.response.status == "cancelled"
    assert [e.cause for e in of(out, SessionEnd)] == ["server_restarting"]


def test_rule11_a_barge_in_during_the_drain_is_the_turn_boundary_it_ends_at() -> None:
    core, start = _answering()
    core.handle(DrainRequested(answer_ms=10_000, kept=True), 20)
    out = core.handle(ce.ResponseCancel(), 30)
    assert of(out, CancelBackend) == [CancelBackend(start.response_id, start.seq)]
    kinds = _kinds(out)
    assert kinds.index("ResponseDone") < kinds.index("ErrorEvent")
    assert [e.cause for e in of(out, SessionEnd)] == ["server_restarting"]


def test_rule11_a_stale_drain_timer_is_ignored() -> None:
    core, _ = _answering()
    core.handle(DrainRequested(answer_ms=500, kept=True), 20)
    out = core.handle(TimerFired("drain", 999_999), 520)
    assert of(out, SessionEnd) == [] and of(out, CancelBackend) == []

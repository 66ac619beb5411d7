"""The one owner of a core step's output and of its ids (orchestrator/session/core_outbox.py)."""

from __future__ import annotations

from orchestrator.protocol import server as se
from orchestrator.session.actions import CancelTimer
from orchestrator.session.core_outbox import Ids, Outbox
from orchestrator.session.core_types import TurnEnded
from orchestrator.session.envelope import Envelope


def test_rule1_flush_hands_over_the_step_in_order_and_forgets_it() -> None:
    out = Outbox(Envelope("s"))
    out.send(se.InputAudioBufferCleared())
    out.act(None)  # nothing to do is no action
    out.act(CancelTimer("idle"))
    out.note(TurnEnded("silence"))
    step = out.flush()
    assert [type(e) for e in step.events] == [se.InputAudioBufferCleared]
    assert step.actions == (CancelTimer("idle"),)
    assert step.notes == (TurnEnded("silence"),)
    assert out.flush().events == ()


def test_rule2_an_error_names_the_client_event_being_handled() -> None:
    out = Outbox(Envelope("s"))
    out.event_id = "evt_1"
    out.error("invalid_value", "no")
    out.error("vad_unavailable", "down", event_id=None)
    first, second = out.flush().events
    assert isinstance(first, se.ErrorEvent) and first.error.event_id == "evt_1"
    assert isinstance(second, se.ErrorEvent) and second.error.event_id is None


def test_rule3_ids_skip_the_ones_the_conversation_holds() -> None:
    taken = {"item_s_1", "item_s_2"}
    ids = Ids("s", taken.__contains__)
    assert ids.new("item") == "item_s_3"
    assert ids.new("resp") == "resp_s_4"


def test_rule3_timer_tokens_are_one_sequence() -> None:
    ids = Ids("s", lambda _: False)
    assert ids.next_token() == 1 and ids.next_token() == 1  # peeking takes nothing
    assert ids.token() == 1 and ids.token() == 2 and ids.next_token() == 3

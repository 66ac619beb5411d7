"""orchestrator/session/resume/link_events.py: the events about a session's link."""

from __future__ import annotations

import msgspec

from orchestrator.protocol import server as se
from orchestrator.protocol.codec import ServerEventEncoder
from orchestrator.session.core import SessionCore
from orchestrator.session.resume import link_events
from orchestrator.session.resume.journal import JournalEntry
from orchestrator.session.resume.link import Resumed, resume_failed


def _wire(event: se.ServerEvent) -> dict[str, object]:
    decoded = msgspec.json.decode(ServerEventEncoder().encode(event))
    assert isinstance(decoded, dict)
    return decoded


def test_rule_1_session_created_carries_the_links_token() -> None:
    step = SessionCore("sess_1").open(0)
    created = step.events[0]
    assert isinstance(created, se.SessionCreated)
    assert "resume_token" not in _wire(created)  # the core knows no link
    stamped = link_events.opened(step, "tok")
    assert stamped.actions == step.actions and stamped.notes == step.notes
    assert len(stamped.events) == len(step.events)
    assert _wire(stamped.events[0])["resume_token"] == "tok"
    assert stamped.events[1:] == step.events[1:]


def test_rule_2_events_about_the_connection_are_outside_the_sequence() -> None:
    encoder = ServerEventEncoder()
    for event in (
        link_events.replaced(),
        link_events.resume_failed(resume_failed("ended"), "e1"),
        link_events.resumed("sess_1", Resumed("tok", 3, [], [])),
    ):
        assert "server_event_seq" not in msgspec.json.decode(encoder.encode(event))


def test_rule_3_session_resumed_names_the_new_token_and_where_the_replay_starts() -> None:
    verdict = Resumed("tok2", 7, [JournalEntry(7, "{}")], [])
    wire = _wire(link_events.resumed("sess_1", verdict))
    wire.pop("event_id")
    assert wire == {
        "type": "session.resumed",
        "session_id": "sess_1",
        "resume_token": "tok2",
        "replayed_from_seq": 7,
    }


def test_rule_4_a_refused_resume_is_an_error_naming_the_clients_event() -> None:
    error = _wire(link_events.resume_failed(resume_failed("not_first"), "evt_9"))["error"]
    assert error == {
        "type": "invalid_request_error",
        "code": "session_resume_failed",
        "message": "session.resume must be the first client event of a connection.",
        "param": None,
        "event_id": "evt_9",
    }


def test_rule_5_a_replaced_connection_hears_session_replaced() -> None:
    error = _wire(link_events.replaced())["error"]
    assert error == {
        "type": "invalid_request_error",
        "code": "session_replaced",
        "message": "Another connection resumed this session; this one is closed.",
        "param": None,
        "event_id": None,
    }

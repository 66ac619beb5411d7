"""orchestrator/session/ending.py: each cause's close code and reason, one test per rule."""

from __future__ import annotations

from typing import get_args

from orchestrator.session import ending
from orchestrator.session.actions import SessionEnd, SessionEndCause
from orchestrator.session.inputs import CloseRequested


def test_rule_1_every_cause_has_a_code_and_names_itself() -> None:
    assert set(ending.CLOSE_CODES) == set(get_args(SessionEndCause))
    ends = [
        ending.closing(CloseRequested("server_shutting_down")),
        ending.drained(kept=True),
        ending.closing(CloseRequested("session_expired")),
        ending.replaced(),
        ending.not_reading(1, 1),
        ending.unattended("grace_expired"),
        ending.unattended("journal_overflow"),
        ending.internal_error(),
        ending.refused_draining(),
        ending.connection_failed(),
    ]
    assert sorted(e.cause for e in ends if e is not None) == sorted(get_args(SessionEndCause))
    assert all(e is not None and e.reason for e in ends)


def test_rule_2_a_drain_closes_1001_flushed() -> None:
    assert ending.closing(CloseRequested("server_shutting_down", 60)) == SessionEnd(
        1001, "server is shutting down", "server_shutting_down", True
    )


def test_rule_2_a_drain_that_keeps_the_session_closes_4001_flushed_else_1001() -> None:
    assert ending.drained(kept=True) == SessionEnd(
        4001, "server restarting; resume the session", "server_restarting", True
    )
    assert ending.drained(kept=False) == ending.closing(CloseRequested("server_shutting_down"))


def test_rule_3_an_expiry_closes_1000_with_the_limit_in_words() -> None:
    assert ending.closing(CloseRequested("session_expired", 3600)) == SessionEnd(
        1000, "session expired after 60 minutes", "session_expired", True
    )
    assert ending.closing(CloseRequested("session_expired", 1.5)).reason == (
        "session expired after 1.5 seconds"
    )


def test_rule_4_a_replaced_connection_closes_1000() -> None:
    assert ending.replaced() == SessionEnd(
        1000, "session replaced by a resume", "session_replaced", True
    )


def test_rule_5_a_client_not_reading_closes_1008_unflushed() -> None:
    assert ending.not_reading(4, 3 << 20) == SessionEnd(
        1008, "client is not reading: 4 events queued (3.0 MiB)", "client_not_reading", False
    )


def test_rule_6_an_end_without_a_connection_closes_1000_and_a_client_close_is_the_clients() -> None:
    assert ending.unattended("grace_expired") == SessionEnd(
        1000, "grace_expired", "grace_expired", False
    )
    assert ending.unattended("journal_overflow") == SessionEnd(
        1000, "journal_overflow", "journal_overflow", False
    )
    assert ending.unattended("client_left") is None


def test_rule_7_a_bug_closes_1011() -> None:
    assert ending.internal_error() == SessionEnd(
        1011, "internal error; the session was closed", "internal_error", True
    )


def test_rule_8_only_ends_nobody_reads_are_cut() -> None:
    cut = {cause for cause, (_, flush) in ending.CLOSE_CODES.items() if not flush}
    assert cut == {"client_not_reading", "grace_expired", "journal_overflow"}


def test_rule_9_a_connection_while_draining_is_refused_1013() -> None:
    assert ending.refused_draining() == SessionEnd(
        1013, "server is shutting down", "refused_draining", True
    )


def test_rule_10_a_failed_connection_closes_1011() -> None:
    assert ending.connection_failed() == SessionEnd(
        1011, "internal error; the connection was closed", "connection_failed", True
    )

"""EventJournal: bounded in bytes, contiguous, never a gap
(orchestrator/session/resume/journal.py)."""

from __future__ import annotations

import pytest

from orchestrator.session.resume.journal import EventJournal


def _fill(journal: EventJournal, count: int, size: int = 10) -> None:
    for seq in range(journal.last_seq + 1, journal.last_seq + 1 + count):
        assert journal.append(seq, "x" * size)


def test_rule_1_events_are_appended_in_seq_order_without_gaps() -> None:
    journal = EventJournal(1000)
    journal.append(1, "a")
    with pytest.raises(ValueError, match="does not follow"):
        journal.append(3, "c")
    with pytest.raises(ValueError, match="does not follow"):
        journal.append(1, "again")


def test_rule_2_the_oldest_events_go_to_make_room_and_bytes_stay_within_the_bound() -> None:
    journal = EventJournal(100)
    _fill(journal, 25)  # 250 bytes offered
    assert journal.bytes <= 100
    assert len(journal) == 10
    assert journal.first_seq == 16 and journal.last_seq == 25


def test_rule_2_one_event_always_fits_even_past_the_bound() -> None:
    journal = EventJournal(100)
    _fill(journal, 3)
    assert journal.append(4, "y" * 500)
    assert len(journal) == 1 and journal.bytes == 500
    entries = journal.after(3)
    assert entries is not None and [e.seq for e in entries] == [4]


def test_rule_3_protected_events_are_never_evicted_the_append_is_refused() -> None:
    journal = EventJournal(100)
    _fill(journal, 10)  # full: seqs 1..10
    # Events after 5 were never taken by the client: evicting seq 6 is not allowed.
    assert journal.append(11, "z" * 60, protect_after=5) is False
    assert journal.overflowed
    assert journal.last_seq == 10  # nothing appended
    entries = journal.after(5)
    assert entries is not None and [e.seq for e in entries] == [6, 7, 8, 9, 10]


def test_rule_3_unprotected_old_events_still_make_room() -> None:
    journal = EventJournal(100)
    _fill(journal, 10)
    assert journal.append(11, "z" * 30, protect_after=8)
    assert journal.first_seq == 4


def test_rule_4_an_ack_drops_what_the_client_has() -> None:
    journal = EventJournal(1000)
    _fill(journal, 10)
    journal.ack(7)
    assert journal.first_seq == 8 and journal.bytes == 30
    assert journal.after(6) is None  # 7 is gone: a replay from 6 would skip it
    entries = journal.after(7)
    assert entries is not None and [e.seq for e in entries] == [8, 9, 10]


def test_rule_5_a_replay_is_exactly_the_events_after_the_seq() -> None:
    journal = EventJournal(1000)
    _fill(journal, 5)
    for seq in range(0, 6):
        entries = journal.after(seq)
        assert entries is not None
        assert [e.seq for e in entries] == list(range(seq + 1, 6))


def test_rule_5_no_replay_from_beyond_the_last_event_or_before_the_journal() -> None:
    journal = EventJournal(50)
    _fill(journal, 10)  # keeps 6..10
    assert journal.after(11) is None
    assert journal.after(4) is None
    assert journal.after(5) is not None
    empty = EventJournal(50)
    assert empty.after(0) == []
    assert empty.after(1) is None

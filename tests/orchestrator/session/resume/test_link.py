"""SessionLink: sequence, journal, token, what a resume may do
(orchestrator/session/resume/link.py)."""

from __future__ import annotations

import itertools

from orchestrator.protocol.session_config import SessionConfig
from orchestrator.session.resume.link import (
    Resumed,
    ResumeFailed,
    SessionLink,
    new_resume_token,
    refuse_unknown,
)
from orchestrator.session.resume.snapshot import JournaledEvent, SessionSnapshot, token_digest
from statecharts.effects import ArmGrace, AttachConnection, CancelGrace, EndUnattended


def _link(journal_bytes: int = 10_000) -> SessionLink:
    tokens = (f"token-{i}" for i in itertools.count())
    return SessionLink("sess_a", "alice", journal_bytes, new_token=lambda: next(tokens))


def _send(link: SessionLink, count: int, size: int = 10, *, taken: bool = True) -> None:
    for _ in range(count):
        seq = link.next_seq()
        assert link.record(seq, "e" * size) == [] or not taken
        if taken:
            link.delivered(seq)


def test_rule_1_the_sequence_starts_at_1_and_never_skips() -> None:
    link = _link()
    assert [link.next_seq() for _ in range(3)] == [1, 2, 3]


def test_rule_4_tokens_have_at_least_128_random_bits_and_differ() -> None:
    tokens = {new_resume_token() for _ in range(50)}
    assert len(tokens) == 50
    # token_urlsafe: 6 bits a character.
    assert all(len(t) * 6 >= 128 for t in tokens)


def test_rule_4_no_repr_shows_the_token() -> None:
    link = SessionLink("sess_a", "alice", 1000)
    assert link.token not in repr(link)
    _send(link, 2)
    link.lost(clean=False)
    resumed = link.resume(link.token, "alice", 2)
    assert isinstance(resumed, Resumed)
    assert resumed.token not in repr(resumed)


def test_rule_4_and_5_a_resume_replays_what_follows_and_rotates_the_token() -> None:
    link = _link()
    _send(link, 5)
    assert link.lost(clean=False) == [ArmGrace()]
    old = link.token
    resumed = link.resume(old, "alice", 3)
    assert isinstance(resumed, Resumed)
    assert [e.seq for e in resumed.replay] == [4, 5]
    assert resumed.replayed_from_seq == 4
    assert resumed.effects == [CancelGrace(), AttachConnection()]
    assert resumed.token != old and link.token == resumed.token
    # The old token is void at once.
    link.lost(clean=False)
    again = link.resume(old, "alice", 5)
    assert isinstance(again, ResumeFailed) and again.reason == "unknown"


def test_rule_5_a_wrong_token_reads_as_an_unknown_session() -> None:
    link = _link()
    _send(link, 2)
    link.lost(clean=False)
    wrong = link.resume("not-it", "alice", 2)
    unknown = refuse_unknown("not-it")
    assert isinstance(wrong, ResumeFailed)
    assert (wrong.reason, wrong.message) == (unknown.reason, unknown.message)
    assert link.detached  # a failed try changes nothing


def test_rule_5_another_api_key_cannot_resume_even_with_the_token() -> None:
    link = _link()
    _send(link, 2)
    link.lost(clean=False)
    failed = link.resume(link.token, "mallory", 2)
    assert isinstance(failed, ResumeFailed) and failed.reason == "other_key"
    assert link.detached


def test_rule_5_events_no_longer_journaled_cannot_be_replayed() -> None:
    link = _link(journal_bytes=50)
    _send(link, 10)  # keeps 6..10
    link.lost(clean=False)
    failed = link.resume(link.token, "alice", 3)
    assert isinstance(failed, ResumeFailed) and failed.reason == "not_journaled"
    assert "6..10" in failed.message
    ahead = link.resume(link.token, "alice", 11)
    assert isinstance(ahead, ResumeFailed) and ahead.reason == "not_journaled"
    ok = link.resume(link.token, "alice", 5)
    assert isinstance(ok, Resumed) and [e.seq for e in ok.replay] == [6, 7, 8, 9, 10]


def test_rule_5_an_ended_session_is_never_resumed() -> None:
    link = _link()
    _send(link, 2)
    link.lost(clean=False)
    assert link.expired() == [EndUnattended("grace_expired")]
    failed = link.resume(link.token, "alice", 2)
    assert isinstance(failed, ResumeFailed) and failed.reason == "ended"


def test_rule_3_a_clean_close_ends_the_session_at_once() -> None:
    link = _link()
    assert link.lost(clean=True) == [EndUnattended("client_left")]
    assert link.ended


def test_rule_2_while_detached_events_the_client_never_got_are_kept_or_the_session_ends() -> None:
    link = _link(journal_bytes=100)
    _send(link, 5)  # 50 bytes, all taken by the client's socket
    link.lost(clean=False)
    # The grace: the response goes on. Taken events make room; untaken ones never do.
    for _ in range(20):
        seq = link.next_seq()
        effects = link.record(seq, "e" * 10)
        if effects:
            break
    assert effects == [EndUnattended("journal_overflow")]
    assert seq == 16  # 6..15 (100 bytes) held, none of them evicted
    assert link.ended


def test_rule_2_while_attached_the_journal_is_a_ring_and_never_ends_the_session() -> None:
    link = _link(journal_bytes=100)
    _send(link, 50, taken=False)  # a slow socket: the outbox, not the journal, bounds it
    assert link.attached and link.journal.bytes == 100


def test_rule_4_an_ack_frees_journaled_events_but_never_past_what_was_sent() -> None:
    link = _link()
    _send(link, 5)
    seq = link.next_seq()
    link.record(seq, "unsent")
    link.acked(100)
    assert link.journal.first_seq == 6


def _snapshot_of(link: SessionLink) -> SessionSnapshot:
    return SessionSnapshot(
        session_id=link.session_id,
        version=3,
        identity=link.identity,
        token_sha256=token_digest(link.token),
        settings=SessionConfig(),
        items=(),
        next_id=0,
        last_seq=link.last_seq,
        journal=tuple(JournaledEvent(e.seq, e.text) for e in link.journal.held()),
    )


def test_rule_6_a_takeover_replays_the_snapshots_journal_and_goes_on_with_its_sequence() -> None:
    old = _link()
    _send(old, 5)
    snapshot = _snapshot_of(old)
    verdict = SessionLink.taken_over(snapshot, old.token, "alice", 2, 10_000, lambda: "new")
    assert not isinstance(verdict, ResumeFailed), verdict
    link, resumed = verdict
    assert [e.seq for e in resumed.replay] == [3, 4, 5] and resumed.replayed_from_seq == 3
    assert resumed.token == link.token == "new"
    assert link.next_seq() == 6  # no seq reused


def test_rule_6_a_client_past_the_snapshot_gets_no_replay_and_no_seq_twice() -> None:
    old = _link()
    _send(old, 5)
    snapshot = _snapshot_of(old)
    _send(old, 3)  # the lost worker went on: the client saw 6..8, the snapshot never did
    verdict = SessionLink.taken_over(snapshot, old.token, "alice", 8, 10_000)
    assert not isinstance(verdict, ResumeFailed), verdict
    link, resumed = verdict
    assert resumed.replay == [] and resumed.replayed_from_seq == 9
    assert link.next_seq() == 9


def test_rule_6_a_takeover_is_judged_as_a_resume() -> None:
    old = _link()
    _send(old, 5)
    snapshot = _snapshot_of(old)
    wrong = SessionLink.taken_over(snapshot, "not-the-token", "alice", 5, 10_000)
    other = SessionLink.taken_over(snapshot, old.token, "bob", 5, 10_000)
    old.acked(4)  # the client acknowledged up to 4: a resume from before it cannot replay
    gone = SessionLink.taken_over(_snapshot_of(old), old.token, "alice", 1, 10_000)
    assert isinstance(wrong, ResumeFailed) and wrong.reason == "unknown"
    assert isinstance(other, ResumeFailed) and other.reason == "other_key"
    assert isinstance(gone, ResumeFailed) and gone.reason == "not_journaled"

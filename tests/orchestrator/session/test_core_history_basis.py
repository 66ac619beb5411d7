"""History for clients that never acknowledge playback, and the switch to rule 5 at the first ACK
(docs/protocol.md "History without acknowledgements"), through the session core in memory.

Every test feeds the core its clock (`now_ms`), as the session actor does: the playout clock
runs on it.
"""

from __future__ import annotations

from typing import Any

from orchestrator.protocol import client as ce
from orchestrator.protocol import server as se
from orchestrator.session.actions import ArmTimer, StartBackend
from orchestrator.session.core import CoreInput, SessionCore, Step
from orchestrator.session.history import conversation as conv
from orchestrator.session.inputs import (
    BackendAudio,
    BackendDone,
    TimerFired,
    VadSpeechStarted,
    VadSpeechStopped,
)

MS = 48  # bytes of pcm16 24 kHz audio per ms
WORDS = [(400, "Hello "), (300, "there, "), (500, "friend.")]  # 1200 ms, a word per chunk


def of(out: Step, cls: type[Any]) -> list[Any]:
    return [o for o in (*out.actions, *out.events) if isinstance(o, cls)]


class Client:
    """A session core as a client that never sends `playback.ack` sees it."""

    def __init__(self) -> None:
        self.core = SessionCore("t")
        self.core.open(0)

    def feed(self, event: CoreInput, now_ms: int) -> Step:
        return self.core.handle(event, now_ms)

    def reply(self, now_ms: int, words: list[tuple[int, str]] = WORDS, done: bool = True) -> str:
        """A spoken turn at `now_ms`; the reply's chunks all come at once (faster than real
        time), its end too when `done`. Returns the response id."""
        self.feed(ce.InputAudioBufferAppend(audio=b"\x01\x00" * 24 * 300), now_ms)
        self.feed(VadSpeechStarted(now_ms), now_ms)
        [start] = of(self.feed(VadSpeechStopped(now_ms + 300), now_ms), StartBackend)
        for ms, text in words:
            self.feed(BackendAudio(start.response_id, start.seq, b"\0" * MS * ms, text), now_ms)
        if done:
            self.done = self.feed(BackendDone(start.response_id, start.seq), now_ms)
        self.seq = start.seq
        return start.response_id

    def history(self, rid: str) -> tuple[conv.Content, ...]:
        item_id = self.core.ledger.item_id(rid)
        return self.core.conversation.get(item_id).content


def test_generated_basis_a_reply_is_history_in_full_once_generated() -> None:
    c = Client()
    rid = c.reply(now_ms=1000)
    assert c.history(rid) == (conv.OutputAudio("Hello there, friend.", 1200),)
    # Its playout is over at 1000 + 1200: the core asks to be woken then.
    [playout] = [a for a in of(c.done, ArmTimer) if a.kind == "playout"]
    assert playout.deadline_ms == 2200


def test_generated_basis_a_barge_in_while_playing_cuts_at_the_estimate_to_the_word() -> None:
    c = Client()
    rid = c.reply(now_ms=1000)
    # 800 ms after the first audio was sent, the client has played "Hello " (ends at 400) and
    # "there, " (ends at 700), not "friend.".
    out = c.feed(VadSpeechStarted(0), 1800)
    assert [e.response_id for e in of(out, se.OutputAudioBufferCleared)] == [rid]
    assert c.history(rid) == (conv.OutputAudio("Hello there, ", 800),)


def test_generated_basis_a_barge_in_while_generating_cuts_at_the_estimate() -> None:
    c = Client()
    rid = c.reply(now_ms=0, done=False)
    out = c.feed(VadSpeechStarted(0), 500)
    [done] = of(out, se.ResponseDone)
    assert done.response.status == "cancelled"
    assert c.history(rid) == (conv.OutputAudio("Hello ", 500),)


def test_generated_basis_a_later_truncate_replaces_the_estimate() -> None:
    c = Client()
    rid = c.reply(now_ms=0)
    c.feed(VadSpeechStarted(0), 500)  # estimate: "Hello " (500 ms)
    item_id = c.core.ledger.item_id(rid)
    truncate = ce.ConversationItemTruncate(item_id=item_id, content_index=0, audio_end_ms=750)
    out = c.feed(truncate, 900)
    assert of(out, se.ConversationItemTruncated)
    assert c.history(rid) == (conv.OutputAudio("Hello there, ", 750),)
    # The client's own cut is final (rule 5), as without the estimate.
    c.feed(ce.ConversationItemTruncate(item_id=item_id, content_index=0, audio_end_ms=100), 950)
    assert c.history(rid) == (conv.OutputAudio("Hello there, ", 750),)


def test_generated_basis_a_truncate_shorter_than_the_estimate_replaces_it_too() -> None:
    c = Client()
    rid = c.reply(now_ms=0)
    c.feed(VadSpeechStarted(0), 1000)  # estimate: "Hello there, " (1000 ms)
    item_id = c.core.ledger.item_id(rid)
    c.feed(ce.ConversationItemTruncate(item_id=item_id, content_index=0, audio_end_ms=420), 1100)
    assert c.history(rid) == (conv.OutputAudio("Hello ", 420),)


def test_generated_basis_once_played_out_speech_no_longer_touches_the_reply() -> None:
    c = Client()
    rid = c.reply(now_ms=0)
    [playout] = [a for a in of(c.done, ArmTimer) if a.kind == "playout"]
    c.feed(TimerFired("playout", playout.token), playout.deadline_ms)
    out = c.feed(VadSpeechStarted(0), 5000)
    assert not of(out, se.OutputAudioBufferCleared)
    assert c.history(rid) == (conv.OutputAudio("Hello there, friend.", 1200),)
    # The next turn's prompt holds the whole reply.
    [start] = of(c.feed(VadSpeechStopped(300), 5300), StartBackend)
    replies = [i for i in start.request.items if i.role == "assistant"]
    assert [i.content for i in replies] == [(conv.OutputAudio("Hello there, friend.", 1200),)]


def test_generated_basis_an_underrun_delays_the_estimate() -> None:
    c = Client()
    rid = c.reply(now_ms=0, words=[(400, "Hello ")], done=False)
    # The next word comes 1000 ms later: the client waited 600 ms for it.
    c.feed(BackendAudio(rid, c.seq, b"\0" * MS * 300, "there, "), 1000)
    c.feed(VadSpeechStarted(0), 1200)
    assert c.history(rid) == (conv.OutputAudio("Hello ", 600),)


def test_switch_the_first_ack_withdraws_an_estimate_still_playing_and_rule5_decides() -> None:
    c = Client()
    rid = c.reply(now_ms=0)
    assert c.history(rid)  # estimated in full
    out = c.feed(ce.PlaybackAck(response_id=rid, played_ms=300), 300)
    [ack] = of(out, se.PlaybackAcknowledged)
    assert not ack.history_committed and c.history(rid) == ()  # the empty boundary (rule 5)
    assert c.core.ledger.basis == "acknowledged"
    c.feed(VadSpeechStarted(0), 900)  # barge-in: cut at the client's cursor, not the clock's
    assert c.history(rid) == (conv.OutputAudio(None, 300),)


def test_switch_keeps_replies_the_clock_had_played_out_so_none_is_lost() -> None:
    c = Client()
    first = c.reply(now_ms=0)
    [playout] = [a for a in of(c.done, ArmTimer) if a.kind == "playout"]
    c.feed(TimerFired("playout", playout.token), playout.deadline_ms)
    second = c.reply(now_ms=3000)
    c.feed(ce.PlaybackAck(response_id=second, played_ms=1200), 4300)
    assert c.history(first) == (conv.OutputAudio("Hello there, friend.", 1200),)
    assert c.history(second) == (conv.OutputAudio("Hello there, friend.", 1200),)
    # Counted once each: one assistant item per reply.
    assistants = [i for i in c.core.conversation.items if i.role == "assistant"]
    assert [i.response_id for i in assistants] == [first, second]


def test_switch_an_estimated_cut_never_stands_below_what_the_client_says_it_played() -> None:
    c = Client()
    rid = c.reply(now_ms=0)
    c.feed(VadSpeechStarted(0), 300)  # estimate: 300 ms, no whole word
    assert c.history(rid) == (conv.OutputAudio(None, 300),)
    c.feed(ce.PlaybackAck(response_id=rid, played_ms=700), 400)
    assert c.history(rid) == (conv.OutputAudio("Hello there, ", 700),)


def test_acknowledging_client_an_invalid_ack_switches_nothing() -> None:
    c = Client()
    rid = c.reply(now_ms=0)
    out = c.feed(ce.PlaybackAck(response_id="resp_unknown", played_ms=10), 10)
    assert [e.error.code for e in of(out, se.ErrorEvent)] == ["playback_item_not_found"]
    assert c.core.ledger.basis == "generated" and c.history(rid)


def _acknowledging(c: Client) -> str:
    """The page's way (no echo cancellation): one ACK when an answer has played out. Returns
    the second reply's id, all of it sent at 3000."""
    first = c.reply(now_ms=0)
    c.feed(ce.PlaybackAck(response_id=first, played_ms=1200), 1300)
    assert c.core.ledger.basis == "acknowledged"
    return c.reply(now_ms=3000)


def test_grace_a_server_clear_takes_the_client_s_first_ack_within_the_grace() -> None:
    # Was: the server's clear cut at the last ACKed position of the reply (0: the page ACKs
    # when an answer ends or is cleared) and a cut was final, so the page's ACK with what it
    # played, 20 ms after `output_audio_buffer.cleared`, was ignored: 0 words kept.
    c = Client()
    rid = _acknowledging(c)
    out = c.feed(VadSpeechStarted(0), 3800)
    assert [e.response_id for e in of(out, se.OutputAudioBufferCleared)] == [rid]
    c.feed(ce.PlaybackAck(response_id=rid, played_ms=800), 3820)
    assert c.history(rid) == (conv.OutputAudio("Hello there, ", 800),)
    # The first ACK within the grace decides; the cut is final after it.
    c.feed(ce.PlaybackAck(response_id=rid, played_ms=1200), 3830)
    assert c.history(rid) == (conv.OutputAudio("Hello there, ", 800),)


def test_grace_an_ack_after_the_grace_changes_nothing() -> None:
    c = Client()
    rid = _acknowledging(c)
    c.feed(VadSpeechStarted(0), 3800)
    c.feed(ce.PlaybackAck(response_id=rid, played_ms=800), 3800 + 1001)
    assert c.history(rid) == ()  # the empty boundary: nothing acknowledged before the clear


def test_grace_an_ack_never_sets_the_cut_past_what_was_sent_before_the_clear() -> None:
    c = Client()
    first = c.reply(now_ms=0)
    c.feed(ce.PlaybackAck(response_id=first, played_ms=1200), 1300)
    rid = c.reply(now_ms=3000, words=WORDS[:2], done=False)  # 700 ms sent, still generating
    c.feed(VadSpeechStarted(0), 3500)
    c.feed(BackendAudio(rid, c.seq, b"\0" * MS * 500, "friend."), 3510)  # fenced off
    c.feed(ce.PlaybackAck(response_id=rid, played_ms=5000), 3520)
    assert c.history(rid) == (conv.OutputAudio("Hello there, ", 700),)


def test_playout_consecutive_replies_share_one_timeline_each_settled_at_its_own_end() -> None:
    # Was: one playout timer per session, re-armed by each reply (a later one's replaced an
    # earlier one's), and each reply's clock started when its own audio was sent, though
    # clients play replies back to back: the second reply's estimate ran ahead of playback.
    c = Client()
    first = c.reply(now_ms=0)  # 1200 ms, all sent at 0: played out at 1200
    [armed] = [a for a in of(c.done, ArmTimer) if a.kind == "playout"]
    assert armed.deadline_ms == 1200
    [start] = of(c.feed(ce.ResponseCreate(), 100), StartBackend)  # the client asks again
    for ms, text in WORDS:
        c.feed(BackendAudio(start.response_id, start.seq, b"\0" * MS * ms, text), 100)
    done = c.feed(BackendDone(start.response_id, start.seq), 100)
    [armed] = [a for a in of(done, ArmTimer) if a.kind == "playout"]
    assert armed.deadline_ms == 1200, "the first reply's end still comes first"
    assert c.core.ledger.playout_ends_at(start.response_id) == 2400, "after the first reply"
    fired = c.feed(TimerFired("playout", armed.token), 1200)
    [again] = [a for a in of(fired, ArmTimer) if a.kind == "playout"]
    assert again.deadline_ms == 2400
    assert c.core.ledger.played_out(first, 1200)
    # An ACK of the second switches the basis: the first, played out, keeps its history.
    c.feed(ce.PlaybackAck(response_id=start.response_id, played_ms=300), 1500)
    assert c.history(first) == (conv.OutputAudio("Hello there, friend.", 1200),)

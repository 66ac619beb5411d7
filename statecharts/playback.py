"""PlaybackChart: what the user heard of one reply (docs/protocol.md rule 5, its amendment, and
"History without acknowledgements").

The playback ledger (orchestrator/session/history/playback.py) keeps each reply's numbers: the
audio generated, the client's played cursor, the text marks, the playout clock, the grace's
deadline. This chart keeps what they mean: whether history holds the reply, how much of it,
who said so, and whether that can still change. It decides; the ledger computes the `Heard`
each effect asks for (`HearAll`, `HearUntil`, `HearNothing`). The response chart decides when
a reply is cut (a barge-in, a cancel, a failure, a truncate); this one decides what the cut
means. Three regions, in parallel:

`generation`: `sending` -> `complete` (`finish`), or `stopped` (a cut while sending).
1. Audio is taken only while `sending`; a stopped reply drops late audio (fencing may race a
   backend still streaming: what was cut stays cut). Only a `complete` reply can be heard in
   full.

`basis` (the session chart's heard_by region, per reply): `by_estimate` -> `by_ack`.
2. A reply starts `by_estimate` (OpenAI's: the client never says what it played) and moves to
   `by_ack` for good at `acknowledge` (the session's first `playback.ack`).

`heard` (what history holds; the point of a cut is the ledger's number):
3. `unheard` until the reply is complete: `finish` hears it in full at once `by_estimate`
   (`estimated`: the server's estimate; `played_out` when the playout clock has played it all
   already), and `by_ack` when the client's cursor covers it all (`heard_in_full`), else it
   waits (`unheard`) for the ACK that covers it all (`ack` with `acked_all`).
4. `played_out` (the playout clock reached the end) settles an estimate: `estimated` ->
   `played_out`.
5. The server's clear (a barge-in, a clear, a cancel, a failure: `clear`) of a reply not yet
   settled in full: `by_estimate` cuts at the playout clock's estimate (`cut_estimated`);
   `by_ack` cuts provisionally at the client's cursor (`cut_provisional`) and starts the grace
   (`StartGrace`). A reply already cut, or heard in full, keeps what it holds.
6. The client's first word within the grace sets a provisional cut: an ACK cuts at its cursor
   (`cut_by_ack`), a truncate at its point (`cut_by_truncate`). `grace_over` (the ledger's
   deadline passed, the caller's clock) makes the cursor's cut final (`cut_at_cursor`).
7. An estimate never stands below what the client says it played: an ACK past an estimated
   cut (`raises`) moves it up to the cursor, still an estimate.
8. The client's truncate (`truncate`, or an ACK with `truncate`) cuts at its point, final
   (`cut_by_truncate`), from every state but a final cut: it replaces an estimate, a
   provisional cut and a full hearing alike, as OpenAI's truncate rewrites any item.
9. At the switch (`acknowledge`) an estimate not yet played out goes back to `unheard`
   (`HearNothing`: rule 5 fills it on a full ACK or cuts it at the client's cursor), and so
   does a played-out one when the switching ACK names it (`this_reply`: the client's word on
   it is coming); any other played-out reply was heard in full before the client said
   anything (`heard_in_full`). An estimated cut stays one (rule 7 still raises it). So no
   reply is counted twice, and none the client never speaks of is lost.
10. `cut_by_ack`, `cut_by_truncate` and `cut_at_cursor` are final: no later ACK, cut, clear or
   audio changes them.
"""

from __future__ import annotations

from statemachine import State

from statecharts.base import Chart
from statecharts.effects import Effect, HearAll, HearNothing, HearUntil, StartGrace
from statecharts.playback_events import PlaybackEvent

__all__ = ["PlaybackChart"]

BY_ESTIMATE = "In('by_estimate')"
BY_ACK = "In('by_ack')"
COMPLETE = "In('complete')"


class PlaybackChart(Chart):
    """One reply's playback. Guards take the ledger's comparisons as arguments (`acked_all`:
    the client's cursor covers the audio generated; `clock_done`: the playout clock does;
    `raises`: the cursor is past the estimated cut); the points are its numbers too."""

    class reply(State.Parallel):
        class generation(State.Compound):
            sending = State(initial=True)
            complete = State()
            stopped = State()

            finish = sending.to(complete)
            # Rule 1: a cut while sending stops it (every event below that cuts).
            clear = sending.to(stopped)
            truncate = sending.to(stopped)
            ack = sending.to(stopped, cond="truncating")

        class basis(State.Compound):
            by_estimate = State(initial=True)
            by_ack = State()

            acknowledge = by_estimate.to(by_ack)  # rule 2

        class heard(State.Compound):
            unheard = State(initial=True)
            estimated = State()
            played_out = State()
            heard_in_full = State()
            cut_estimated = State()
            cut_provisional = State()
            cut_by_ack = State()
            cut_by_truncate = State()
            cut_at_cursor = State()

            # Rule 3.
            finish = (
                unheard.to(played_out, cond=[BY_ESTIMATE, "clock_done"], on="_hear_all")
                | unheard.to(estimated, cond=BY_ESTIMATE, on="_hear_all")
                | unheard.to(heard_in_full, cond="acked_all", on="_hear_all")
            )
            # Rule 8 before the others: a truncate decides whatever else the ACK says.
            ack = (
                unheard.to(cut_by_truncate, cond="truncating", on="_hear_cursor")
                | estimated.to(cut_by_truncate, cond="truncating", on="_hear_cursor")
                | played_out.to(cut_by_truncate, cond="truncating", on="_hear_cursor")
                | heard_in_full.to(cut_by_truncate, cond="truncating", on="_hear_cursor")
                | cut_estimated.to(cut_by_truncate, cond="truncating", on="_hear_cursor")
                | cut_provisional.to(cut_by_truncate, cond="truncating", on="_hear_cursor")
                | unheard.to(heard_in_full, cond=["acked_all", COMPLETE], on="_hear_all")
                | cut_provisional.to(cut_by_ack, on="_hear_cursor")  # rule 6
                | cut_estimated.to(cut_estimated, cond="raises", on="_hear_cursor")  # rule 7
            )
            # Rule 4.
            clock_played = estimated.to(played_out)
            # Rule 5.
            clear = (
                unheard.to(cut_estimated, cond=BY_ESTIMATE, on="_hear_estimate")
                | estimated.to(cut_estimated, cond=BY_ESTIMATE, on="_hear_estimate")
                | unheard.to(cut_provisional, cond=BY_ACK, on="_cut_provisionally")
            )
            grace_over = cut_provisional.to(cut_at_cursor)  # rule 6
            # Rule 8.
            truncate = (
                unheard.to(cut_by_truncate, on="_hear_point")
                | estimated.to(cut_by_truncate, on="_hear_point")
                | played_out.to(cut_by_truncate, on="_hear_point")
                | heard_in_full.to(cut_by_truncate, on="_hear_point")
                | cut_estimated.to(cut_by_truncate, on="_hear_point")
                | cut_provisional.to(cut_by_truncate, on="_hear_point")
            )
            # Rule 9.
            acknowledge = (
                estimated.to(unheard, on="_hear_nothing")
                | played_out.to(unheard, cond="this_reply", on="_hear_nothing")
                | played_out.to(heard_in_full)
            )

    # Guards (the ledger's comparisons, passed in) -------------------------------------
    def acked_all(self, acked_all: bool = False) -> bool:
        return acked_all

    def clock_done(self, clock_done: bool = False) -> bool:
        return clock_done

    def raises(self, raises: bool = False) -> bool:
        return raises

    def truncating(self, truncate: bool = False) -> bool:
        return truncate

    def this_reply(self, this_reply: bool = False) -> bool:
        return this_reply

    # Actions ----------------------------------------------------------------------------
    def _hear_all(self) -> None:
        self.emit(HearAll())

    def _hear_nothing(self) -> None:
        self.emit(HearNothing())

    def _hear_cursor(self, cursor_ms: int) -> None:
        self.emit(HearUntil(cursor_ms))

    def _hear_point(self, audio_end_ms: int) -> None:
        self.emit(HearUntil(audio_end_ms))

    def _hear_estimate(self, estimate_ms: int) -> None:
        self.emit(HearUntil(estimate_ms))

    def _cut_provisionally(self, cursor_ms: int) -> None:
        self.emit(HearUntil(cursor_ms))
        self.emit(StartGrace())

    def feed(self, event: PlaybackEvent) -> list[Effect]:
        """Feed one of this chart's typed events (statecharts/playback_events.py)."""
        return self._feed(event)

    # Queries (the ledger's hot path reads these, not the engine) ----------------------
    def _in(self, state_id: str) -> bool:
        return state_id in self.configuration_values

    @property
    def takes_audio(self) -> bool:
        """Rule 1: audio is still taken (`sending`)."""
        return self._in("sending")

    @property
    def is_complete(self) -> bool:
        return self._in("complete")

    @property
    def is_by_ack(self) -> bool:
        return self._in("by_ack")

    @property
    def is_settled(self) -> bool:
        """History holds something of the reply (no longer the empty boundary)."""
        return not self._in("unheard")

    @property
    def is_estimated(self) -> bool:
        """Rule 3: heard in full by the estimate, the playout clock still playing it."""
        return self._in("estimated")

    @property
    def is_played_out(self) -> bool:
        return self._in("played_out")

    @property
    def is_cut(self) -> bool:
        return any(self._in(s) for s in _CUTS)

    @property
    def is_final(self) -> bool:
        """Rule 10: nothing changes what history holds of it."""
        return any(self._in(s) for s in _FINAL)

    @property
    def is_in_grace(self) -> bool:
        return self._in("cut_provisional")


_FINAL = ("cut_by_ack", "cut_by_truncate", "cut_at_cursor")
_CUTS = ("cut_estimated", "cut_provisional", *_FINAL)

"""The playback ledger: the numbers behind what of each reply the client played (docs/protocol.md
rule 5, its amendment, and "History without acknowledgements").

What those numbers mean is decided by each reply's PlaybackChart (statecharts/playback.py, its
rules 1-10): whether history holds the reply, how much, who said so, whether it can still
change. The ledger keeps the numbers and does the arithmetic its guards take, then carries out
the chart's effects (`HearAll`, `HearUntil`, `HearNothing`, `StartGrace`) on the reply's
`Heard`. Its own rules:
1. One clock: every `now_ms` is the caller's (the session core's), the one the playout clock
   (orchestrator/session/history/playout.py) and the grace's deadline are on.
2. The played cursor of a response is monotonic (a backwards ACK moves nothing; a backwards
   ACK with `truncate` cuts at the cursor) and never exceeds the audio generated for it.
3. A cut holds the text aligned with audio that ends at or before its point; text that
   arrived unaligned (`set_transcript`) is only ever heard with the whole reply.
4. The grace is a deadline, not a timer: the first call about a reply at or past it tells the
   chart (`GraceOver`) before anything else, so the client's word after the grace comes too
   late however soon it is handled.
5. Memory is bounded: at most `max_entries` responses are tracked (the oldest settled one is
   evicted first), and an entry stores only the text-bearing chunk boundaries, not every chunk.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Literal

from orchestrator.session.history.playout import PlayoutClock
from statecharts import playback_events as pe
from statecharts.effects import Effect, HearAll, HearNothing, HearUntil, StartGrace
from statecharts.playback import PlaybackChart

HistoryBasis = Literal["generated", "acknowledged"]


@dataclass(frozen=True, slots=True)
class Segment:
    start_ms: int
    end_ms: int
    text: str


@dataclass(frozen=True, slots=True)
class Heard:
    audio_ms: int
    transcript: str
    full: bool


@dataclass(frozen=True, slots=True)
class AckResult:
    response_id: str
    item_id: str
    played_ms: int
    committed_ms: int
    history_committed: bool
    heard: Heard | None  # set exactly when this ACK changed what history holds for the reply


class PlaybackItemNotFound(KeyError):
    def __init__(self, response_id: str) -> None:
        super().__init__(response_id)
        self.response_id = response_id


class PlaybackItemMismatch(ValueError):
    def __init__(self, response_id: str, item_id: str) -> None:
        super().__init__(response_id, item_id)
        self.response_id = response_id
        self.item_id = item_id


@dataclass(slots=True)
class _Entry:
    item_id: str
    chart: PlaybackChart
    generated_ms: int = 0
    played_ms: int = 0
    transcript: str | None = None
    # (end_ms, text) of chunks that carry text; audio-only chunks need no record, which keeps an
    # entry small however many 20 ms chunks a reply has.
    marks: list[tuple[int, str]] = field(default_factory=list)
    committed: Heard | None = None  # what history holds (the chart's last `Hear*`)
    clock: PlayoutClock = field(default_factory=PlayoutClock)
    # The deadline of a provisional cut's grace (rule 4; the caller's ms).
    grace_until: int | None = None

    def full_heard(self) -> Heard:
        text = self.transcript
        if text is None:
            text = "".join(t for _, t in self.marks)
        return Heard(self.generated_ms, text, True)


class PlaybackLedger:
    def __init__(
        self, max_entries: int = 64, basis: HistoryBasis = "acknowledged", ack_grace_ms: int = 1000
    ) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self._max_entries = max_entries
        self.ack_grace_ms = ack_grace_ms
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        # The session's basis, for the charts of replies still to come (each chart keeps its
        # own once told: statecharts/playback.py rule 2).
        self.basis: HistoryBasis = basis

    def acknowledge(self, response_id: str) -> tuple[str, ...]:
        """The client acknowledges playback (of `response_id`): rule 5 decides from now on, for
        good. Returns the replies whose estimated full commit is withdrawn (their history is
        the empty boundary again until rule 5 settles them: the chart's rule 9)."""
        if self.basis == "acknowledged":
            return ()
        self.basis = "acknowledged"
        withdrawn: list[str] = []
        for rid, entry in self._entries.items():
            effects = entry.chart.feed(pe.Acknowledge(this_reply=rid == response_id))
            self._carry_out(entry, effects, now_ms=0)
            if any(isinstance(effect, HearNothing) for effect in effects):
                withdrawn.append(rid)
        return tuple(withdrawn)

    def __contains__(self, response_id: object) -> bool:
        return response_id in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def _entry(self, response_id: str) -> _Entry:
        try:
            return self._entries[response_id]
        except KeyError:
            raise PlaybackItemNotFound(response_id) from None

    def open(self, response_id: str, item_id: str) -> tuple[str, ...]:
        """Track a new response; returns the ids evicted to stay within `max_entries`."""
        if response_id in self._entries:
            raise ValueError(f"response {response_id!r} is already tracked")
        evicted: list[str] = []
        while len(self._entries) >= self._max_entries:
            # Settled entries only answer late ACKs; unsettled ones still decide history, so
            # they go last (their reply then stays an empty boundary).
            victim = next(
                (rid for rid, e in self._entries.items() if e.chart.is_settled),
                next(iter(self._entries)),
            )
            del self._entries[victim]
            evicted.append(victim)
        # playout.py rule 4: after the reply still playing (not cut, not paused), if any.
        ends = [e.clock.ends_at() for e in self._entries.values() if not e.chart.is_cut]
        start_at = max((end for end in ends if end is not None), default=0)
        chart = PlaybackChart()
        if self.basis == "acknowledged":
            chart.feed(pe.Acknowledge())  # nothing to withdraw: it holds nothing yet
        self._entries[response_id] = _Entry(item_id, chart, clock=PlayoutClock(start_at=start_at))
        return tuple(evicted)

    def append(self, response_id: str, audio_ms: int, text: str = "", now_ms: int = 0) -> Segment:
        """`audio_ms` of audio (with the text whose audio ends in it) sent at `now_ms`."""
        entry = self._entry(response_id)
        if audio_ms < 0:
            raise ValueError("audio_ms must not be negative")
        if not entry.chart.takes_audio:
            if entry.chart.is_complete and not entry.chart.is_cut:
                raise ValueError(f"response {response_id!r} already finished generating")
            # The chart's rule 1: fencing may race a backend still streaming.
            return Segment(entry.generated_ms, entry.generated_ms, "")
        start = entry.generated_ms
        entry.generated_ms += audio_ms
        entry.clock.send(now_ms, audio_ms)
        if text:
            entry.marks.append((entry.generated_ms, text))
        return Segment(start, entry.generated_ms, text)

    def set_transcript(self, response_id: str, text: str) -> None:
        """The full transcript, for backends without per-chunk alignment; call before `finish`."""
        entry = self._entry(response_id)
        if not entry.chart.is_settled:
            entry.transcript = text

    def finish(self, response_id: str, now_ms: int = 0) -> Heard | None:
        """Generation ended. Returns the Heard when this commits the reply in full."""
        entry = self._entry(response_id)
        self._expire(entry, now_ms)
        effects = entry.chart.feed(
            pe.Finish(
                acked_all=entry.played_ms >= entry.generated_ms,
                clock_done=entry.clock.played(now_ms) >= entry.generated_ms,
            )
        )
        self._carry_out(entry, effects, now_ms)
        return entry.committed if effects else None

    def ack(
        self,
        response_id: str,
        played_ms: int,
        item_id: str | None = None,
        truncate: bool = False,
        now_ms: int = 0,
    ) -> AckResult:
        entry = self._entry(response_id)
        if item_id is not None and item_id != entry.item_id:
            raise PlaybackItemMismatch(response_id, item_id)
        if played_ms < 0:
            raise ValueError("played_ms must not be negative")
        entry.played_ms = max(entry.played_ms, min(played_ms, entry.generated_ms))  # rule 2
        self._expire(entry, now_ms)
        before = entry.committed
        event = pe.Ack(
            cursor_ms=entry.played_ms,
            acked_all=entry.played_ms >= entry.generated_ms,
            truncate=truncate,
            raises=before is not None and entry.played_ms > before.audio_ms,
        )
        self._carry_out(entry, entry.chart.feed(event), now_ms)
        committed = entry.committed
        return AckResult(
            response_id=response_id,
            item_id=entry.item_id,
            played_ms=entry.played_ms,
            committed_ms=committed.audio_ms if committed is not None else 0,
            history_committed=committed is not None,
            heard=committed if committed != before else None,
        )

    def cut(self, response_id: str, audio_end_ms: int, now_ms: int = 0) -> Heard:
        """The client's cut (`conversation.item.truncate`): the chart's rule 8."""
        return self._truncate(self._entry(response_id), audio_end_ms, now_ms)

    def cut_by_item(self, item_id: str, audio_end_ms: int, now_ms: int = 0) -> Heard | None:
        """`conversation.item.truncate`: None when no tracked response owns the item."""
        for entry in self._entries.values():
            if entry.item_id == item_id:
                return self._truncate(entry, audio_end_ms, now_ms)
        return None

    def clear(self, response_id: str, now_ms: int = 0) -> Heard:
        """The server's clear (a barge-in, a clear, a cancel, a failure): the chart's rule 5
        picks the playout clock's estimate at `now_ms` (never below the cursor) or the
        client's cursor, provisionally."""
        entry = self._entry(response_id)
        self._expire(entry, now_ms)
        estimate = max(entry.clock.played(now_ms), entry.played_ms)
        effects = entry.chart.feed(pe.Clear(estimate_ms=estimate, cursor_ms=entry.played_ms))
        self._carry_out(entry, effects, now_ms)
        assert entry.committed is not None  # every state a clear leaves alone holds one
        return entry.committed

    def _truncate(self, entry: _Entry, audio_end_ms: int, now_ms: int) -> Heard:
        if audio_end_ms < 0:
            raise ValueError("audio_end_ms must not be negative")
        self._expire(entry, now_ms)
        self._carry_out(entry, entry.chart.feed(pe.Truncate(audio_end_ms=audio_end_ms)), now_ms)
        assert entry.committed is not None  # a final cut holds one; any other is cut now
        return entry.committed

    def _expire(self, entry: _Entry, now_ms: int) -> None:
        """Rule 4: a grace whose deadline passed ends before the call that finds it."""
        if entry.grace_until is not None and now_ms >= entry.grace_until:
            entry.grace_until = None
            self._carry_out(entry, entry.chart.feed(pe.GraceOver()), now_ms)

    def _carry_out(self, entry: _Entry, effects: list[Effect], now_ms: int) -> None:
        for effect in effects:
            if isinstance(effect, HearAll):
                entry.committed = entry.full_heard()
            elif isinstance(effect, HearUntil):
                entry.committed = self._heard_until(entry, effect.audio_end_ms)
            elif isinstance(effect, HearNothing):
                entry.committed = None
            elif isinstance(effect, StartGrace):
                entry.grace_until = now_ms + self.ack_grace_ms
        if not entry.chart.is_in_grace:
            entry.grace_until = None

    @staticmethod
    def _heard_until(entry: _Entry, audio_end_ms: int) -> Heard:
        """Rule 3."""
        point = min(audio_end_ms, entry.generated_ms)
        if entry.chart.is_complete and point >= entry.generated_ms:
            return entry.full_heard()
        return Heard(point, "".join(t for end, t in entry.marks if end <= point), False)

    # The playout clock (the `generated` basis) -----------------------------------------
    def played_out(self, response_id: str, now_ms: int) -> bool:
        """Whether the playout clock has played the whole reply, heard by the estimate, by
        `now_ms` (the chart's rule 4: it is settled then)."""
        entry = self._entry(response_id)
        if entry.chart.is_estimated and entry.clock.played(now_ms) >= entry.generated_ms:
            entry.chart.feed(pe.ClockPlayed())
        return entry.chart.is_played_out

    def awaits_playout(self, response_id: str) -> bool:
        """Whether the playout clock is yet to settle this reply (`played_out` will, once its
        audio has played)."""
        entry = self._entries.get(response_id)
        return entry is not None and entry.chart.is_estimated

    def playout_ends_at(self, response_id: str) -> int | None:
        """When the playout clock will have played all audio sent (None while paused)."""
        return self._entry(response_id).clock.ends_at()

    def unplayed_ms(self, response_id: str, now_ms: int) -> int:
        """Audio sent that the playout clock has not played by `now_ms`."""
        entry = self._entry(response_id)
        return max(0, entry.generated_ms - entry.clock.played(now_ms))

    def pause(self, response_id: str, now_ms: int) -> None:
        if response_id in self._entries:
            self._entries[response_id].clock.pause(now_ms)

    def resume(self, response_id: str, now_ms: int) -> None:
        if response_id in self._entries:
            self._entries[response_id].clock.resume(now_ms)

    def is_settled(self, response_id: str) -> bool:
        return self._entry(response_id).chart.is_settled

    def fully_played(self, response_id: str) -> bool:
        committed = self._entry(response_id).committed
        return committed is not None and committed.full

    def heard(self, response_id: str) -> Heard | None:
        return self._entry(response_id).committed

    def item_id(self, response_id: str) -> str:
        return self._entry(response_id).item_id

    def played_ms(self, response_id: str) -> int:
        return self._entry(response_id).played_ms

    def generated_ms(self, response_id: str) -> int:
        return self._entry(response_id).generated_ms

    def pending_audio(self, response_id: str, now_ms: int = 0) -> bool:
        """Audio generated but not yet played: by the playout clock at `now_ms` while the
        estimate stands, else by the client's cursor while history holds nothing of it."""
        entry = self._entry(response_id)
        if entry.chart.is_estimated:
            return entry.clock.played(now_ms) < entry.generated_ms
        return not entry.chart.is_settled and entry.generated_ms > entry.played_ms

"""The playback ledger: what of each reply the client actually played (docs/protocol.md rule 5).

Two bases for what was heard (docs/protocol.md "History without acknowledgements"):
- `generated` (OpenAI's, where a session starts): the client never says what it played, so a
  reply counts as heard once generated (committed in full at `finish`), and the playout clock
  (orchestrator/session/history/playout.py) stands in for the client: a barge-in or clear cuts the
  reply at
  the clock's estimate, never below the client's own cursor. Every such commit is an
  estimate: the client's `conversation.item.truncate` replaces it; an ACK raises it to what
  the client says it played, never lowers it.
- `acknowledged` (rule 5 as written): from the first `playback.ack` on (`acknowledge`), what
  the client acknowledges decides, and the guarantees below hold. At the switch a reply whose
  estimated full commit is not yet played out by the clock, and the acknowledged reply itself,
  go back to uncommitted (rule 5 fills them on a full ACK or cuts them at the client's
  cursor); any other reply already played out or cut keeps its history. So no reply is
  counted twice, and none the client never speaks of is lost.

Guarantees (`acknowledged`; in `generated` they hold for the client's own words):
- The played cursor of a response is monotonic (a backwards ACK is ignored, not an error,
  a backwards ACK with `truncate` too: it cuts at the cursor) and never exceeds the audio
  generated for it.
- A reply is committed in full only when generation has finished and the played cursor covers
  all generated audio; a finished reply with no audio (text only) is committed at `finish`.
- A cut (`cut`, `clear`, `cut_by_item`, or an ACK with `truncate`) commits the reply at
  min(cut point, generated audio) and is final: no later ACK, cut or audio changes it. One
  amendment (docs/protocol.md rule 5): the server's own clear (a barge-in, a cancel) cuts
  provisionally at the played cursor, and the client's first ACK or truncate of that reply
  within `ack_grace_ms` of the clear sets the cut to what it reports (never past the audio
  generated before the clear); then, or once the grace has passed, the cut is final. A client
  that ACKs when playback ends or is cleared (the page) tells what it played just after the
  server's clear, not before it: without the grace, its reply would keep the cursor of its
  last ACK (often 0 words).
- The transcript of a cut reply holds only the text aligned with audio that ends at or before
  the cut; text that arrived unaligned (`set_transcript`) is dropped on a cut.
- Memory is bounded: at most `max_entries` responses are tracked (the oldest settled one is
  evicted first), and an entry stores only the text-bearing chunk boundaries, not every chunk.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Literal

from orchestrator.session.history.playout import PlayoutClock

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
    generated_ms: int = 0
    played_ms: int = 0
    finished: bool = False
    transcript: str | None = None
    # (end_ms, text) of chunks that carry text; audio-only chunks need no record, which keeps an
    # entry small however many 20 ms chunks a reply has.
    marks: list[tuple[int, str]] = field(default_factory=list)
    committed: Heard | None = None
    cut: bool = False
    # The commit is the server's estimate (the `generated` basis): the client's truncate or
    # ACK may still replace it. A client's own word (a truncate, an ACK) is final.
    estimated: bool = False
    # The playout clock reached the end of the generated audio (the `generated` basis).
    played_out: bool = False
    clock: PlayoutClock = field(default_factory=PlayoutClock)
    # The server's clear on the `acknowledged` basis: provisional until then (caller's ms).
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
        self.basis: HistoryBasis = basis

    def acknowledge(self, response_id: str) -> tuple[str, ...]:
        """The client acknowledges playback (of `response_id`): rule 5 decides from now on, for
        good. Returns the replies whose estimated full commit is withdrawn (their history is
        the empty boundary again until rule 5 settles them): every one the playout clock has
        not played out, and the acknowledged one whatever the clock said (the client's word
        on it is coming)."""
        if self.basis == "acknowledged":
            return ()
        self.basis = "acknowledged"
        withdrawn: list[str] = []
        for rid, entry in self._entries.items():
            if entry.committed is not None and entry.estimated and not entry.cut:
                if entry.played_out and rid != response_id:
                    entry.estimated = False  # heard in full before the client said anything
                else:
                    entry.committed, entry.estimated = None, False
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
                (rid for rid, e in self._entries.items() if e.committed is not None),
                next(iter(self._entries)),
            )
            del self._entries[victim]
            evicted.append(victim)
        # playout.py rule 4: after the reply still playing (not cut, not paused), if any.
        ends = [e.clock.ends_at() for e in self._entries.values() if not e.cut]
        start_at = max((end for end in ends if end is not None), default=0)
        self._entries[response_id] = _Entry(item_id, clock=PlayoutClock(start_at=start_at))
        return tuple(evicted)

    def append(self, response_id: str, audio_ms: int, text: str = "", now_ms: int = 0) -> Segment:
        """`audio_ms` of audio (with the text whose audio ends in it) sent at `now_ms`."""
        entry = self._entry(response_id)
        if audio_ms < 0:
            raise ValueError("audio_ms must not be negative")
        if entry.cut:
            # Fencing may race a backend that is still streaming; what was cut stays cut.
            return Segment(entry.generated_ms, entry.generated_ms, "")
        if entry.finished:
            raise ValueError(f"response {response_id!r} already finished generating")
        start = entry.generated_ms
        entry.generated_ms += audio_ms
        entry.clock.send(now_ms, audio_ms)
        if text:
            entry.marks.append((entry.generated_ms, text))
        return Segment(start, entry.generated_ms, text)

    def set_transcript(self, response_id: str, text: str) -> None:
        """The full transcript, for backends without per-chunk alignment; call before `finish`."""
        entry = self._entry(response_id)
        if entry.committed is None:
            entry.transcript = text

    def finish(self, response_id: str, now_ms: int = 0) -> Heard | None:
        """Generation ended. Returns the Heard when this commits the reply in full."""
        entry = self._entry(response_id)
        if entry.finished:
            return None
        entry.finished = True
        if self.basis == "generated" and entry.committed is None:
            # OpenAI's: remembered once generated; an estimate until the client says more.
            entry.committed, entry.estimated = entry.full_heard(), True
            entry.played_out = entry.clock.played(now_ms) >= entry.generated_ms
            return entry.committed
        # Covers text-only replies (0 ms) and a client whose full ACK raced ahead of the end.
        if entry.committed is None and entry.played_ms >= entry.generated_ms:
            entry.committed = entry.full_heard()
            return entry.committed
        return None

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
        entry.played_ms = max(entry.played_ms, min(played_ms, entry.generated_ms))
        heard: Heard | None = None
        before = entry.committed
        if self._in_grace(entry, now_ms) or truncate:
            # A truncate, or the client's first word after the server's clear (the
            # amendment): a cut at the cursor (a backwards ACK is ignored).
            after = self._cut(entry, entry.played_ms)
            heard = after if after != before else None
        elif entry.committed is None and entry.finished and entry.played_ms >= entry.generated_ms:
            entry.committed = heard = entry.full_heard()
        elif entry.cut and entry.estimated and before is not None:
            # An estimated cut never stands below what the client says it played.
            if entry.played_ms > before.audio_ms:
                after = self._estimate_cut(entry, entry.played_ms)
                heard = after if after != before else None
        committed = entry.committed
        return AckResult(
            response_id=response_id,
            item_id=entry.item_id,
            played_ms=entry.played_ms,
            committed_ms=committed.audio_ms if committed is not None else 0,
            history_committed=committed is not None,
            heard=heard,
        )

    def cut(self, response_id: str, audio_end_ms: int, now_ms: int = 0) -> Heard:
        """The client's cut (`conversation.item.truncate`): final, and it replaces an
        estimate (a provisional cut only within its grace)."""
        entry = self._entry(response_id)
        self._in_grace(entry, now_ms)
        return self._cut(entry, audio_end_ms)

    def cut_by_item(self, item_id: str, audio_end_ms: int, now_ms: int = 0) -> Heard | None:
        """`conversation.item.truncate`: None when no tracked response owns the item."""
        for entry in self._entries.values():
            if entry.item_id == item_id:
                self._in_grace(entry, now_ms)
                return self._cut(entry, audio_end_ms)
        return None

    def clear(self, response_id: str, now_ms: int = 0) -> Heard:
        """The client's buffer was cleared (a barge-in, a clear, a cancel): the user heard up
        to the played cursor, provisionally for `ack_grace_ms` (the amendment above); on the
        `generated` basis, up to the playout clock's estimate at `now_ms` (never below the
        cursor)."""
        entry = self._entry(response_id)
        if entry.cut and entry.committed is not None:
            if not entry.estimated or entry.grace_until is not None:
                # Final, or provisional already: only the client's word moves it.
                return entry.committed
        if self.basis == "generated":
            point = max(entry.clock.played(now_ms), entry.played_ms)
            return self._estimate_cut(entry, point)
        heard = self._estimate_cut(entry, entry.played_ms)
        entry.grace_until = now_ms + self.ack_grace_ms
        return heard

    def _in_grace(self, entry: _Entry, now_ms: int) -> bool:
        """Whether the client's word now still sets a provisional cut; a grace that has passed,
        or is used by this call, makes the cut final."""
        if entry.grace_until is None:
            return False
        within = now_ms < entry.grace_until
        entry.grace_until = None
        entry.estimated = within  # within: `_cut` replaces it (and makes it final)
        return within

    def _estimate_cut(self, entry: _Entry, point: int) -> Heard:
        heard = self._heard_until(entry, point)
        entry.cut, entry.estimated, entry.committed = True, True, heard
        return heard

    def _cut(self, entry: _Entry, audio_end_ms: int) -> Heard:
        if audio_end_ms < 0:
            raise ValueError("audio_end_ms must not be negative")
        if entry.cut and entry.committed is not None and not entry.estimated:
            return entry.committed
        heard = self._heard_until(entry, audio_end_ms)
        entry.cut, entry.estimated, entry.committed = True, False, heard
        return heard

    @staticmethod
    def _heard_until(entry: _Entry, audio_end_ms: int) -> Heard:
        point = min(audio_end_ms, entry.generated_ms)
        if entry.finished and point >= entry.generated_ms:
            return entry.full_heard()
        return Heard(point, "".join(t for end, t in entry.marks if end <= point), False)

    # The playout clock (the `generated` basis) -----------------------------------------
    def played_out(self, response_id: str, now_ms: int) -> bool:
        """Whether the playout clock has played the whole finished reply by `now_ms`; marks
        it so (the reply is settled on the `generated` basis)."""
        entry = self._entry(response_id)
        if not self._clock_settles(entry):
            return False
        if not entry.played_out and entry.clock.played(now_ms) >= entry.generated_ms:
            entry.played_out = True
        return entry.played_out

    def awaits_playout(self, response_id: str) -> bool:
        """Whether the playout clock is yet to settle this reply (`played_out` will, once its
        audio has played)."""
        entry = self._entries.get(response_id)
        return entry is not None and self._clock_settles(entry) and not entry.played_out

    def _clock_settles(self, entry: _Entry) -> bool:
        """The playout clock settles a reply on the `generated` basis, generated in full and
        not cut."""
        return self.basis == "generated" and entry.finished and not entry.cut

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
        return self._entry(response_id).committed is not None

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
        """Audio generated but not yet played (acknowledged, or on the `generated` basis by the
        playout clock at `now_ms`), and the reply not settled."""
        entry = self._entry(response_id)
        if self.basis == "generated" and entry.estimated:
            return not entry.cut and entry.clock.played(now_ms) < entry.generated_ms
        return entry.committed is None and entry.generated_ms > entry.played_ms

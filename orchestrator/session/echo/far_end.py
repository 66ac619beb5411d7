"""The far-end reference: the session's own output audio, placed on the input timeline.

An echo canceller subtracts what the loudspeaker played from what the microphone heard; it
needs the played audio sample for sample beside the input. The server knows what it sent;
this places it where the client plays it, with the input itself as the clock.

Rules:
1. The clock is the input: a position counts input samples since the session started (a far
   end made mid-session starts at the input's position then: `position`), and
   `take(n)` hands out the reference for the next `n` input samples (silence where nothing
   plays) and moves the position on. No wall clock here: the client's audio arrives at real
   time, so its sample count is the session's time as the client lived it; where the client
   stood when a delta went out (`at`) is the caller's to say (input_clock.py), else the
   position.
2. Output audio plays at real time (one output sample per input sample: both are at the
   input rate) in the order it was sent, as one stream over every response. It starts at the
   position where it was sent (`at`, never before the current position); when what was sent
   runs out (an underrun: the backend was slower than real time), playback waits, and the
   next audio sent starts again at the position where it is sent.
   - Unless it comes within `slack` samples of running out: a backend that streams at real
     time sends each delta a little after the last one ran out on the input clock (the clock
     moves in whole appends, the event loop runs late), while the client plays on from its
     jitter buffer without a break. Then the audio plays on in step with the client: the
     samples that were due while it was late are skipped (the reference was silent for them,
     as it cannot hand them out again) and the rest plays where it would have. Starting it
     again where it was sent would put every later sample that much after the client's
     playback, a little more at each late delta, until the reference came after the echo
     itself, which no canceller can take out.
3. A pause (pause mode's `output_audio_buffer.paused`) holds the stream where it stands: the
   reference is silent meanwhile; a resume plays on from the same sample, from the position
   of the resume.
4. A clear (an interruption, a cancel, a truncate) of the response playing drops everything
   not yet played at once: from the current position the reference is silent, until audio is
   sent again. A clear of a response none of whose audio waits any more (a client's late
   truncate of a reply that has played out) drops nothing: the next reply's audio is not its.
5. A client that acknowledges playback corrects the placement when it is far off:
   `played(response, ms)` says the client had played `ms` of that response at the current
   position; if the reference is more than `tolerance` samples from there (an underrun the
   server did not see, a client that started late), the rest of it (and what follows) moves so
   that it is not. A smaller difference is left alone: the canceller's own delay estimator
   follows a steady offset (capture and transport latency, an ACK's own lateness), and a
   reference moved long after the client's playback moved makes it learn the echo path twice
   (once when the echo moved, once when the reference follows). Unless ACKs come often
   (within `frequent` samples of the one before) and say where on the input timeline they
   were read (`exact`: the ACK's `input_ms`; a position the server estimates is as late as
   the ACK waited on its way, and following that noise would move the reference at every
   ACK): then each lands just after the client's
   player moved (a stall of one of its ticks), the reference follows at once and the echo
   path the canceller learnt stays as it was, so any difference over `fine_tolerance` is
   corrected (bench/echo.py: false barge-ins from echo alone fell from 5-25% to 0% offline
   with ACKs every 20-100 ms). The last move is kept (`moved_at`, where on the input
   timeline; `moved_by`, samples later, negative if earlier) for the echo verdicts: the
   canceller and echo/double_talk.py's filter both learnt the path before it.
6. Bounded: at most `max_ahead` samples wait to be played; audio sent beyond that is dropped
   (a client cannot buffer minutes of answer ahead of its playback anyway).

Pure: numbers and arrays in and out; no clock, no I/O.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from orchestrator.session.echo.processors import Pcm

__all__ = ["FarEnd"]


@dataclass(slots=True)
class _Segment:
    response_id: str
    samples: Pcm
    offset: int  # samples of this response before this segment (rule 5)


class FarEnd:
    __slots__ = (
        "_fine_tolerance",
        "_frequent",
        "_last_ack",
        "_max_ahead",
        "_paused",
        "_pending",
        "_queued",
        "_ran_out",
        "_slack",
        "_start",
        "_tolerance",
        "moved_at",
        "moved_by",
        "position",
    )

    def __init__(
        self,
        max_ahead: int,
        tolerance: int = 0,
        slack: int = 0,
        fine_tolerance: int | None = None,
        frequent: int = 0,
        position: int = 0,
    ) -> None:
        self._max_ahead = max_ahead
        self._tolerance = tolerance
        self._slack = slack
        self._fine_tolerance = tolerance if fine_tolerance is None else fine_tolerance
        self._frequent = frequent
        self._last_ack: int | None = None  # rule 5: where the last ACK was read
        # Where what was sent last ran out (rule 2's slack); None once a pause or clear
        # stopped the client's playback too.
        self._ran_out: int | None = None
        self.position = position  # rule 1
        self._pending: deque[_Segment] = deque()
        self._queued = 0  # samples in _pending
        # Where the head of _pending plays; None while nothing plays (rule 2's wait, rule 3).
        self._start: int | None = None
        self._paused = False
        self.moved_at: int | None = None  # rule 5: the last move, where and by how much
        self.moved_by = 0

    @property
    def queued(self) -> int:
        return self._queued

    def sent(self, response_id: str, samples: Pcm, offset: int, at: int | None = None) -> None:
        """`samples` of `response_id`'s audio went out now, when the client's input stands at
        sample `at` (input_clock.py; the position when not known, never before it); `offset`
        of its samples went before them (rules 2 and 6)."""
        room = self._max_ahead - self._queued
        if room <= 0 or samples.size == 0:
            return
        samples = samples[:room]
        self._pending.append(_Segment(response_id, samples, offset))
        self._queued += samples.size
        if self._start is None and not self._paused:
            now = self.position if at is None else max(self.position, at)
            ran_out = self._ran_out
            late = 0 if ran_out is None else now - ran_out
            if ran_out is not None and 0 < late <= self._slack:
                skipped = min(late, self._queued)
                self._skip(skipped)
                if not self._pending:
                    self._ran_out = ran_out + skipped  # all of it was due already: ran out
                    return
            self._start = now

    def pause(self) -> None:
        """Rule 3."""
        self._paused = True
        self._start = None
        self._ran_out = None

    def resume(self, at: int | None = None) -> None:
        self._paused = False
        if self._pending and self._start is None:
            self._start = self.position if at is None else max(self.position, at)

    def clear(self, response_id: str | None = None) -> None:
        """Rule 4: `response_id`'s audio is cleared (None: whatever plays)."""
        if response_id is not None and all(s.response_id != response_id for s in self._pending):
            return
        self._pending.clear()
        self._queued = 0
        self._start = None
        self._ran_out = None

    def played(
        self, response_id: str, ms: int, rate: int, at: int | None = None, exact: bool = False
    ) -> None:
        """Rule 5: the client had played `ms` of `response_id` when its input stood at sample
        `at` (the position when not known); `exact`: the client said so itself."""
        if self._paused or self._start is None or not self._pending:
            return
        head = self._pending[0]
        if head.response_id != response_id:
            return
        now = self.position if at is None else max(self.position, at)
        often = exact and self._last_ack is not None and 0 <= now - self._last_ack <= self._frequent
        self._last_ack = now if exact else None
        theirs = int(ms) * rate // 1000
        # The head's first sample plays at `_start`: at `now` the reference is at sample
        # `ours` of the response.
        ours = head.offset + (now - self._start)
        if abs(theirs - ours) <= (self._fine_tolerance if often else self._tolerance):
            return
        start = self._start + (ours - theirs)
        self.moved_at, self.moved_by = now, ours - theirs
        if start < self.position:
            # The client is ahead: what it has played already is not played again.
            self._skip(self.position - start)
            self._start = self.position if self._pending else None
        else:
            # The client is behind: the rest plays that much later (what was handed out early
            # cannot be handed out again; the canceller adapts over that stretch).
            self._start = start

    def take(self, n: int) -> Pcm:
        """Rule 1: the reference for the next `n` input samples."""
        out = np.zeros(n, np.int16)
        begin = self.position
        self.position += n
        if self._start is None or self._paused:
            return out
        at = self._start - begin
        if at < 0:
            # Never after a take (it leaves `_start` at the position), kept for safety.
            self._skip(-at)
            at = 0
        while at < n and self._pending:
            m = min(n - at, self._pending[0].samples.size)
            out[at : at + m] = self._pending[0].samples[:m]
            self._consume(m)
            at += m
        if not self._pending:
            if self._start is not None and at > 0:
                self._ran_out = begin + at
            self._start = None  # rule 2: an underrun waits for the next audio sent
        else:
            # Filled to the end of this chunk, or scheduled after it: the head plays on there.
            self._start = max(self._start, self.position)
        return out

    def _skip(self, count: int) -> None:
        while count > 0 and self._pending:
            head = self._pending[0]
            m = min(count, head.samples.size)
            self._consume(m)
            count -= m

    def _consume(self, m: int) -> None:
        head = self._pending[0]
        if m >= head.samples.size:
            self._pending.popleft()
        else:
            self._pending[0] = _Segment(head.response_id, head.samples[m:], head.offset + m)
        self._queued -= m

"""The far-end reference: the session's own output audio, placed on the input timeline.

An echo canceller subtracts what the loudspeaker played from what the microphone heard; it
needs the played audio sample for sample beside the input. The server knows what it sent;
this places it where the client plays it, with the input itself as the clock.

Rules:
1. The clock is the input: a position counts input samples since the session started, and
   `take(n)` hands out the reference for the next `n` input samples (silence where nothing
   plays) and moves the position on. No wall clock: the client's audio arrives at real time,
   so its sample count is the session's time as the client lived it.
2. Output audio plays at real time (one output sample per input sample: both are at the
   input rate) in the order it was sent, as one stream over every response. It starts at the
   position where it was sent; when what was sent runs out (an underrun: the backend was
   slower than real time), playback waits, and the next audio sent starts again at the
   position where it is sent.
3. A pause (pause mode's `output_audio_buffer.paused`) holds the stream where it stands: the
   reference is silent meanwhile; a resume plays on from the same sample, from the position
   of the resume.
4. A clear (an interruption, a cancel, a truncate) drops everything not yet played at once:
   from the current position the reference is silent, until audio is sent again.
5. A client that acknowledges playback corrects the placement when it is far off:
   `played(response, ms)` says the client had played `ms` of that response at the current
   position; if the reference is more than `tolerance` samples from there (an underrun the
   server did not see, a client that started late), the rest of it (and what follows) moves so
   that it is not. A smaller difference is left alone: the canceller's own delay estimator
   follows a steady offset (capture and transport latency, an ACK's own lateness), and moving
   the reference by a few ms at every ACK would make it learn the echo path again each time.
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
    __slots__ = ("_max_ahead", "_paused", "_pending", "_queued", "_start", "_tolerance", "position")

    def __init__(self, max_ahead: int, tolerance: int = 0) -> None:
        self._max_ahead = max_ahead
        self._tolerance = tolerance
        self.position = 0  # rule 1
        self._pending: deque[_Segment] = deque()
        self._queued = 0  # samples in _pending
        # Where the head of _pending plays; None while nothing plays (rule 2's wait, rule 3).
        self._start: int | None = None
        self._paused = False

    @property
    def queued(self) -> int:
        return self._queued

    def sent(self, response_id: str, samples: Pcm, offset: int) -> None:
        """`samples` of `response_id`'s audio went out now; `offset` of its samples went
        before them (rules 2 and 6)."""
        room = self._max_ahead - self._queued
        if room <= 0 or samples.size == 0:
            return
        samples = samples[:room]
        self._pending.append(_Segment(response_id, samples, offset))
        self._queued += samples.size
        if self._start is None and not self._paused:
            self._start = self.position

    def pause(self) -> None:
        """Rule 3."""
        self._paused = True
        self._start = None

    def resume(self) -> None:
        self._paused = False
        if self._pending and self._start is None:
            self._start = self.position

    def clear(self) -> None:
        """Rule 4."""
        self._pending.clear()
        self._queued = 0
        self._start = None

    def played(self, response_id: str, ms: int, rate: int) -> None:
        """Rule 5: the client had played `ms` of `response_id` by now."""
        if self._paused or self._start is None or not self._pending:
            return
        head = self._pending[0]
        if head.response_id != response_id:
            return
        theirs = int(ms) * rate // 1000
        # The head's first sample plays at `_start` (at or after the position): the reference
        # is at sample `head.offset - delay` of the response now.
        delay = max(0, self._start - self.position)
        if abs(theirs - (head.offset - delay)) <= self._tolerance:
            return
        if theirs > head.offset:
            # The client is ahead: what it has played already is not played again.
            self._skip(theirs - head.offset)
            self._start = self.position if self._pending else None
        else:
            # The client is behind: the rest plays that much later (what was handed out early
            # cannot be handed out again; the canceller adapts over that stretch).
            self._start = self.position + (head.offset - theirs)

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

"""The playout clock: the server's own estimate of how much of a reply the client has played.

Used for clients that never acknowledge playback (docs/protocol.md "History without
acknowledgements"): the `openai` SDK, the Agents SDKs, Pipecat and LiveKit Agents play what
they are sent as it comes, at real time. Rules:

1. Playback starts when the first audio is sent and runs at real time (1 ms of audio per ms
   of the session clock).
2. It never passes what was sent: when the client's buffer runs dry (an underrun: the backend
   was slower than real time), playback waits, and the next audio sent resumes it at the time
   it is sent.
3. A pause (pause mode's `output_audio_buffer.paused`) stops it where it stands; a resume
   starts it again from there.
4. Replies play back to back, as clients queue them: a reply's playback starts no earlier
   than `start_at`, the end of the reply before it still playing when it was opened (the
   ledger's `open`), so a second reply's estimate never runs ahead of what was played.

Two integers and a time are enough for this: the audio position at the last (re)start, when
that was, and how much was sent; an underrun or a pause only moves the (re)start. So a reply
of any length costs constant memory, and `played` is exact for the model above.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PlayoutClock"]


@dataclass(slots=True)
class PlayoutClock:
    sent_ms: int = 0
    # Audio position and session time of the last (re)start; None before the first audio and
    # while paused.
    anchor_ms: int = 0
    anchor_at: int | None = None
    paused: bool = False
    start_at: int = 0  # rule 4

    def played(self, now_ms: int) -> int:
        """How many ms of the audio sent the client has played by `now_ms` (rules 1-3)."""
        if self.anchor_at is None:
            return self.anchor_ms
        return min(self.sent_ms, self.anchor_ms + max(0, now_ms - self.anchor_at))

    def send(self, now_ms: int, audio_ms: int) -> None:
        """`audio_ms` more audio went out at `now_ms`."""
        if not self.paused and self.anchor_at is None and not self.sent_ms:
            # The first audio: playback starts now, or after the reply before it (rule 4).
            self.anchor_ms, self.anchor_at = 0, max(now_ms, self.start_at)
        elif not self.paused and (self.anchor_at is None or self.played(now_ms) >= self.sent_ms):
            # The buffer ran dry: playback restarts now (rule 2).
            self.anchor_ms, self.anchor_at = self.sent_ms, now_ms
        self.sent_ms += audio_ms

    def pause(self, now_ms: int) -> None:
        if not self.paused:
            self.anchor_ms, self.anchor_at = self.played(now_ms), None
            self.paused = True

    def resume(self, now_ms: int) -> None:
        if self.paused:
            self.paused = False
            if self.anchor_ms < self.sent_ms:
                self.anchor_at = now_ms

    def ends_at(self) -> int | None:
        """When playback of what was sent will be over (None while paused or before audio)."""
        if self.anchor_at is None:
            return None
        return self.anchor_at + (self.sent_ms - self.anchor_ms)

"""A preemptive response before its turn is committed: its backend stream and what it said.

With `turn_detection.preemptive_response` the session chart starts a response at a candidate
pause (`StartPreemptive`), before the turn is over, so that its first audio is ready when the
turn is committed (docs/protocol.md "Semantic end of turn and preemptive responses"). It is
not a response yet: no chart, no ledger entry, no conversation slot, nothing on the wire.

Rules:
- The backend is asked with the conversation as it stands plus the turn so far as a
  provisional user item, under the id that the turn's commit will give it, and under the
  response id and fence number it will keep if adopted.
- Everything its stream says is held here, in order: bounded by `max_events` and
  `max_bytes` per preemption. `hold` returns False once over either bound; the caller drops
  the preemption then (a fresh response starts at the commit).
- Adopted (the turn was committed as it stood): the response is created after
  `input_audio_buffer.committed`, and the held output is replayed into it in order, exactly
  as if the stream had answered that fast. Dropped: the stream is cancelled and what it held
  is forgotten; nothing of it is ever sent.
- The cascade hears through transcripts: the turn so far is transcribed first (`Transcribe`
  with purpose `preempt`, `transcript_token`) and the stream starts with that transcript;
  once adopted, the same transcript is the committed turn's (the audio is the same speech).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from orchestrator.session.actions import StartBackend
from orchestrator.session.inputs import BackendAudio, BackendEvent, BackendText, BackendToolCall

__all__ = ["Preemption"]


@dataclass(slots=True)
class Preemption:
    start: StartBackend
    # The user item the turn's commit will create (the id speech_started promised).
    item_id: str
    max_events: int
    max_bytes: int
    # Sent to the actor (the cascade waits for `transcript` first).
    started: bool = False
    transcript_token: int | None = None
    transcript: str | None = None
    held: deque[BackendEvent] = field(default_factory=deque)
    held_bytes: int = 0

    @property
    def response_id(self) -> str:
        return self.start.response_id

    @property
    def seq(self) -> int:
        return self.start.seq

    def hold(self, event: BackendEvent) -> bool:
        """Keep one output of the stream; False when the bound is passed (drop it then)."""
        size = 64
        if isinstance(event, BackendAudio):
            size += len(event.audio) + len(event.text.encode())
        elif isinstance(event, BackendText):
            size += len(event.text.encode())
        elif isinstance(event, BackendToolCall):
            size += len(event.name.encode()) + len(event.arguments_delta.encode())
        if len(self.held) >= self.max_events or self.held_bytes + size > self.max_bytes:
            return False
        self.held.append(event)
        self.held_bytes += size
        return True

    def take_held(self) -> list[BackendEvent]:
        held = list(self.held)
        self.held.clear()
        self.held_bytes = 0
        return held

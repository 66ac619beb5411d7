"""A response the session core still tracks, and the function call it is making.

Rules (docs/protocol.md):
1. A `LiveResponse` exists from `response.created` until its response chart is terminal; the
   core's response part alone adds and removes it (orchestrator/session/core_responses.py),
   so its presence in the `live` map is what "the response is live" means to every part.
2. Its chart decides; these fields only record what was sent (text, audio ms, the call so far)
   for the terminal and for history.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from orchestrator.protocol import items as wire
from orchestrator.session.actions import InferenceRequest
from orchestrator.session.audio import OutputAudio
from orchestrator.session.envelope import CallOutput
from statecharts.response import ResponseChart

__all__ = ["LiveCall", "LiveResponse"]


@dataclass(slots=True)
class LiveCall:
    """The function call a response is making: its output item and its arguments so far."""

    out: CallOutput
    arguments: list[str] = field(default_factory=list)


@dataclass(slots=True)
class LiveResponse:
    """A response the session still tracks: generating, or generated and not yet heard.

    `item_id` is its message item (and its ledger entry's); `message` is False for a reply
    that is a call alone, whose message item is never announced nor opened."""

    chart: ResponseChart
    seq: int
    item_id: str
    audio: bool
    request: InferenceRequest
    message: bool = True
    # False for an out-of-band response (`conversation: "none"`): its items are announced as
    # the response's output only, never as conversation items, and never enter history.
    in_conversation: bool = True
    # The message item as `response.output_item.done` sent it when a call closed it early.
    message_closed: wire.MessageItem | None = None
    call: LiveCall | None = None
    text_parts: list[str] = field(default_factory=list)
    audio_ms: int = 0
    # pcm16 bytes sent so far: `audio_ms` is their whole ms, not a sum of each chunk's floor
    # (a voice whose chunks are not whole ms would lose up to 1 ms a chunk).
    audio_bytes: int = 0
    output_tokens: int = 0
    encoder: OutputAudio | None = None
    # Text came without the audio it accompanies (the pipeline cannot align it): heard only
    # with the whole reply, dropped from a cut (docs/protocol.md rule 5).
    unaligned_text: bool = False

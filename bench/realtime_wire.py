"""What a benchmark's realtime client sends and skims: one spelling for every bench.

- `append_message` is an `input_audio_buffer.append` of float32 samples as pcm16 (the wire's
  format at 24 kHz), `append_pcm16` the same of pcm16 bytes already made.
- `event_kind` decodes only an event's `type` and `response_id`: audio deltas, most of what
  a session receives, are recognised without building the whole event.
"""

from __future__ import annotations

import base64
import json

import msgspec

from bench.speech import Audio, pcm16

__all__ = ["EventKind", "append_message", "append_pcm16", "event_kind"]


def append_pcm16(pcm: bytes) -> str:
    return json.dumps(
        {"type": "input_audio_buffer.append", "audio": base64.b64encode(pcm).decode()}
    )


def append_message(samples: Audio) -> str:
    return append_pcm16(pcm16(samples))


class EventKind(msgspec.Struct):
    type: str
    response_id: str | None = None


event_kind = msgspec.json.Decoder(EventKind).decode

"""The words the charts and every layer above them share, each defined once, here.

Rules:
1. The charts are the lowest layer (they import nothing of the orchestrator), so a concept
   both the charts and the protocol or the session core name is defined here and imported
   where used: orchestrator/protocol/ re-exports these, never redefines them.
2. Only words: `Literal` types, no behaviour.
"""

from __future__ import annotations

from typing import Literal

__all__ = [
    "Heard",
    "IncompleteReason",
    "InterruptionMode",
    "OverlapDecisionKind",
    "OverlapReason",
    "TerminalStatus",
    "TurnMode",
]

# How a response ended (its `response.done` status); the wire adds `in_progress` for a
# response still running (orchestrator/protocol/response.py `ResponseStatus`).
TerminalStatus = Literal["completed", "cancelled", "failed", "incomplete"]
# Why a reply that ended on its own is `incomplete` (OpenAI's reasons): the output budget ran
# out (the request's `max_output_tokens`, or a pipeline stage's own room), or a safety filter
# cut it (no pipeline sends that one yet).
IncompleteReason = Literal["max_output_tokens", "content_filter"]
# What the overlap's latest partial transcript says (orchestrator/session/turns/overlap.py):
# none back yet, words that are not backchannels, an interrupt word ("wait", "stop": `urgent`,
# which decides at once whatever `min_speech_ms` says), only backchannels, or nothing at all
# (noise: silence, a laugh, a sound tag).
Heard = Literal["nothing", "words", "urgent", "backchannel", "noise"]
# Pause mode's one decision about an overlap (docs/protocol.md "Interruption policy").
OverlapDecisionKind = Literal["interrupt", "resume"]
# interrupt: `speech` (the speech decided), `client` (a clear, cancel, truncate or commit of the
# client's ended the pause), `closed` (the session ended); resume: `short`, `backchannel`,
# `noise` (an empty transcript), `client` (the client cleared the input buffer).
OverlapReason = Literal["speech", "client", "closed", "short", "backchannel", "noise"]
# `interruption.mode`: stop the reply at once (v1), or pause it until the overlap is judged.
InterruptionMode = Literal["immediate", "pause"]
# Who ends a user's turn, as the session chart sees the session's `turn_detection`: the VAD
# (`server_vad`, `semantic_vad`) or the client's commits (`manual`: turn_detection null).
TurnMode = Literal["server_vad", "semantic_vad", "manual"]

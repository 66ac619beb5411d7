"""From the core's `InferenceRequest` (pruned history) to the pipelines' contract request.

The history holds only what the user heard (rule 6): assistant items carry the heard
transcript, an empty assistant item is the boundary of a reply nobody heard, and user audio is
sent as audio (16 kHz) with its transcript when one is known.

Function calling: a `function_call` item is a `ToolCallPart` of the assistant message it
follows (the reply that made it, so a spoken preamble and its call are one assistant turn;
an assistant message of its own where none precedes it), and a `function_call_output` is a
`tool` message holding a `ToolResultPart`. The tools in force become `GenerationParameters`'
`tools`; a named function's choice is `tool_choice: "function"` with `tool_name`.

Every response sends the whole pruned history, so its user audio would be decoded and
resampled to 16 kHz again for each one, on the event loop: up to four turns of audio a
response. A session's `DecodedAudio` keeps each turn's 16 kHz audio from one request to
the next; it holds only what the last request used, so it is bounded by the prompt's user
audio (`HistoryLimits.max_audio_inputs`, 4 turns, within `max_history_bytes`).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

from orchestrator.protocol.session_config import AudioFormat
from orchestrator.protocol.tools import ToolChoiceFunction
from orchestrator.session.actions import InferenceRequest
from orchestrator.session.audio import decode_input
from orchestrator.session.history import conversation as conv
from orchestrator.triton.pipeline_client import PipelineRequest
from turntaker_models.contract import (
    AudioPart,
    Conversation,
    GenerationParameters,
    ImagePart,
    Message,
    Part,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    ToolSpec,
)

Audio16k = npt.NDArray[np.float32]
# A turn's recorded audio and its format: a transcript arriving later makes a new InputAudio
# around the same bytes, which must still find its decode.
_AudioKey = tuple[bytes, AudioFormat]


class DecodedAudio:
    """One session's user audio at 16 kHz, decoded once per turn (see the module docstring)."""

    def __init__(self) -> None:
        self._kept: dict[_AudioKey, Audio16k] = {}
        self.decodes = 0

    def __len__(self) -> int:
        return len(self._kept)

    def decode(self, content: conv.InputAudio, used: dict[_AudioKey, Audio16k]) -> Audio16k:
        # Hashing the bytes is once per bytes object (Python caches it); equal keys are
        # mostly the very same object, which a dict compares by identity first.
        key = (content.audio, content.format)
        found = used.get(key)
        if found is None:
            found = self._kept.get(key)
        if found is None:
            found = decode_input(content.audio, content.format)
            found.flags.writeable = False  # shared by the requests of later responses
            self.decodes += 1
        used[key] = found
        return found

    def keep(self, used: dict[_AudioKey, Audio16k]) -> None:
        self._kept = used


def pipeline_request(
    request_id: str,
    request: InferenceRequest,
    *,
    default_max_tokens: int,
    transcripts: Mapping[str, str] | None = None,
    audio_with_transcript: bool = True,
    decoded: DecodedAudio | None = None,
) -> PipelineRequest:
    """`transcripts` (by item id) fill user audio whose item has none yet. Where a transcript is
    known and `audio_with_transcript` is false (a text model behind ASR: the cascade), the audio
    itself is left out (an empty segment), so earlier turns are never transcribed again.
    `decoded`: the session's turns already at 16 kHz (a fresh one: none)."""
    messages: list[Message] = []
    segments: list[Audio16k] = []
    cache = decoded if decoded is not None else DecodedAudio()
    used: dict[_AudioKey, Audio16k] = {}
    if request.instructions:
        messages.append(Message(role="system", content=[TextPart(request.instructions)]))
    for item in request.items:
        if (call := item.call) is not None:
            part = ToolCallPart(call.call_id, call.name, call.arguments)
            if messages and messages[-1].role == "assistant":
                messages[-1].content.append(part)  # the reply that made it: one turn
            else:
                messages.append(Message(role="assistant", content=[part]))
            continue
        if (answer := item.call_output) is not None:
            result = ToolResultPart(answer.call_id, answer.output)
            messages.append(Message(role="tool", content=[result]))
            continue
        parts: list[Part] = []
        for content in item.content:
            if isinstance(content, conv.InputText | conv.OutputText):
                parts.append(TextPart(content.text))
            elif isinstance(content, conv.InputAudio):
                transcript = content.transcript
                if transcript is None and transcripts is not None:
                    transcript = transcripts.get(item.id)
                parts.append(AudioPart(len(segments), transcript))
                if transcript is not None and not audio_with_transcript:
                    segments.append(np.zeros(0, np.float32))
                else:
                    # Each part in the format it was recorded in, whatever the session uses now.
                    segments.append(cache.decode(content, used))
            elif isinstance(content, conv.InputImage):
                parts.append(ImagePart(content.image_url))
            elif isinstance(content, conv.OutputAudio):
                # What the user heard of an earlier reply, as text: the model's own audio is not
                # fed back.
                if content.transcript:
                    parts.append(TextPart(content.transcript))
        messages.append(Message(role=item.role, content=parts))
    cache.keep(used)
    choice = request.tool_choice
    parameters = GenerationParameters(
        max_tokens=request.max_output_tokens or default_max_tokens,
        voice=request.voice,
        audio="audio" in request.output_modalities,
        tools=[ToolSpec(t.name, t.description or "", dict(t.parameters)) for t in request.tools],
        tool_choice="function" if isinstance(choice, ToolChoiceFunction) else choice,
        tool_name=choice.name if isinstance(choice, ToolChoiceFunction) else None,
    )
    return PipelineRequest(
        request_id=request_id,
        conversation=Conversation(messages=messages),
        audio=segments,
        parameters=parameters,
    )

"""The pipeline contract shared by `cascade` and `qwen3_omni` (see model_repository/README.md).

Inputs of both ensembles (names and types are the same in both `config.pbtxt`):
- `REQUEST_ID`    TYPE_STRING [1]  the orchestrator's id for this generation; the key on the
                                   cancel board, forwarded to every step.
- `CONVERSATION`  TYPE_STRING [1]  JSON `Conversation` below: the history as the orchestrator
                                   builds it (pruned whole turns, empty assistant boundaries).
- `AUDIO`         TYPE_FP32  [-1]  every audio part of the conversation, 16 kHz mono in [-1, 1],
                                   concatenated in order of appearance.
- `AUDIO_LENGTHS` TYPE_INT32 [-1]  samples per audio part, in the same order.
- `PARAMETERS`    TYPE_STRING [1]  JSON `GenerationParameters`.

Outputs, streamed (a response may carry any of them; the last one has the final flag):
- `TEXT_DELTA`    TYPE_STRING [1]  the next piece of the assistant's text (UTF-8, may be "").
- `AUDIO_CHUNK`   TYPE_FP32  [-1]  the next 24 kHz mono samples of the spoken answer.
- `TOOL_CALL`     TYPE_STRING [1]  JSON `ToolCallDelta` below (optional; "" or absent: none):
                                   the next piece of the model's function call. Never spoken,
                                   never in `TEXT_DELTA`.
- `END_REASON`    TYPE_STRING [1]  an `EndReason` below (optional; "" or absent: none): the
                                   pipeline's own limit cut the answer short, so the stream
                                   ends before the model ended it. Any response of the stream
                                   may carry it (a stage that knows it sends it at once, ahead
                                   of audio still being made); a stream that carries none
                                   ended where the model ended it.

End reasons (`EndReason`, OpenAI's reasons for an `incomplete` response): "max_output_tokens",
the output budget ran out: the request's `max_tokens` (or the context left), or a stage's own
room (the Qwen3-Omni Talker's KV slot, which ends the audio there); "content_filter", a safety
filter cut the answer (no stage sends it yet). A generation that ends on its own at the very
token the budget allows (its end-of-turn token, a call's closing) has no end reason.

Function calling (`GenerationParameters.tools`): at most one call per generation, after any
spoken text; once a call has started nothing more is spoken. The call's first delta names the
function (`name`), every delta carries the next piece of its `arguments` JSON text, and the
call ends with the stream. With `tool_choice` "required" or "function" the generation is the
call alone, its arguments decoded under a grammar built from the function's `parameters`
schema, so they always validate.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec
import numpy as np
import numpy.typing as npt

INPUT_SAMPLE_RATE = 16000
OUTPUT_SAMPLE_RATE = 24000


class TextPart(msgspec.Struct, tag="text", frozen=True):
    text: str


class AudioPart(msgspec.Struct, tag="audio", frozen=True):
    # Index into the AUDIO_LENGTHS segments of this request.
    audio: int
    # What the orchestrator already knows was said (a transcript), if anything.
    transcript: str | None = None


class ImagePart(msgspec.Struct, tag="image", frozen=True):
    # A data URL (data:image/png;base64,...), as the client sent it.
    image_url: str


class ToolCallPart(msgspec.Struct, tag="tool_call", frozen=True):
    """In an assistant message: a function call the model made (a `function_call` item)."""

    call_id: str
    name: str
    # JSON text, as the model produced it.
    arguments: str


class ToolResultPart(msgspec.Struct, tag="tool_result", frozen=True):
    """In a `tool` message: the client's answer to a call (a `function_call_output` item)."""

    call_id: str
    output: str


Part = TextPart | AudioPart | ImagePart | ToolCallPart | ToolResultPart


class Message(msgspec.Struct, frozen=True):
    role: Literal["system", "user", "assistant", "tool"]
    # An assistant message with no content is the boundary of a turn the user never heard.
    content: list[Part] = []


class Conversation(msgspec.Struct, frozen=True):
    messages: list[Message]


class ToolSpec(msgspec.Struct, frozen=True):
    """A function the model may call (OpenAI's `{type: "function", name, description,
    parameters}`); `parameters` is a JSON schema, checked by the orchestrator."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = msgspec.field(default_factory=dict)


# "function": exactly the function `tool_name` names (OpenAI's `{type: "function", name}`).
ToolChoice = Literal["auto", "none", "required", "function"]

# `END_REASON`: why the pipeline cut the answer short (see the module docstring).
EndReason = Literal["max_output_tokens", "content_filter"]
END_REASONS: tuple[EndReason, ...] = ("max_output_tokens", "content_filter")


class ToolCallDelta(msgspec.Struct, frozen=True):
    """One `TOOL_CALL` output: `name` in a call's first delta only ("" after)."""

    arguments: str
    name: str = ""


class GenerationParameters(msgspec.Struct, frozen=True):
    max_tokens: int = 256
    # 0 means greedy decoding.
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0
    voice: str = "default"
    # False for text-only responses: the audio stages are skipped.
    audio: bool = True
    tools: list[ToolSpec] = []
    tool_choice: ToolChoice = "auto"
    tool_name: str | None = None


class ContractError(ValueError):
    """A request that does not follow the contract; the message is for the caller."""


_conversation_decoder = msgspec.json.Decoder(Conversation)
_parameters_decoder = msgspec.json.Decoder(GenerationParameters)


def decode_conversation(raw: bytes) -> Conversation:
    try:
        return _conversation_decoder.decode(raw)
    except msgspec.ValidationError as error:
        raise ContractError(f"CONVERSATION: {error}") from None
    except msgspec.DecodeError as error:
        raise ContractError(f"CONVERSATION is not JSON: {error}") from None


def decode_parameters(raw: bytes) -> GenerationParameters:
    if not raw.strip():
        return GenerationParameters()
    try:
        params = _parameters_decoder.decode(raw)
    except (msgspec.ValidationError, msgspec.DecodeError) as error:
        raise ContractError(f"PARAMETERS: {error}") from None
    if params.max_tokens < 1:
        raise ContractError("PARAMETERS: max_tokens must be at least 1")
    if params.temperature < 0 or not 0 < params.top_p <= 1:
        raise ContractError("PARAMETERS: temperature >= 0 and 0 < top_p <= 1 required")
    names = [tool.name for tool in params.tools]
    if len(set(names)) != len(names):
        raise ContractError(f"PARAMETERS: tool names must differ, got {names}")
    if params.tool_choice == "required" and not params.tools:
        raise ContractError("PARAMETERS: tool_choice 'required' needs at least one tool")
    if params.tool_choice == "function" and params.tool_name not in names:
        raise ContractError(f"PARAMETERS: tool_name {params.tool_name!r} is not one of {names}")
    return params


_tool_call_decoder = msgspec.json.Decoder(ToolCallDelta)


def decode_tool_call(raw: bytes) -> ToolCallDelta | None:
    """A `TOOL_CALL` output; None for an empty one (no call in this piece)."""
    if not raw.strip():
        return None
    try:
        return _tool_call_decoder.decode(raw)
    except (msgspec.ValidationError, msgspec.DecodeError) as error:
        raise ContractError(f"TOOL_CALL: {error}") from None


def decode_end_reason(raw: bytes) -> EndReason | None:
    """An `END_REASON` output; None for an empty one (the stream was not cut short here)."""
    text = raw.decode(errors="replace").strip()
    if not text:
        return None
    for reason in END_REASONS:
        if text == reason:
            return reason
    raise ContractError(f"END_REASON: {text!r} is not one of {', '.join(END_REASONS)}")


def encode(value: Conversation | GenerationParameters | ToolCallDelta) -> bytes:
    return msgspec.json.encode(value)


def split_audio(
    audio: npt.NDArray[np.float32], lengths: npt.NDArray[np.int32], conversation: Conversation
) -> list[npt.NDArray[np.float32]]:
    """The audio segments, checked against the lengths and the parts that point at them."""
    sizes = np.asarray(lengths, dtype=np.int64).reshape(-1)
    audio = np.asarray(audio, dtype=np.float32).reshape(-1)
    if (sizes < 0).any():
        bad = int(np.flatnonzero(sizes < 0)[0])
        raise ContractError(f"AUDIO_LENGTHS[{bad}] is {int(sizes[bad])}; lengths must be >= 0")
    if int(sizes.sum()) != audio.shape[0]:
        raise ContractError(
            f"AUDIO has {audio.shape[0]} samples but AUDIO_LENGTHS add up to {int(sizes.sum())}"
        )
    for message in conversation.messages:
        for part in message.content:
            if isinstance(part, AudioPart) and not 0 <= part.audio < sizes.shape[0]:
                raise ContractError(
                    f"audio part {part.audio} but only {sizes.shape[0]} audio segments"
                )
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    return [audio[bounds[i] : bounds[i + 1]] for i in range(sizes.shape[0])]

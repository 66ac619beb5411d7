"""The wire spellings of `session.update` (GA and beta) and their normalization.

The payload is decoded into the `Wire*` structs here, in the same single msgspec pass as
every other event, and collapsed into one `SessionPatch` right after; beta spellings of
the session exist in this module only.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Annotated, Final, Literal

import msgspec
from msgspec import UNSET, Meta, UnsetType

from .client import SessionUpdate
from .errors import InvalidInput
from .session_config import (
    DEFAULT_BACKCHANNELS,
    DEFAULT_INTERRUPT_WORDS,
    PCM16,
    PCMA,
    PCMU,
    AudioFormat,
    EchoCancellation,
    Interruption,
    MaxTokens,
    Modality,
    NoiseReduction,
    RetentionRatio,
    SemanticVad,
    ServerVad,
    SessionPatch,
    Transcription,
    Truncation,
    TurnDetection,
    normalize_backchannel,
)
from .tools import (
    FunctionTool,
    ToolChoice,
    WireToolChoice,
    WireTools,
    normalize_tool_choice,
    normalize_tools,
)

__all__ = [
    "WireInterruption",
    "WireMaxTokens",
    "WireSession",
    "WireSessionUpdate",
    "normalize_modalities",
    "normalize_session_update",
]

NonNegative = Annotated[int, Meta(ge=0)]
WireMaxTokens = Annotated[int, Meta(ge=1)] | Literal["inf"]


class _Wire(msgspec.Struct, frozen=True, kw_only=True):
    pass


class WireAudioFormat(_Wire, frozen=True, kw_only=True):
    # `type` is a plain str so an unknown format reaches us as a value we can name in an
    # `unsupported_audio_format` error, rather than as a generic msgspec enum failure.
    type: str
    rate: int | None = None


# GA sends an object, beta a string ("pcm16").
WireFormat = str | WireAudioFormat


# `backchannels` and `interrupt_words`: at most 256 entries of at most 64 characters.
_WordList = Annotated[tuple[Annotated[str, Meta(max_length=64)], ...], Meta(max_length=256)]


class WireInterruption(_Wire, frozen=True, kw_only=True):
    # `mode` is a plain str so that an unknown mode is named in an `invalid_value` error.
    mode: str | None = None
    min_speech_ms: Annotated[int, Meta(ge=0, le=10_000)] | None = None
    resume_after_ms: Annotated[int, Meta(ge=0, le=30_000)] | None = None
    backchannels: _WordList | None = None
    interrupt_words: _WordList | None = None


class WireTurnDetection(_Wire, frozen=True, kw_only=True):
    # Beta clients often sent only the knobs; server_vad was the one type there was.
    type: str = "server_vad"
    threshold: Annotated[float, Meta(ge=0.0, le=1.0)] | None = None
    prefix_padding_ms: NonNegative | None = None
    silence_duration_ms: NonNegative | None = None
    create_response: bool | None = None
    interrupt_response: bool | None = None
    idle_timeout_ms: NonNegative | None = None
    interruption: WireInterruption | None = None
    # semantic_vad (v2; OpenAI's field); `eagerness` a plain str to name a bad value.
    eagerness: str | None = None
    # v2 extension, server_vad and semantic_vad.
    preemptive_response: bool | None = None


class WireTranscription(_Wire, frozen=True, kw_only=True):
    model: str | None = None
    language: str | None = None
    prompt: str | None = None


class WireNoiseReduction(_Wire, frozen=True, kw_only=True):
    type: str


class WireEchoCancellation(_Wire, frozen=True, kw_only=True):
    type: str = "server"


class WireAudioInput(_Wire, frozen=True, kw_only=True):
    format: WireFormat | None = None
    turn_detection: WireTurnDetection | UnsetType | None = UNSET
    transcription: WireTranscription | UnsetType | None = UNSET
    noise_reduction: WireNoiseReduction | UnsetType | None = UNSET
    echo_cancellation: WireEchoCancellation | UnsetType | None = UNSET


class WireAudioOutput(_Wire, frozen=True, kw_only=True):
    format: WireFormat | None = None
    voice: str | None = None


class WireAudio(_Wire, frozen=True, kw_only=True):
    input: WireAudioInput | None = None
    output: WireAudioOutput | None = None


class WireTokenLimits(_Wire, frozen=True, kw_only=True):
    post_instructions: int | None = None


class WireTruncation(_Wire, frozen=True, kw_only=True):
    type: str
    retention_ratio: float | None = None
    token_limits: WireTokenLimits | None = None


def _truncation(wire: str | WireTruncation) -> Truncation:
    """OpenAI's `session.truncation`: "auto" is rule 6's pruning; a retention ratio cuts to
    that fraction of each limit at once. "disabled" (history never cut, an error once the
    context overflows) would make a session's history unbounded: refused, as is a token
    limit (this server bounds history in turns and bytes, not tokens)."""
    if wire == "auto":
        return "auto"
    if wire == "disabled":
        raise InvalidInput(
            "invalid_value",
            "Truncation 'disabled' is not supported: this server always bounds a session's "
            "history (max_history_bytes, max_audio_inputs), dropping the oldest turns first.",
            "session.truncation",
        )
    if isinstance(wire, str):
        raise InvalidInput(
            "invalid_value",
            f"Invalid truncation '{wire[:64]}'; expected 'auto' or a retention_ratio object.",
            "session.truncation",
        )
    if wire.type != "retention_ratio":
        raise InvalidInput(
            "invalid_value",
            f"Invalid truncation type '{wire.type[:64]}'; expected 'retention_ratio'.",
            "session.truncation.type",
        )
    ratio = wire.retention_ratio
    if ratio is None:
        raise InvalidInput(
            "missing_required_parameter",
            "Missing required parameter: 'session.truncation.retention_ratio'.",
            "session.truncation.retention_ratio",
        )
    if not 0.0 <= ratio <= 1.0:
        raise InvalidInput(
            "invalid_value",
            f"retention_ratio must be between 0 and 1, got {ratio}.",
            "session.truncation.retention_ratio",
        )
    if wire.token_limits is not None and wire.token_limits.post_instructions is not None:
        raise InvalidInput(
            "invalid_value",
            "truncation.token_limits is not supported: history is bounded in turns and bytes.",
            "session.truncation.token_limits",
        )
    return RetentionRatio(retention_ratio=ratio)


class WireSession(_Wire, frozen=True, kw_only=True):
    """GA and beta `session` fields side by side; where both are sent, GA wins."""

    type: str | None = None
    instructions: str | None = None
    output_modalities: tuple[str, ...] | None = None
    audio: WireAudio | None = None
    max_output_tokens: WireMaxTokens | None = None
    tools: WireTools | None = None
    tool_choice: WireToolChoice | None = None
    truncation: str | WireTruncation | None = None
    # beta
    modalities: tuple[str, ...] | None = None
    input_audio_format: WireFormat | None = None
    output_audio_format: WireFormat | None = None
    turn_detection: WireTurnDetection | UnsetType | None = UNSET
    input_audio_transcription: WireTranscription | UnsetType | None = UNSET
    voice: str | None = None
    max_response_output_tokens: WireMaxTokens | None = None


class WireSessionUpdate(_Wire, frozen=True, kw_only=True, tag_field="type", tag="session.update"):
    event_id: str | None = None
    session: WireSession


_BETA_FORMATS: Final[Mapping[str, AudioFormat]] = MappingProxyType(
    {
        "pcm16": PCM16,
        "g711_ulaw": PCMU,
        "g711_alaw": PCMA,
        "audio/pcm": PCM16,
        "audio/pcmu": PCMU,
        "audio/pcma": PCMA,
    }
)
_GA_FORMATS: Final[Mapping[str, AudioFormat]] = MappingProxyType(
    {f.type: f for f in (PCM16, PCMU, PCMA)}
)


def _format(wire: WireFormat, param: str) -> AudioFormat:
    if isinstance(wire, str):
        fmt = _BETA_FORMATS.get(wire)
        if fmt is None:
            raise InvalidInput(
                "unsupported_audio_format",
                f"Unsupported audio format '{wire[:64]}'; use audio/pcm (24 kHz), "
                "audio/pcmu or audio/pcma.",
                param,
            )
        return fmt
    fmt = _GA_FORMATS.get(wire.type)
    if fmt is None:
        raise InvalidInput(
            "unsupported_audio_format",
            f"Unsupported audio format '{wire.type[:64]}'; use audio/pcm (24 kHz), "
            "audio/pcmu or audio/pcma.",
            f"{param}.type",
        )
    if wire.rate is not None and wire.rate != fmt.rate:
        raise InvalidInput(
            "unsupported_audio_format",
            f"Unsupported sample rate {wire.rate} for {fmt.type}; only {fmt.rate} Hz.",
            f"{param}.rate",
        )
    return fmt


def normalize_modalities(values: tuple[str, ...], param: str) -> tuple[Modality, ...]:
    if values == ("audio",):
        return ("audio",)
    if values == ("text",):
        return ("text",)
    # Beta clients ask for ["text", "audio"]; OpenAI's audio output always carries a
    # transcript, so that is plain audio output.
    if len(values) == 2 and set(values) == {"text", "audio"}:
        return ("audio",)
    raise InvalidInput(
        "invalid_value",
        f"Invalid output_modalities {list(values)!r}; use ['audio'] or ['text'].",
        param,
    )


_SERVER_VAD_KNOBS: Final = (
    "threshold",
    "prefix_padding_ms",
    "silence_duration_ms",
    "idle_timeout_ms",
)
_EAGERNESS: Final = ("low", "medium", "high", "auto")


def _turn_detection(wire: WireTurnDetection | None, param: str) -> TurnDetection | None:
    if wire is None:
        return None
    if wire.type not in ("server_vad", "semantic_vad"):
        raise InvalidInput(
            "unsupported_turn_detection",
            f"Unsupported turn_detection type '{wire.type[:64]}'; use 'server_vad', "
            "'semantic_vad' or null.",
            f"{param}.type",
        )
    given: dict[str, object] = {
        name: value
        for name in ("create_response", "interrupt_response", "preemptive_response")
        if (value := getattr(wire, name)) is not None
    }
    if wire.interruption is not None:
        given["interruption"] = _interruption(wire.interruption, f"{param}.interruption")
    # Like OpenAI, a turn_detection object replaces the previous one; unset knobs take
    # their defaults instead of keeping earlier values.
    if wire.type == "semantic_vad":
        # Silence knobs would be silently ignored: the model decides, not a silence.
        for name in _SERVER_VAD_KNOBS:
            if getattr(wire, name) is not None:
                raise InvalidInput(
                    "invalid_value",
                    f"'{name}' applies to server_vad only; semantic_vad takes 'eagerness'.",
                    f"{param}.{name}",
                )
        if wire.eagerness is not None:
            if wire.eagerness not in _EAGERNESS:
                raise InvalidInput(
                    "invalid_value",
                    f"Unsupported eagerness '{wire.eagerness[:64]}'; use 'low', 'medium', "
                    "'high' or 'auto'.",
                    f"{param}.eagerness",
                )
            given["eagerness"] = wire.eagerness
        return SemanticVad(**given)  # type: ignore[arg-type]
    if wire.eagerness is not None:
        raise InvalidInput(
            "invalid_value",
            "'eagerness' applies to semantic_vad only.",
            f"{param}.eagerness",
        )
    for name in _SERVER_VAD_KNOBS:
        if (value := getattr(wire, name)) is not None:
            given[name] = value
    return ServerVad(**given)  # type: ignore[arg-type]


def _interruption(wire: WireInterruption, param: str) -> Interruption:
    if wire.mode is not None and wire.mode not in ("immediate", "pause"):
        raise InvalidInput(
            "invalid_value",
            f"Unsupported interruption mode '{wire.mode[:64]}'; use 'immediate' or 'pause'.",
            f"{param}.mode",
        )
    given: dict[str, object] = {
        name: value
        for name in ("mode", "min_speech_ms", "resume_after_ms")
        if (value := getattr(wire, name)) is not None
    }
    given["backchannels"] = _words(wire.backchannels, DEFAULT_BACKCHANNELS, f"{param}.backchannels")
    given["interrupt_words"] = _words(
        wire.interrupt_words, DEFAULT_INTERRUPT_WORDS, f"{param}.interrupt_words"
    )
    return Interruption(**given)  # type: ignore[arg-type]


def _words(
    entries: tuple[str, ...] | None, default: tuple[str, ...], param: str
) -> tuple[str, ...]:
    """A word list normalised as transcripts are (`normalize_backchannel`), duplicates dropped;
    an entry with nothing left is `invalid_value` naming the list."""
    if entries is None:
        return default
    words = tuple(normalize_backchannel(entry) for entry in entries)
    if not all(words):
        raise InvalidInput(
            "invalid_value",
            f"Every entry of '{param.rsplit('.', 1)[-1]}' must hold at least one letter or digit.",
            param,
        )
    return tuple(dict.fromkeys(words))


def _transcription(wire: WireTranscription | None) -> Transcription | None:
    if wire is None:
        return None
    return Transcription(model=wire.model, language=wire.language, prompt=wire.prompt)


def _noise_reduction(wire: WireNoiseReduction | None, param: str) -> NoiseReduction | None:
    if wire is None:
        return None
    if wire.type not in ("near_field", "far_field"):
        raise InvalidInput(
            "invalid_value",
            f"Invalid noise reduction type '{wire.type[:64]}'; expected 'near_field' or "
            "'far_field'.",
            f"{param}.type",
        )
    return NoiseReduction(type=wire.type)  # type: ignore[arg-type]


def _echo_cancellation(wire: WireEchoCancellation | None, param: str) -> EchoCancellation | None:
    if wire is None:
        return None
    if wire.type != "server":
        raise InvalidInput(
            "invalid_value",
            f"Invalid echo cancellation type '{wire.type[:64]}'; expected 'server'.",
            f"{param}.type",
        )
    return EchoCancellation()


def normalize_session_update(wire: WireSessionUpdate) -> SessionUpdate:
    s = wire.session
    if s.type is not None and s.type != "realtime":
        raise InvalidInput(
            "invalid_value",
            f"Unsupported session type '{s.type[:64]}'; only 'realtime' is supported.",
            "session.type",
        )
    a_in = s.audio.input if s.audio is not None and s.audio.input is not None else None
    a_out = s.audio.output if s.audio is not None and s.audio.output is not None else None

    modalities: tuple[Modality, ...] | None = None
    if s.output_modalities is not None:
        modalities = normalize_modalities(s.output_modalities, "session.output_modalities")
    elif s.modalities is not None:
        modalities = normalize_modalities(s.modalities, "session.modalities")

    input_format: AudioFormat | None = None
    if a_in is not None and a_in.format is not None:
        input_format = _format(a_in.format, "session.audio.input.format")
    elif s.input_audio_format is not None:
        input_format = _format(s.input_audio_format, "session.input_audio_format")

    output_format: AudioFormat | None = None
    if a_out is not None and a_out.format is not None:
        output_format = _format(a_out.format, "session.audio.output.format")
    elif s.output_audio_format is not None:
        output_format = _format(s.output_audio_format, "session.output_audio_format")

    turn_detection: TurnDetection | UnsetType | None = UNSET
    if a_in is not None and a_in.turn_detection is not UNSET:
        turn_detection = _turn_detection(a_in.turn_detection, "session.audio.input.turn_detection")
    elif s.turn_detection is not UNSET:
        turn_detection = _turn_detection(s.turn_detection, "session.turn_detection")

    transcription: Transcription | UnsetType | None = UNSET
    if a_in is not None and a_in.transcription is not UNSET:
        transcription = _transcription(a_in.transcription)
    elif s.input_audio_transcription is not UNSET:
        transcription = _transcription(s.input_audio_transcription)

    noise_reduction: NoiseReduction | UnsetType | None = UNSET
    echo_cancellation: EchoCancellation | UnsetType | None = UNSET
    if a_in is not None and a_in.noise_reduction is not UNSET:
        noise_reduction = _noise_reduction(
            a_in.noise_reduction, "session.audio.input.noise_reduction"
        )
    if a_in is not None and a_in.echo_cancellation is not UNSET:
        echo_cancellation = _echo_cancellation(
            a_in.echo_cancellation, "session.audio.input.echo_cancellation"
        )

    voice = a_out.voice if a_out is not None and a_out.voice is not None else s.voice
    max_tokens: MaxTokens | None = (
        s.max_output_tokens if s.max_output_tokens is not None else s.max_response_output_tokens
    )
    tools: tuple[FunctionTool, ...] | None = None
    if s.tools is not None:
        tools = normalize_tools(s.tools, "session.tools")
    tool_choice: ToolChoice | None = None
    if s.tool_choice is not None:
        tool_choice = normalize_tool_choice(s.tool_choice, "session.tool_choice")
    return SessionUpdate(
        event_id=wire.event_id,
        session=SessionPatch(
            instructions=s.instructions,
            output_modalities=modalities,
            input_format=input_format,
            output_format=output_format,
            turn_detection=turn_detection,
            transcription=transcription,
            voice=voice,
            max_output_tokens=max_tokens,
            tools=tools,
            tool_choice=tool_choice,
            truncation=_truncation(s.truncation) if s.truncation is not None else None,
            noise_reduction=noise_reduction,
            echo_cancellation=echo_cancellation,
        ),
    )

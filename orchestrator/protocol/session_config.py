"""Session configuration: one normalized shape for GA and beta `session.update` payloads.

The wire accepts two spellings (see `client_wire`); everything past the codec sees only
these types. `SessionConfig` is the full state, `SessionPatch` a partial update, and
`SessionConfig.apply` is the only way one becomes the other, so "what does an update do"
has a single, pure answer.
"""

from __future__ import annotations

from typing import Final, Literal

import msgspec
from msgspec import UNSET, UnsetType

__all__ = [
    "PCM16",
    "PCMA",
    "PCMU",
    "AudioFormat",
    "AudioFormatType",
    "MaxTokens",
    "Modality",
    "ServerVad",
    "SessionAudio",
    "SessionAudioInput",
    "SessionAudioOutput",
    "SessionConfig",
    "SessionObject",
    "SessionPatch",
    "Transcription",
]

AudioFormatType = Literal["audio/pcm", "audio/pcmu", "audio/pcma"]
Modality = Literal["audio", "text"]
MaxTokens = int | Literal["inf"]


class AudioFormat(msgspec.Struct, frozen=True, kw_only=True):
    """A wire audio format; `rate` is implied by `type` today but kept explicit for math."""

    type: AudioFormatType
    rate: int

    @property
    def bytes_per_ms(self) -> int:
        # pcm16 is two bytes a sample; G.711 one.
        width = 2 if self.type == "audio/pcm" else 1
        return width * self.rate // 1000


PCM16: Final = AudioFormat(type="audio/pcm", rate=24000)
PCMU: Final = AudioFormat(type="audio/pcmu", rate=8000)
PCMA: Final = AudioFormat(type="audio/pcma", rate=8000)


class ServerVad(msgspec.Struct, frozen=True, kw_only=True):
    """The only turn detection we run; defaults are OpenAI's."""

    type: Literal["server_vad"] = "server_vad"
    threshold: float = 0.5
    prefix_padding_ms: int = 300
    silence_duration_ms: int = 500
    create_response: bool = True
    interrupt_response: bool = True
    idle_timeout_ms: int | None = None


class Transcription(msgspec.Struct, frozen=True, kw_only=True):
    """Input audio transcription settings; their presence turns transcripts on."""

    model: str | None = None
    language: str | None = None
    prompt: str | None = None


class SessionPatch(msgspec.Struct, frozen=True, kw_only=True):
    """A normalized `session.update`. None means "not given".

    `turn_detection` and `transcription` can be set to null on purpose (manual turns,
    transcripts off), so for those two "not given" is `UNSET` and None is a real value.
    """

    instructions: str | None = None
    output_modalities: tuple[Modality, ...] | None = None
    input_format: AudioFormat | None = None
    output_format: AudioFormat | None = None
    turn_detection: ServerVad | UnsetType | None = UNSET
    transcription: Transcription | UnsetType | None = UNSET
    voice: str | None = None
    max_output_tokens: MaxTokens | None = None


class SessionAudioInput(msgspec.Struct, frozen=True, kw_only=True):
    format: AudioFormat
    transcription: Transcription | None
    noise_reduction: None = None
    turn_detection: ServerVad | None


class SessionAudioOutput(msgspec.Struct, frozen=True, kw_only=True):
    format: AudioFormat
    voice: str
    speed: float = 1.0


class SessionAudio(msgspec.Struct, frozen=True, kw_only=True):
    input: SessionAudioInput
    output: SessionAudioOutput


class SessionObject(msgspec.Struct, frozen=True, kw_only=True):
    """The GA `session` object of `session.created` / `session.updated`.

    Fields we do not implement (tools, tracing, prompt) are rendered with their "off"
    values so clients that read them find the key.
    """

    type: Literal["realtime"] = "realtime"
    object: Literal["realtime.session"] = "realtime.session"
    id: str
    model: str
    output_modalities: tuple[Modality, ...]
    instructions: str
    tools: tuple[()] = ()
    tool_choice: str = "auto"
    max_output_tokens: MaxTokens
    tracing: None = None
    prompt: None = None
    include: None = None
    expires_at: int = 0
    audio: SessionAudio


class SessionConfig(msgspec.Struct, frozen=True, kw_only=True):
    """The whole session configuration, with the defaults a new session starts from."""

    instructions: str = ""
    output_modalities: tuple[Modality, ...] = ("audio",)
    input_format: AudioFormat = PCM16
    output_format: AudioFormat = PCM16
    turn_detection: ServerVad | None = ServerVad()
    transcription: Transcription | None = None
    voice: str = "alloy"
    max_output_tokens: MaxTokens = "inf"

    @property
    def audio_output(self) -> bool:
        return "audio" in self.output_modalities

    def apply(self, patch: SessionPatch) -> SessionConfig:
        """Return the configuration after `patch`; fields the patch does not give stay."""
        changes: dict[str, object] = {}
        for name in (
            "instructions",
            "output_modalities",
            "input_format",
            "output_format",
            "voice",
            "max_output_tokens",
        ):
            value = getattr(patch, name)
            if value is not None:
                changes[name] = value
        if patch.turn_detection is not UNSET:
            changes["turn_detection"] = patch.turn_detection
        if patch.transcription is not UNSET:
            changes["transcription"] = patch.transcription
        return msgspec.structs.replace(self, **changes) if changes else self

    def to_session_object(self, *, session_id: str, model: str) -> SessionObject:
        return SessionObject(
            id=session_id,
            model=model,
            output_modalities=self.output_modalities,
            instructions=self.instructions,
            max_output_tokens=self.max_output_tokens,
            audio=SessionAudio(
                input=SessionAudioInput(
                    format=self.input_format,
                    transcription=self.transcription,
                    turn_detection=self.turn_detection,
                ),
                output=SessionAudioOutput(format=self.output_format, voice=self.voice),
            ),
        )

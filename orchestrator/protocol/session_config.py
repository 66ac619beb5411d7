"""Session configuration: one normalized shape for GA and beta `session.update` payloads.

The wire accepts two spellings (see `client_wire`); everything past the codec sees only
these types. `SessionConfig` is the full state, `SessionPatch` a partial update, and
`SessionConfig.apply` is the only way one becomes the other, so "what does an update do"
has a single, pure answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

import msgspec
from msgspec import UNSET, UnsetType

from statecharts.vocabulary import InterruptionMode

from .tools import FunctionTool, ToolChoice

__all__ = [
    "DEFAULT_BACKCHANNELS",
    "DEFAULT_INTERRUPT_WORDS",
    "EAGERNESS",
    "PCM16",
    "PCMA",
    "PCMU",
    "AudioFormat",
    "AudioFormatType",
    "Eagerness",
    "EagernessWaits",
    "Interruption",
    "InterruptionMode",
    "MaxTokens",
    "Modality",
    "SemanticVad",
    "ServerVad",
    "SessionAudio",
    "SessionAudioInput",
    "SessionAudioOutput",
    "SessionConfig",
    "SessionObject",
    "SessionPatch",
    "Transcription",
    "TurnDetection",
    "normalize_backchannel",
]

AudioFormatType = Literal["audio/pcm", "audio/pcmu", "audio/pcma"]
Modality = Literal["audio", "text"]
MaxTokens = int | Literal["inf"]


class AudioFormat(msgspec.Struct, frozen=True, kw_only=True):
    """A wire audio format, rendered as OpenAI's: `{type: "audio/pcm", rate: 24000}`, and the
    G.711 ones (always 8 kHz) without a `rate` (`{type: "audio/pcmu"}`)."""

    type: AudioFormatType
    # The sample rate of audio/pcm; UNSET (left out) for G.711.
    pcm_rate: int | UnsetType = msgspec.field(default=UNSET, name="rate")

    @property
    def rate(self) -> int:
        return self.pcm_rate if isinstance(self.pcm_rate, int) else 8000

    @property
    def bytes_per_ms(self) -> int:
        # pcm16 is two bytes a sample; G.711 one.
        width = 2 if self.type == "audio/pcm" else 1
        return width * self.rate // 1000


PCM16: Final = AudioFormat(type="audio/pcm", pcm_rate=24000)
PCMU: Final = AudioFormat(type="audio/pcmu")
PCMA: Final = AudioFormat(type="audio/pcma")


# InterruptionMode is the charts' word (statecharts/vocabulary.py), defined once there.

# Short acknowledgements that never interrupt in pause mode (docs/protocol.md, "Interruption
# policy"), already normalised (lower case, no punctuation): an overlap whose transcript is
# made only of these words is a backchannel.
DEFAULT_BACKCHANNELS: Final[tuple[str, ...]] = (
    "yeah", "yes", "yep", "yup", "ya", "uh-huh", "uh huh", "mhm", "mm-hmm", "mm hmm", "mm",
    "hmm", "hm", "okay", "ok", "right", "alright", "all right", "sure", "i see", "got it",
    "cool", "nice", "wow", "oh", "ah", "uh", "um", "true", "exactly", "indeed",
)  # fmt: skip
# Words that interrupt at once in pause mode, whatever `min_speech_ms` says (docs/protocol.md,
# "Interruption policy"): a listener who says "wait" wants the answer stopped now, and the
# first partial that holds one decides, about 300 ms after its onset. Normalised as above; an
# entry matches whole words anywhere in the transcript ("okay wait" is one).
DEFAULT_INTERRUPT_WORDS: Final[tuple[str, ...]] = (
    "stop", "wait", "no", "nope", "hold on", "hang on", "actually", "excuse me", "sorry",
    "pardon", "hello", "hey", "cancel", "listen", "repeat",
)  # fmt: skip


class Interruption(msgspec.Struct, frozen=True, kw_only=True):
    """`turn_detection.interruption` (v2): what speech does while the assistant speaks.

    `immediate` is v1's rule 1; `pause` pauses the reply and decides with one
    `overlap.decision`. `backchannels` (the words that never interrupt) and
    `interrupt_words` (the words that interrupt at once) are this server's extensions,
    normalised at the edge.
    """

    mode: InterruptionMode = "immediate"
    min_speech_ms: int = 400
    resume_after_ms: int = 1500
    backchannels: tuple[str, ...] = DEFAULT_BACKCHANNELS
    interrupt_words: tuple[str, ...] = DEFAULT_INTERRUPT_WORDS


def normalize_backchannel(text: str) -> str:
    """Lower case, punctuation other than inner hyphens dropped, spaces collapsed: how
    backchannel entries and overlap transcripts are compared ("Uh-huh." is "uh-huh")."""
    kept = "".join(c if c.isalnum() or c in "-'" else " " for c in text.lower())
    return " ".join(word.strip("-'") for word in kept.split() if word.strip("-'"))


class ServerVad(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="server_vad"):
    """Silence-based turn detection; defaults are OpenAI's.

    `interruption` and `preemptive_response` (v2) are UNSET unless the client sent them: then
    they are not rendered, and a v1 client sees exactly v1's session object (`policy` and
    `preemptive` are the effective values).
    """

    threshold: float = 0.5
    prefix_padding_ms: int = 300
    silence_duration_ms: int = 500
    create_response: bool = True
    interrupt_response: bool = True
    idle_timeout_ms: int | None = None
    interruption: Interruption | UnsetType = UNSET
    preemptive_response: bool | UnsetType = UNSET

    @property
    def type(self) -> Literal["server_vad"]:
        return "server_vad"  # the tag, rendered first

    @property
    def policy(self) -> Interruption:
        return Interruption() if isinstance(self.interruption, UnsetType) else self.interruption

    @property
    def preemptive(self) -> bool:
        return self.preemptive_response is True


Eagerness = Literal["low", "medium", "high", "auto"]


@dataclass(frozen=True, slots=True)
class EagernessWaits:
    """semantic_vad's numbers for one eagerness (orchestrator/session/turns/end_of_turn.py
    rules 2-3): the score (Smart Turn's completion probability with the words' say) at which
    a pause is judged an end; the silence such a sure pause must still reach (people pause
    between two sentences of one turn, and Smart Turn calls the first one complete); the
    silence that ends a pause left open; and OpenAI's longest wait after speech stops, only a
    ceiling here."""

    threshold: float
    sure_wait_ms: int
    unsure_wait_ms: int
    longest_wait_ms: int


# Chosen on human held turns by `python -m bench.turn_policy` (docs/benchmarks.md "End of
# turn: the sound and the words"): a low mean commit latency with about 5% (low), 10%
# (medium) and 20% (high) of held turns cut off. The longest waits are OpenAI's; auto is
# medium.
_MEDIUM: Final = EagernessWaits(0.85, sure_wait_ms=600, unsure_wait_ms=2000, longest_wait_ms=4000)
EAGERNESS: Final[dict[Eagerness, EagernessWaits]] = {
    "low": EagernessWaits(0.85, sure_wait_ms=1000, unsure_wait_ms=2500, longest_wait_ms=8000),
    "medium": _MEDIUM,
    "high": EagernessWaits(0.85, sure_wait_ms=500, unsure_wait_ms=1200, longest_wait_ms=2000),
    "auto": _MEDIUM,
}


class SemanticVad(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="semantic_vad"):
    """`semantic_vad` (v2, OpenAI's fields): a turn-completion model on the user's audio ends
    the turn at a pause, or the eagerness's longest wait does (docs/protocol.md).

    The VAD under it runs with OpenAI's server_vad defaults (`threshold`, `prefix_padding_ms`
    below); `silence_duration_ms` is the longest wait, the silence that ends a turn whatever
    the model says. None of these is rendered: the session object shows OpenAI's fields.
    """

    eagerness: Eagerness = "auto"
    create_response: bool = True
    interrupt_response: bool = True
    interruption: Interruption | UnsetType = UNSET
    preemptive_response: bool | UnsetType = UNSET

    @property
    def type(self) -> Literal["semantic_vad"]:
        return "semantic_vad"  # the tag, rendered first

    @property
    def threshold(self) -> float:
        return 0.5

    @property
    def prefix_padding_ms(self) -> int:
        return 300

    @property
    def waits(self) -> EagernessWaits:
        return EAGERNESS[self.eagerness]

    @property
    def silence_duration_ms(self) -> int:
        return self.waits.longest_wait_ms

    @property
    def idle_timeout_ms(self) -> int | None:
        return None

    @property
    def policy(self) -> Interruption:
        return Interruption() if isinstance(self.interruption, UnsetType) else self.interruption

    @property
    def preemptive(self) -> bool:
        return self.preemptive_response is True


TurnDetection = ServerVad | SemanticVad


NoiseReductionType = Literal["near_field", "far_field"]


class NoiseReduction(msgspec.Struct, frozen=True, kw_only=True):
    """OpenAI's `audio.input.noise_reduction`: a noise suppressor on the input audio before
    turn detection, transcription and the model (`near_field`: a headset or a close
    microphone, `far_field`: a laptop or a conference room)."""

    type: NoiseReductionType


class EchoCancellation(msgspec.Struct, frozen=True, kw_only=True):
    """`audio.input.echo_cancellation` (our extension): the server cancels the echo of its
    own output in the input audio before turn detection, transcription and the model
    (docs/protocol.md, "Echo cancellation"). `server`: WebRTC's AEC3, the reference being the
    output audio as the client plays it."""

    type: Literal["server"] = "server"


class Transcription(msgspec.Struct, frozen=True, kw_only=True):
    """Input audio transcription settings; their presence turns transcripts on."""

    model: str | None = None
    language: str | None = None
    prompt: str | None = None


class RetentionRatio(
    msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="retention_ratio"
):
    """OpenAI's `truncation: {type: "retention_ratio", retention_ratio}`: when the history must
    be cut, cut it down to this fraction of each limit at once (fewer, larger cuts: the
    prompt's unchanged prefix lasts longer)."""

    retention_ratio: float


# "auto": rule 6's pruning as is. ("disabled" is refused at the edge: a session's history
# is always bounded here.)
Truncation = Literal["auto"] | RetentionRatio


class SessionPatch(msgspec.Struct, frozen=True, kw_only=True):
    """A normalized `session.update`. None means "not given".

    `turn_detection` and `transcription` can be set to null on purpose (manual turns,
    transcripts off), so for those two "not given" is `UNSET` and None is a real value.
    """

    instructions: str | None = None
    output_modalities: tuple[Modality, ...] | None = None
    input_format: AudioFormat | None = None
    output_format: AudioFormat | None = None
    turn_detection: TurnDetection | UnsetType | None = UNSET
    transcription: Transcription | UnsetType | None = UNSET
    voice: str | None = None
    max_output_tokens: MaxTokens | None = None
    tools: tuple[FunctionTool, ...] | None = None
    tool_choice: ToolChoice | None = None
    truncation: Truncation | None = None
    noise_reduction: NoiseReduction | UnsetType | None = UNSET
    echo_cancellation: EchoCancellation | UnsetType | None = UNSET


class SessionAudioInput(msgspec.Struct, frozen=True, kw_only=True):
    format: AudioFormat
    transcription: Transcription | None
    noise_reduction: NoiseReduction | None = None
    turn_detection: TurnDetection | None
    # Our extension, left out while off so that the object is exactly OpenAI's then.
    echo_cancellation: EchoCancellation | UnsetType = UNSET


class SessionAudioOutput(msgspec.Struct, frozen=True, kw_only=True):
    format: AudioFormat
    voice: str
    speed: float = 1.0


class SessionAudio(msgspec.Struct, frozen=True, kw_only=True):
    input: SessionAudioInput
    output: SessionAudioOutput


class SessionObject(msgspec.Struct, frozen=True, kw_only=True):
    """The GA `session` object of `session.created` / `session.updated`.

    Fields we do not implement (tracing, prompt) are rendered with their "off" values so
    clients that read them find the key. `truncation` is OpenAI's default, "auto": old turns
    leave the model's context when it is full (here: rule 6's pruning).
    """

    type: Literal["realtime"] = "realtime"
    object: Literal["realtime.session"] = "realtime.session"
    id: str
    model: str
    output_modalities: tuple[Modality, ...]
    instructions: str
    tools: tuple[FunctionTool, ...] = ()
    tool_choice: ToolChoice = "auto"
    max_output_tokens: MaxTokens
    tracing: None = None
    prompt: None = None
    include: None = None
    truncation: Truncation = "auto"
    expires_at: int = 0
    audio: SessionAudio


class SessionConfig(msgspec.Struct, frozen=True, kw_only=True):
    """The whole session configuration, with the defaults a new session starts from."""

    instructions: str = ""
    output_modalities: tuple[Modality, ...] = ("audio",)
    input_format: AudioFormat = PCM16
    output_format: AudioFormat = PCM16
    turn_detection: TurnDetection | None = ServerVad()
    transcription: Transcription | None = None
    voice: str = "alloy"
    max_output_tokens: MaxTokens = "inf"
    tools: tuple[FunctionTool, ...] = ()
    tool_choice: ToolChoice = "auto"
    truncation: Truncation = "auto"
    # Off unless asked for, as OpenAI's noise_reduction: most clients that play through a
    # speaker (browsers, WebRTC stacks) cancel their own echo, and two cancellers in a row
    # only cost latency and speech quality (docs/protocol.md, "Echo cancellation").
    noise_reduction: NoiseReduction | None = None
    echo_cancellation: EchoCancellation | None = None

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
            "tools",
            "tool_choice",
            "truncation",
        ):
            value = getattr(patch, name)
            if value is not None:
                changes[name] = value
        if patch.turn_detection is not UNSET:
            changes["turn_detection"] = patch.turn_detection
        if patch.transcription is not UNSET:
            changes["transcription"] = patch.transcription
        if patch.noise_reduction is not UNSET:
            changes["noise_reduction"] = patch.noise_reduction
        if patch.echo_cancellation is not UNSET:
            changes["echo_cancellation"] = patch.echo_cancellation
        return msgspec.structs.replace(self, **changes) if changes else self

    def to_session_object(self, *, session_id: str, model: str) -> SessionObject:
        return SessionObject(
            id=session_id,
            model=model,
            output_modalities=self.output_modalities,
            instructions=self.instructions,
            tools=self.tools,
            tool_choice=self.tool_choice,
            max_output_tokens=self.max_output_tokens,
            truncation=self.truncation,
            audio=SessionAudio(
                input=SessionAudioInput(
                    format=self.input_format,
                    transcription=self.transcription,
                    noise_reduction=self.noise_reduction,
                    turn_detection=self.turn_detection,
                    echo_cancellation=self.echo_cancellation or UNSET,
                ),
                output=SessionAudioOutput(format=self.output_format, voice=self.voice),
            ),
        )

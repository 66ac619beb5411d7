"""Where the models find their board, caches and weights: one typed object, read from the env.

The launcher (`turntaker triton`) sets these variables for the server; every stub process
inherits them. In the GPU image they have fixed defaults (see Dockerfile.triton).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

from turntaker_models.cascade.voices import DEFAULT_VOICE, check_voice

BOARD_ENV = "TURNTAKER_CANCEL_BOARD"
CACHE_ENV = "TURNTAKER_CACHE_DIR"
OMNI_WEIGHTS_ENV = "TURNTAKER_OMNI_WEIGHTS"
THREADS_ENV = "TURNTAKER_MODEL_THREADS"
NULL_SPEED_ENV = "TURNTAKER_NULL_SPEED"
NULL_AUDIO_ENV = "TURNTAKER_NULL_AUDIO"
NULL_AUDIO_LOOP_ENV = "TURNTAKER_NULL_AUDIO_LOOP"
PROMPT_LOG_ENV = "TURNTAKER_PROMPT_LOG"
OMNI_BATCHING_ENV = "TURNTAKER_OMNI_BATCHING"
OMNI_MAX_STREAMS_ENV = "TURNTAKER_OMNI_MAX_STREAMS"
OMNI_MAX_POSITIONS_ENV = "TURNTAKER_OMNI_MAX_POSITIONS"
TTS_VOICE_ENV = "TURNTAKER_TTS_VOICE"
DEFAULT_BOARD = Path("/dev/shm/turntaker-cancel-board")


def default_cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "turntaker"


def check_null_speed(speed: float) -> float:
    """`speed` if it can divide the `null` model's delays: finite and above 0; else ValueError.

    Shared by the launcher, its CLI and the model, so a bad speed is refused with one message
    before a server starts, not as a model that fails to load.
    """
    if not (math.isfinite(speed) and speed > 0):
        raise ValueError(f"null speed must be a finite number above 0, got {speed!r}")
    return speed


def _flag(raw: str | None, default: bool) -> bool:
    """An on/off variable: unset or empty is `default`; 0, false, no, off are off."""
    if not raw or not raw.strip():
        return default
    return raw.strip().lower() not in ("0", "false", "no", "off")


@dataclass(frozen=True)
class ModelSettings:
    board_path: Path
    cache_dir: Path
    omni_weights: Path | None
    threads: int
    # Divides every delay of the benchmark model `null` (1000: a thousand times real time).
    null_speed: float = 1.0
    # A 24 kHz mono 16-bit WAV that `null` answers with instead of its tone (a voice: the echo
    # bench's answers must sound like speech); None: the tone.
    null_audio: Path | None = None
    # With `null_audio`: each response plays the recording from its start and ends with it
    # (False), or repeats it until the response's max_tokens chunks are sent (True).
    null_audio_loop: bool = False
    # The prompt journal (turntaker_models/omni/prompt_journal.py): one JSON line per request the
    # thinker accepts, the layout of the prompt it ran; None: no journal.
    prompt_log: Path | None = None
    # Qwen3-Omni's stages step their streams together (one forward per step over every ready
    # stream: turntaker_models/omni/batcher.py); False: each stream runs its own forwards, one
    # stream at a time per forward (the old way, kept to measure against).
    omni_batching: bool = True
    # Streams each omni stage serves at once (its KV slots); one more is refused with an error.
    omni_max_streams: int = 32
    # Positions (prompt + answer) a stream's KV slot holds in the thinker and in the talker.
    omni_max_positions: int = 4096
    # The cascade `tts` stage's voice for requests that name none of ours (OpenAI's names
    # included): Piper's `joe` or a flite voice (turntaker_models/cascade/voices.py).
    tts_voice: str = DEFAULT_VOICE

    def __post_init__(self) -> None:
        check_null_speed(self.null_speed)
        check_voice(self.tts_voice)
        if self.omni_max_streams < 1 or self.omni_max_positions < 16:
            raise ValueError(
                f"omni streams must be >= 1 and positions >= 16, got {self.omni_max_streams} "
                f"and {self.omni_max_positions}"
            )

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> ModelSettings:
        e = dict(os.environ if env is None else env)
        omni = e.get(OMNI_WEIGHTS_ENV)
        prompt_log = e.get(PROMPT_LOG_ENV)
        null_audio = e.get(NULL_AUDIO_ENV)
        raw_speed = e.get(NULL_SPEED_ENV) or "1"
        try:
            null_speed = float(raw_speed)
        except ValueError:
            raise ValueError(
                f"{NULL_SPEED_ENV} must be a number above 0, got {raw_speed!r}"
            ) from None
        return cls(
            board_path=Path(e.get(BOARD_ENV) or DEFAULT_BOARD),
            cache_dir=Path(e.get(CACHE_ENV) or default_cache_dir()),
            omni_weights=Path(omni) if omni else None,
            threads=max(1, int(e.get(THREADS_ENV) or 1)),
            null_speed=null_speed,
            null_audio=Path(null_audio) if null_audio else None,
            null_audio_loop=_flag(e.get(NULL_AUDIO_LOOP_ENV), default=False),
            prompt_log=Path(prompt_log) if prompt_log else None,
            omni_batching=_flag(e.get(OMNI_BATCHING_ENV), default=True),
            omni_max_streams=int(e.get(OMNI_MAX_STREAMS_ENV) or 32),
            omni_max_positions=int(e.get(OMNI_MAX_POSITIONS_ENV) or 4096),
            tts_voice=e.get(TTS_VOICE_ENV) or DEFAULT_VOICE,
        )

    def environment(self) -> dict[str, str]:
        """The variables that hand these settings to a server's stub processes."""
        env = {
            BOARD_ENV: str(self.board_path),
            CACHE_ENV: str(self.cache_dir),
            THREADS_ENV: str(self.threads),
            # repr: the exact float comes back out of float() in the stub.
            NULL_SPEED_ENV: repr(self.null_speed),
            OMNI_BATCHING_ENV: "1" if self.omni_batching else "0",
            OMNI_MAX_STREAMS_ENV: str(self.omni_max_streams),
            OMNI_MAX_POSITIONS_ENV: str(self.omni_max_positions),
            TTS_VOICE_ENV: self.tts_voice,
        }
        if self.omni_weights is not None:
            env[OMNI_WEIGHTS_ENV] = str(self.omni_weights)
        if self.prompt_log is not None:
            env[PROMPT_LOG_ENV] = str(self.prompt_log)
        if self.null_audio is not None:
            env[NULL_AUDIO_ENV] = str(self.null_audio)
            env[NULL_AUDIO_LOOP_ENV] = "1" if self.null_audio_loop else "0"
        return env

"""The `tts` stage's voices by name: which engine speaks a GenerationParameters.voice.

Rules (names only: no engine is loaded here, so settings can check a name cheaply):
- Piper voices (`joe`, the CC0 `en_US-joe-medium`, piper.py) and flite's own voices (flite.py)
  are chosen by their names, case and surrounding spaces ignored.
- Every other name (OpenAI's Realtime names, "default", anything unknown) gets the default
  voice: the server has one Piper voice, and it is its best one, so a client that asks for
  "alloy" (OpenAI's default, and the sessions' default) or "echo" hears it rather than a
  flite voice picked for a name. `ModelSettings.tts_voice` chooses the default.
"""

from __future__ import annotations

PIPER_VOICES = ("joe",)
FLITE_VOICES = ("slt", "kal", "kal16", "awb", "rms")
VOICES = PIPER_VOICES + FLITE_VOICES
DEFAULT_VOICE = "joe"
# OpenAI Realtime voice names: known, and all spoken by the default voice (see above).
OPENAI_VOICES = (
    "alloy",
    "ash",
    "ballad",
    "cedar",
    "coral",
    "echo",
    "fable",
    "marin",
    "nova",
    "onyx",
    "sage",
    "shimmer",
    "verse",
)


def check_voice(name: str) -> str:
    """`name` if it is one of ours (a default must be a real voice); else ValueError."""
    if name not in VOICES:
        raise ValueError(f"tts voice must be one of {', '.join(VOICES)}, got {name!r}")
    return name


def resolve(name: str, default: str = DEFAULT_VOICE) -> str:
    """The voice that speaks for `name`: ours by name, anything else `default`."""
    key = name.strip().lower()
    return key if key in VOICES else check_voice(default)

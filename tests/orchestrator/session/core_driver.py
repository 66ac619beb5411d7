"""Driving a `SessionCore` in memory as its session actor would, for the core's tests: the
caller's clock follows the client's audio, and every `DetectSpeech` is answered at once with
the probability the test says the audio has."""

from __future__ import annotations

from typing import Any

from orchestrator.protocol import client as ce
from orchestrator.session.actions import DetectSpeech
from orchestrator.session.core import SessionCore, Step
from orchestrator.session.inputs import SpeechProbabilities

APPEND_MS = 32


def of(step: Step, cls: type[Any]) -> list[Any]:
    """The actions and events of `step` of type `cls`, in order."""
    return [o for o in (*step.actions, *step.events) if isinstance(o, cls)]


def types(step: Step) -> list[str]:
    return [str(type(e).__struct_config__.tag) for e in step.events]


class CoreDriver:
    def __init__(self, core: SessionCore) -> None:
        self.core = core
        self.now = 0
        self.last = core.open(0)

    def handle(self, event: Any) -> Step:
        self.last = self.core.handle(event, self.now)
        return self.last

    def speak(self, ms: int, prob: float, value: int = 1, append: bytes | None = None) -> Step:
        """`ms` of audio (every sample `value`, or every append `append`: 32 ms of pcm16) in
        32 ms appends, each answered at once with `prob`."""
        out = Step()
        chunk = append or int(value).to_bytes(2, "little", signed=True) * 24 * APPEND_MS
        for _ in range(ms // APPEND_MS):
            self.now += APPEND_MS
            step = self.handle(ce.InputAudioBufferAppend(audio=chunk))
            out = out + step
            for detect in of(step, DetectSpeech):
                answer = SpeechProbabilities((prob,) * len(detect.chunks), detect.chunk_end_ms)
                out = out + self.handle(answer)
        return out

"""Pause mode's overlap tracker: how long the speech over a reply lasts and what it says.

The session chart decides (statecharts/session.py: `sounds_like_interruption`, `ends_turn`,
`input_held`); this measures and asks, the way `detection.py` segments: numbers in, facts
and requests out. Rules (docs/protocol.md "Interruption policy"):
- Pure. The caller owns both clocks: the input clock (ms of client audio: VAD chunk ends) and
  the timer clock (`now_ms`, the one `ArmTimer` deadlines are on). No I/O, no audio here.
- An overlap opens at the speech onset that paused a reply (`onset` while closed) and closes
  at its one decision (`close`). An onset while open (new speech within the resume window)
  continues it: the resume timer is cancelled and a new speech part starts.
- `speech_ms` is voiced time on the input clock: from each part's onset chunk (prefix padding
  not counted) to the end of its last chunk heard as speech, summed over the overlap's parts.
- Partial transcripts: while speaking, a new one is asked each `partial_every_ms` (100) of
  `speech_ms` growth (so an interrupt word is heard ~100 ms after it is said), at most one
  in flight, each with a fresh token; an answer whose token
  is not the one in flight (an older overlap's, a superseded ask) is ignored. With no
  transcriber nothing is asked. The caller cuts the audio: the overlap's from its first onset
  with prefix padding (`audio_from_ms`), at most the latest `MAX_PARTIAL_MS`.
- `heard` is the latest answer, normalised and matched (`classify`): `urgent` when it holds an
  entry of `interrupt_words` anywhere, `backchannel` when it is made only of `backchannels`
  entries and hums, `noise` when nothing but laughs and sound tags ("Ha ha!", "[Laughter]")
  or nothing at all was said, else `words`; `nothing` before any answer. A failed
  transcription changes nothing. Words of a partial asked more than `FRESH_MS` (100) before
  `min_speech_ms` are stale: they wait for a fresher partial within the grace.
- An `urgent` answer asks the chart to judge at once, whatever `speech_ms` is: "wait" is an
  interruption at 250 ms; every other judgment waits for `min_speech_ms`.
- Grace: when `speech_ms` first reaches `min_speech_ms` with nothing heard, the chart is
  asked to judge with `waited=False` and a grace timer of `grace_ms` is armed if an ask is in
  flight; with none in flight there is nothing to wait for (`waited` at once). Its expiry, or
  any answer, asks the chart again.
- Resume: when the overlap's speech stops, the resume timer is armed for `resume_after_ms`
  after where the speech ended (the VAD's silence run counts towards it). Each arming has a
  token; a stale expiry is ignored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from orchestrator.protocol.session_config import Interruption, normalize_backchannel
from orchestrator.session.actions import ArmTimer, CancelTimer
from statecharts.vocabulary import Heard

__all__ = ["MAX_PARTIAL_MS", "OverlapFacts", "OverlapStep", "OverlapTracker", "classify"]

MAX_PARTIAL_MS: Final = 10_000
# Words of a partial asked this close to min_speech_ms judge at min_speech_ms.
FRESH_MS: Final = 100


# Whisper spells a hum as letters ("M-H-M-H.", "MMHMHMMH", "m m h n m") or as "Huh?": a word of
# nothing but m, h and n, or a "huh", is a hum, whatever the list says.
_HUM: Final = re.compile(r"[mhn]+(?:-[mhn]+)*|h+u+h+")
# ... and a laugh as its syllables ("Ha ha!", "Hehehehe", "Heh.", "Ahaha"): a word of two or
# more h-vowel syllables, or one of the laughs that are no English word, is a laugh. "he",
# "hi" and "ho" on their own stay words.
_LAUGH: Final = re.compile(r"a?(?:h[aeiou]+)(?:-?h[aeiou]+)+h?|ha+h?|he+h|hee+|ah(?:ha)+h?")
# Sound tags Whisper writes for what is not speech: "[Laughter]", "(coughs)", "*sighs*",
# "♪". What they hold is never a word said.
_TAG: Final = re.compile(r"\[[^\]]*\]|\([^)]*\)|\*[^*]*\*|♪+")


def classify(
    transcript: str, backchannels: tuple[str, ...], interrupt_words: tuple[str, ...] = ()
) -> Heard:
    """`urgent` when an interrupt entry is said (anywhere: "okay wait" is), else `backchannel`
    when every word belongs to a backchannel entry (entries may span words: "i see") or is a
    hum; `noise` when nothing was said but laughs and sound tags; else `words`."""
    said = normalize_backchannel(_TAG.sub(" ", transcript)).split()
    spoken = [w for w in said if not _LAUGH.fullmatch(w)]
    words = [w for w in spoken if not _HUM.fullmatch(w)]
    if any(_holds(words, entry.split()) for entry in interrupt_words):
        return "urgent"
    if not words:
        return "backchannel" if spoken else "noise"
    return "backchannel" if _cut_into(words, [entry.split() for entry in backchannels]) else "words"


def _holds(words: list[str], entry: list[str]) -> bool:
    """Whether `entry` occurs in `words` as whole consecutive words."""
    n = len(entry)
    return n > 0 and any(words[i : i + n] == entry for i in range(len(words) - n + 1))


def _cut_into(words: list[str], entries: list[list[str]]) -> bool:
    """Can `words` be cut into entries? (a transcript is a handful of words: tiny DP)"""
    fits = [False] * len(words) + [True]
    for i in range(len(words) - 1, -1, -1):
        fits[i] = any(words[i : i + len(e)] == e and fits[i + len(e)] for e in entries if e)
    return fits[0]


@dataclass(frozen=True, slots=True)
class OverlapFacts:
    """What the chart's guards read (passed as the event's keyword arguments)."""

    speech_ms: int
    heard: Heard
    waited: bool
    transcript: str | None


@dataclass(frozen=True, slots=True)
class OverlapStep:
    """What the caller does after feeding the tracker: ask for a partial transcript (with this
    token), carry out the timer actions, and ask the chart to judge."""

    ask: int | None = None
    timers: tuple[ArmTimer | CancelTimer, ...] = ()
    judge: bool = False


class OverlapTracker:
    __slots__ = (
        "_asked_at_ms",
        "_audio_from_ms",
        "_earlier_ms",
        "_grace_token",
        "_heard",
        "_heard_at_ms",
        "_in_flight",
        "_open",
        "_part_from_ms",
        "_part_to_ms",
        "_reached",
        "_resume_token",
        "_tokens",
        "_transcript",
        "_waited",
        "grace_ms",
        "partial_every_ms",
        "policy",
        "transcribe",
    )

    def __init__(
        self,
        policy: Interruption,
        *,
        transcribe: bool,
        grace_ms: int = 150,
        partial_every_ms: int = 100,
    ) -> None:
        self.policy = policy
        self.transcribe = transcribe
        self.grace_ms = grace_ms
        self.partial_every_ms = partial_every_ms
        self._tokens = 0
        self._open = False
        self._reset()

    def _reset(self) -> None:
        self._audio_from_ms = 0
        self._earlier_ms = 0
        self._part_from_ms: int | None = None
        self._part_to_ms = 0
        self._asked_at_ms: int | None = None
        self._in_flight: int | None = None
        self._heard: Heard = "nothing"
        # The speech_ms the answered partial was asked at: words heard in less than
        # min_speech_ms of speech are the start of a word more often than a word ("yeah" at
        # 200 ms reads "You"), so they wait for a partial asked at min_speech_ms.
        self._heard_at_ms = 0
        self._transcript: str | None = None
        self._waited = False
        self._reached = False
        self._grace_token: int | None = None
        self._resume_token: int | None = None

    def _token(self) -> int:
        self._tokens += 1
        return self._tokens

    # Queries ---------------------------------------------------------------------------
    @property
    def is_open(self) -> bool:
        return self._open

    @property
    def audio_from_ms(self) -> int:
        """Where the overlap's audio starts on the input clock (prefix padding included)."""
        return self._audio_from_ms

    @property
    def speech_ms(self) -> int:
        part = 0
        if self._part_from_ms is not None:
            part = max(self._part_to_ms - self._part_from_ms, 0)
        return self._earlier_ms + part

    @property
    def heard(self) -> Heard:
        """What the chart may judge on: `words` of a partial asked more than `FRESH_MS`
        before `min_speech_ms` count as nothing yet while a fresher one is on its way (within
        the grace). One asked within it holds nearly all the speech the fresher one would (300
        of 400 ms), and waiting for that one cost ~50 ms per decision."""
        stale = self._heard_at_ms < self.policy.min_speech_ms - FRESH_MS
        if self._heard == "words" and stale and not self._waited and self._in_flight is not None:
            return "nothing"
        return self._heard

    def facts(self) -> OverlapFacts:
        return OverlapFacts(self.speech_ms, self.heard, self._waited, self._transcript)

    # Inputs ----------------------------------------------------------------------------
    def onset(self, audio_start_ms: int, voiced_from_ms: int) -> OverlapStep:
        """Speech started while paused: the overlap opens, or (open) a new part begins."""
        if not self._open:
            self._reset()
            self._open = True
            self._audio_from_ms = audio_start_ms
        else:
            self._earlier_ms = self.speech_ms
        self._part_from_ms = self._part_to_ms = voiced_from_ms
        cancel = self._cancel_resume()
        return OverlapStep(timers=cancel)

    def voiced(self, voiced_to_ms: int, now_ms: int) -> OverlapStep:
        """The speech part is heard as speech up to `voiced_to_ms` (a chunk end)."""
        if not self._open or self._part_from_ms is None:
            return OverlapStep()
        self._part_to_ms = max(self._part_to_ms, voiced_to_ms)
        ask = self._ask()
        if self._reached or self.speech_ms < self.policy.min_speech_ms:
            return OverlapStep(ask=ask)
        self._reached = True
        timers: tuple[ArmTimer | CancelTimer, ...] = ()
        if self.heard == "nothing" and self._in_flight is None:
            self._waited = True  # nothing in flight: nothing to wait for
        elif self.heard == "nothing":
            self._grace_token = self._token()
            timers = (ArmTimer("overlap_grace", now_ms + self.grace_ms, self._grace_token),)
        return OverlapStep(ask=ask, timers=timers, judge=True)

    def grace_over(self, token: int) -> OverlapStep:
        if not self._open or token != self._grace_token:
            return OverlapStep()
        self._grace_token = None
        self._waited = True
        return OverlapStep(judge=True)

    def transcribed(self, token: int, transcript: str | None) -> OverlapStep:
        """A partial's answer (None: the transcription failed)."""
        if not self._open or token != self._in_flight:
            return OverlapStep()  # an older overlap's, or superseded
        self._in_flight = None
        if transcript is not None:
            self._transcript = transcript
            self._heard = classify(
                transcript, self.policy.backchannels, self.policy.interrupt_words
            )
            # One ask in flight at a time: the last ask is the one answered.
            self._heard_at_ms = self._asked_at_ms or 0
        elif self._reached:
            self._waited = True  # nothing will come: duration decides
        ask = self._ask() if self._part_from_ms is not None else None
        timers = self._cancel_grace() if self.heard != "nothing" or self._waited else ()
        # An interrupt word is judged at once; anything else from min_speech_ms on.
        return OverlapStep(ask=ask, timers=timers, judge=self._reached or self._heard == "urgent")

    def stopped(self, speech_end_ms: int, chunk_end_ms: int, now_ms: int) -> OverlapStep:
        """The overlap's speech stopped (the chart held it): arm the resume timer."""
        if not self._open:
            return OverlapStep()
        self._part_to_ms = max(self._part_to_ms, speech_end_ms)
        self._earlier_ms = self.speech_ms
        self._part_from_ms = None
        already = max(chunk_end_ms - speech_end_ms, 0)
        self._resume_token = self._token()
        deadline = now_ms + max(self.policy.resume_after_ms - already, 0)
        return OverlapStep(timers=(ArmTimer("overlap_resume", deadline, self._resume_token),))

    def resume_due(self, token: int) -> bool:
        if not self._open or token != self._resume_token:
            return False
        self._resume_token = None
        return True

    def close(self) -> tuple[CancelTimer, ...]:
        """The decision is made: forget the overlap; its answers and timers are stale now."""
        timers = self._cancel_grace() + self._cancel_resume()
        self._open = False
        self._reset()
        return timers

    # Helpers ---------------------------------------------------------------------------
    def _ask(self) -> int | None:
        if not self.transcribe or self._in_flight is not None:
            return None
        speech = self.speech_ms
        last = self._asked_at_ms if self._asked_at_ms is not None else 0
        # Past min_speech_ms the decision waits on the next partial (the last one abstained or
        # heard only backchannels so far): ask twice as often then.
        every = self.partial_every_ms // 2 if self._reached else self.partial_every_ms
        if speech - last < every:
            return None
        self._asked_at_ms = speech
        self._in_flight = self._token()
        return self._in_flight

    def _cancel_grace(self) -> tuple[CancelTimer, ...]:
        if self._grace_token is None:
            return ()
        self._grace_token = None
        return (CancelTimer("overlap_grace"),)

    def _cancel_resume(self) -> tuple[CancelTimer, ...]:
        if self._resume_token is None:
            return ()
        self._resume_token = None
        return (CancelTimer("overlap_resume"),)

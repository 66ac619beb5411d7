"""The session core's input processing part: echo cancellation and noise reduction.

`SessionCore` (core.py) owns one `InputProcessing`. It runs on the client's audio before
anything else hears it (turn detection, the buffer the transcription and the model take).

Rules:
1. Off unless the session asks (`audio.input.echo_cancellation`, `audio.input.noise_reduction`;
   session_config.py says why): then the audio is not touched, byte for byte.
2. Both work on pcm16 at the session's input rate, which must then be 24 kHz pcm16 in and out
   (the output is the echo's reference, sample for sample); `check` says what is wrong with
   a configuration before it is taken.
3. The reference is what the client was told to play (far_end.py): every audio delta the
   session sends, paused, resumed and cleared as the session's output is, each event placed
   where the client's input stood when its step went out (echo/input_clock.py: the caller's
   clock less the input's least lag, not the samples processed so far, which lag by however
   long appends waited); a playback ACK corrects it.
4. An append may end inside a sample: the odd byte waits for the next append, so any split of
   the same bytes gives the same samples.
5. Processing keeps the stream's length (an odd byte moves on to the next append): the
   canceller's framing delay is inside it, so the input clock is unchanged (the audio lags by
   that delay, at most a few ms).
6. Turning it off drops its state; turning it on again starts fresh (a new canceller learns
   the echo path again). Turned on mid-session, its far end starts where the session's input
   clock stands (`configure`'s `input_ms`), the clock VAD chunks and a page's ACKs
   (`input_ms`) count on: rules 7 and 8 compare the reference's times with theirs.
9. A clear names its response (`output_audio_buffer.cleared`'s, a truncated item's: the
   response whose audio that item carried): it drops the reference only while that
   response's audio is in it (far_end.py rule 4), so a client's late truncate of one reply
   never drops the next one's.
7. Over the echo a chunk must be clearly speech to count: while the reference played within
   the last `ECHO_TAIL_MS` (the room's delay and reverberation), a VAD probability below
   `ECHO_SPEECH` is scaled down under the session's threshold (`over_echo`). A canceller
   still learning the echo path (the first seconds of an answer) or losing it for a moment
   (the client's playout shifts after an underrun) leaves a residual that silero scores up
   to about 0.7; a user who speaks over the answer scores 0.95 and more within one or two
   chunks. The order of probabilities is kept, so silence stays silence. Rule 7 holds only
   while rule 10 has no measure of the chunk: once it has one, a chunk rule 10 lets through
   (a band 6 dB over the echo the reference predicts: power the answer does not explain)
   needs only the session's threshold, as without echo. Over the echo silero reaches the
   threshold a median 92 ms after the user's onset and 0.85 at 148 ms; rule 10 already
   rejects the residual rule 7 was set against. Measured (bench.echo_offline, 520 echo
   answers, 517 interruptions over them): false barge-ins unchanged (0/1/0/1/2 of 104 at
   -20/-10/-6/-3/0 dB), interruptions missed 9 -> 4, 0.5 s in 169 -> 172 of 174, onset ->
   interrupt median 248 -> 191 ms (179 ms with rule 8's wide margin). Only where rule 10
   hears `RELAX_DB` (7 dB; it was 9) or more: its prediction can fall short of a loud
   syllable of the answer in a far, reverberant room while the canceller loses it (the page
   at 0 dB, rt60 0.6 s at 1.5 m: 6.0 dB over at 0.7, and the answer cut 0.24 s before the
   user spoke); the page's interruptions passed with 7.7-30 dB, all those under 0.85 with 9
   or more. bench.echo_offline --seeds 13: false barge-ins unchanged, interruptions missed
   2 -> 2, onset -> interrupt median 182 -> 193 ms. `RELAX_DB` is 7 dB since rule 10's
   filter learns from zero and trains only once it fits the echo (echo/double_talk.py rules
   7 and 8): the page's syllables 6.0-7.4 dB over were the old filter's, which started at an
   echo as loud as the answer; with this one the page cut 1 of 100 echo-alone answers at
   7 dB (two runs of bench.echo_page --runs 25; at -10 dB), and in memory 9 -> 7 dB took
   onset -> interrupt from 120 to 108 ms on a replay of the recorded decision inputs (its
   chunk clock about 50 ms under the bench's; false barge-ins and misses unchanged).
8. Over the echo a chunk must also be loud enough to be the user's (echo/residual.py): a
   chunk rule 7 lets through is scaled under the threshold all the same when its cleaned
   level is more than `MARGIN_DB` under the echo's level at the microphone, which chunks of
   echo alone (the reference played within `ECHO_FRESH_MS`, the VAD under the threshold)
   keep measuring. Where rule 10 hears clearly more than the echo (its excess `CLEAR_DB`,
   13 dB, or more, every band trained) the margin is `WIDE_MARGIN_DB` (12 dB): the canceller
   takes more of a user it has begun to cancel as echo, and a residual is never 13 dB over
   the echo a trained prediction explains. Measured as rule 7's note: false barge-ins
   unchanged, onset -> interrupt median 191 -> 179 ms (the wide margin in every chunk: 3-8
   false barge-ins of 104 at -3 or 0 dB).
10. Over the echo a chunk must also hold more than the echo (echo/double_talk.py): a chunk
   rules 7 and 8 let through is scaled under the threshold all the same when no band of the
   microphone's power is `DOUBLE_TALK_DB` over the echo the reference predicts there. The
   residual a canceller leaves in a far, reverberant room (its filter shorter than the
   room's tail) is loud and speech-like, so rules 7 and 8 pass it; its power is still the
   answer's, which the prediction explains; a user's voice puts power where the answer has
   none. Measured in memory with the live bench's timing (bench/echo_offline.py, 520 echo
   answers and 512 interruptions over them, both voices, -20 to 0 dB): false barge-ins
   52 -> 14, interruptions missed 3 -> 8, onset -> interrupt median 225 -> 248 ms. A chunk
   less than `RELAX_DB` over the echo counts only as the second in a row `DOUBLE_TALK_DB`
   over it: a loud syllable of the answer after a pause came 6.2 and 7.4 dB over the
   prediction for one chunk, at 0.85 and more, the canceller losing it, and cut the page's
   answer (bench.echo_page, 0 dB); a user stays over the echo for longer. Measured, bench.
   echo_offline --seeds 13: false barge-ins 0/1/0/1/2 -> 0/0/0/1/1 of 104 at -20/-10/-6/-3/0
   dB, interruptions missed 2 -> 2, onset -> interrupt median 193 -> 197 ms.
11. Rules 8 and 10 measure the input only while the echo may still be heard (the reference
   played within `LINGER_MS`, more than rule 7's tail and rule 10's window): the rest of a
   conversation (the user speaking, silence) costs the canceller alone.
12. An append's DSP (the canceller or the suppressor: AEC3 is most of the echo path's CPU)
   is split from its bookkeeping, so the I/O layer can run it off its event loop while the
   rules above run on it: `prepare(raw)` does the bookkeeping (rules 3-5: the odd byte, the
   reference's samples for this append) and returns the `InputDsp`, whose `run()` touches
   the session's processors and nothing else; `clean` of the same bytes then takes its
   output. Between the two nothing else may be handled (the caller runs them back to back;
   anything else is a bug, refused). `clean` alone does all three at once. Measured
   (bench.load --echo on, two cores): the whole step on a worker thread made every append's
   Python wait for the GIL behind the event loop, and real time ended at 20 sessions; the
   step inline, 30; AEC3 alone on the thread, the core's Python inline, more (docs/
   benchmarks.md, "Echo: what was measured and changed"). Each hand-over of the GIL costs
   the thread up to a switch interval while the loop is busy (an append's AEC3 alone: 1.1
   ms on an idle interpreter, 9.6 ms beside a busy thread), so rules 8 and 10's measures,
   which need the GIL, stay in the step: rule 10's filter is compiled (echo/double_talk.py
   rule 6) and costs the loop about 1 us a frame.
13. Rules 7, 8 and 10 let through a chunk that ends `SURE_CHUNKS` chunks in a row (256 ms)
   at `SURE_SPEECH` or more: a user at the echo's own level, in its spectrum, whom the
   filter has begun to track (rule 10's NLMS learns any power under its 6 dB freeze) and the
   canceller to take (rule 8), was held back all the while silero was sure of them (bench
   omni/interruption/0dB-120ms-rt0.2-0.1m, 0.5 s in: 0.99-1.00 from 0.6 s after the onset,
   rule 10's excess 0-2 dB, 11 dB under the echo's level); a residual is not that sure that
   long (4 or 5 chunks in a row at 0.99: 4 and 3 false barge-ins of 104 at 0 dB). Measured
   with rule 8's `CLEAR_DB` at 13 dB (was 15: the other user missed 0.5 s in counts at its
   tail, 13.9 dB over the echo; 12 dB: 2 false barge-ins at -3 dB), bench.echo_offline
   --seeds 13: false barge-ins unchanged, interruptions missed 4 -> 1 of 517, 0.5 s in 172 ->
   174 of 174, onset -> interrupt median 179 -> 183 ms (the two count late). Only where rule
   10 heard `SURE_EXCESS_DB` (3 dB) over the echo in one chunk of the run (echo/
   sure_speech.py): the canceller losing the echo for a moment (the page's playout shifting)
   left a residual silero scored 0.99-1.00 for 8-10 chunks that rule 10's prediction
   explained to within 2 dB throughout, and cut the page's answer (bench.echo_page, 0 dB:
   3/25 false barge-ins); the page's users held back this way had 4-9 dB in their runs.
   Measured, bench.echo_offline --seeds 13: false barge-ins unchanged, interruptions missed
   1 -> 2 of 517, 0.5 s in 174 of 174, onset -> interrupt median 183 -> 182 ms.
14. Where no echo comes back (echo/no_echo.py: a headset, a client that cancels its own) the
   canceller is handed silence as its reference: handed the answer, AEC3 goes on suppressing
   the microphone as if the answer might be in it, and takes the user's voice with it (the
   onset, then 5-24 dB of what they say while the answer plays, the more the softer they
   speak against the answer). Rules 7, 8 and 10 measure against the reference as ever.
   Measured (bench.load, clients with no echo, echo on, 5 sessions): barge-in at the client
   117 -> 30 ms median (echo off: 14; a session's first answer has no verdict yet); in
   memory (bench.echo_offline) no session over an echo changed.
15. Each chunk rules 7-13 judge (one that ends within `ECHO_TAIL_MS` of the reference) gets a
   verdict (echo/verdict.py): their measures, which of them held it and when an ACK last
   moved the reference, returned beside the VAD's answer as turn detection hears it, for the
   session's notes. The rules only scale a probability; without the verdict a cut could not
   be traced to the rule that let its chunk through (bench/echo_page.py rule 6), nor could a
   deployment see which rule keeps its echo out (the service's `turntaker_echo_chunks_total`).
Pure: numbers and bytes in and out; the DSP is handed in (echo/processors.py).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from orchestrator.protocol import server as se
from orchestrator.protocol.session_config import PCM16, NoiseReductionType, SessionConfig
from orchestrator.session.echo.double_talk import DoubleTalk
from orchestrator.session.echo.far_end import FarEnd
from orchestrator.session.echo.input_clock import InputClock
from orchestrator.session.echo.no_echo import NoEcho
from orchestrator.session.echo.processors import Canceller, Pcm, Processors, Suppressor
from orchestrator.session.echo.residual import MARGIN_DB, EchoLevel, InputLevels
from orchestrator.session.echo.sure_speech import SureSpeech
from orchestrator.session.echo.verdict import EchoRule, EchoVerdict
from orchestrator.session.inputs import SpeechProbabilities

__all__ = ["InputDsp", "InputProcessing", "check"]

RATE = 24000
# Rule 3's bound: audio queued ahead of playback (a client buffers a few seconds at most).
MAX_AHEAD = 60 * RATE
RECENT = 8  # responses whose sent length is remembered
# Rule 7: how long after the reference an echo can still be heard, and the probability a chunk
# needs then to be speech.
ECHO_TAIL_MS = 600
ECHO_SPEECH = 0.85
# Rule 7: how far over the echo rule 10 must hear a chunk for the session's threshold to do.
RELAX_DB = 7.0
# Rule 8: a chunk this soon after the reference played, with no speech heard, is echo alone.
ECHO_FRESH_MS = 100
# Rule 10: how far over the echo the reference predicts a band of the microphone must be.
DOUBLE_TALK_DB = 6.0
# Rule 8's margin when rule 10's excess is at least `CLEAR_DB` with every band trained.
CLEAR_DB = 13.0
WIDE_MARGIN_DB = 12.0
# Rule 11: how long after the reference last played the input's levels are still measured.
LINGER_MS = 1000
CHUNK_MS = 32  # a VAD chunk (turns/detection.py)
# A reference sample at or under this (int16) plays nothing: -60 dBFS.
AUDIBLE = 33
SPANS = 256  # rule 7's memory of when the reference played: seconds of appends
# An ACK moves the reference only when it is further off than this (far_end.py rule 5),
ACK_TOLERANCE = RATE * 120 // 1000
# or by more than this when ACKs come at least this often (far_end.py rule 5).
FINE_TOLERANCE = RATE * 10 // 1000
FREQUENT_ACKS = RATE * 250 // 1000
# A delta this late after the last ran out plays on in step (far_end.py rule 2): a client's
# jitter buffer holds at least this much.
SLACK = RATE * 100 // 1000


@dataclass(frozen=True, slots=True)
class ConfigProblem:
    message: str
    param: str


def check(settings: SessionConfig) -> ConfigProblem | None:
    """Rule 2: what a configuration asks that cannot be done, or None."""
    if settings.echo_cancellation is not None and (
        settings.input_format != PCM16 or settings.output_format != PCM16
    ):
        return ConfigProblem(
            "Echo cancellation needs 24 kHz audio/pcm input and output (the output is its "
            "reference).",
            "session.audio.input.echo_cancellation",
        )
    if settings.noise_reduction is not None and settings.input_format != PCM16:
        return ConfigProblem(
            "Noise reduction needs 24 kHz audio/pcm input.",
            "session.audio.input.noise_reduction",
        )
    return None


K = TypeVar("K")
V = TypeVar("V")


def _remember(recent: dict[K, V], key: K, value: V) -> None:
    """`key` is the newest of `recent`, which keeps the RECENT newest keys."""
    recent.pop(key, None)
    recent[key] = value
    while len(recent) > RECENT:
        del recent[next(iter(recent))]


class InputDsp:
    """Rule 12: one append's DSP, to run once, on any one thread, before its append is
    handled."""

    __slots__ = (
        "_canceller",
        "_suppressor",
        "cancelled",
        "cleaned",
        "far",
        "near",
        "raw",
        "start",
    )

    def __init__(
        self,
        raw: bytes,
        near: Pcm,
        far: Pcm | None,
        start: int,
        canceller: Canceller | None,
        suppressor: Suppressor | None,
        cancelled: Pcm | None = None,
    ) -> None:
        """`far`: the reference (what rules 8 and 10 measure against); `cancelled`: what the
        canceller is handed as its reference (rule 14), `far` unless given."""
        self.raw, self.near, self.far, self.start = raw, near, far, start
        self.cancelled = far if cancelled is None else cancelled
        self._canceller, self._suppressor = canceller, suppressor
        self.cleaned: Pcm | None = None

    def run(self) -> None:
        if self.cleaned is not None:
            return
        if not self.near.size:
            self.cleaned = self.near
        elif self._canceller is not None and self.cancelled is not None:
            self.cleaned = self._canceller.process(self.near, self.cancelled)
        elif self._suppressor is not None:
            self.cleaned = self._suppressor.process(self.near)
        else:
            self.cleaned = self.near


class InputProcessing:
    def __init__(self, processors: Callable[[], Processors]) -> None:
        self._make = processors
        self._processors: Processors | None = None
        self._canceller: Canceller | None = None
        self._suppressor: Suppressor | None = None
        self._suppressor_kind: NoiseReductionType | None = None
        self._far: FarEnd | None = None
        self._odd = b""  # rule 4
        # Samples of each recent response sent so far: where its next delta starts (rule 3's
        # ACK correction counts from a response's first sample).
        self._sent: dict[str, int] = {}
        # Rule 9: the response each recent audio item belongs to.
        self._items: dict[str, str] = {}
        # Rule 7: the appends (input ms, start and end) in which the reference had sound.
        self._played_at: deque[tuple[int, int]] = deque(maxlen=SPANS)
        self._levels = InputLevels()  # rule 8
        self._clock = InputClock(RATE)  # rule 3
        self._echo_level = EchoLevel()
        self._double_talk = DoubleTalk()  # rule 10
        self._no_echo = NoEcho()  # rule 14
        self._pending: InputDsp | None = None  # rule 12
        self._sure = SureSpeech()  # rule 13
        self._over_before = False  # rule 10: the chunk before was `DOUBLE_TALK_DB` over the echo

    @property
    def active(self) -> bool:
        return self._canceller is not None or self._suppressor is not None

    @property
    def far_end(self) -> FarEnd | None:
        return self._far

    def configure(self, settings: SessionConfig, input_ms: int = 0) -> None:
        """Rules 1 and 6 (a configuration `check` passed), with the session's input clock at
        `input_ms`."""
        kind = settings.noise_reduction.type if settings.noise_reduction is not None else None
        if settings.echo_cancellation is None:
            self._canceller = self._far = None
            self._sent.clear()
            self._items.clear()
            self._played_at.clear()
        elif self._canceller is None:
            self._canceller = self._dsp().canceller(RATE, kind)
            self._far = FarEnd(
                MAX_AHEAD,
                ACK_TOLERANCE,
                SLACK,
                FINE_TOLERANCE,
                FREQUENT_ACKS,
                position=input_ms * RATE // 1000,
            )
            self._levels, self._echo_level = InputLevels(), EchoLevel()
            self._double_talk = DoubleTalk()
            self._no_echo = NoEcho()
            self._sure.reset()
            self._over_before = False
            self._clock = InputClock(RATE)
            self._played_at.clear()
        else:
            self._canceller.noise_reduction = kind
        # With a canceller its own suppressor runs after it; without, one of its own.
        alone = kind if self._canceller is None else None
        if alone != self._suppressor_kind:
            self._suppressor_kind = alone
            self._suppressor = None if alone is None else self._dsp().suppressor(RATE, alone)
        if not self.active:
            self._odd = b""

    def _dsp(self) -> Processors:
        if self._processors is None:
            self._processors = self._make()
        return self._processors

    def prepare(self, raw: bytes) -> InputDsp | None:
        """Rule 12: the bookkeeping of the append `raw`, and its DSP to run before `clean(raw)`;
        None when input processing is off."""
        if not self.active:
            return None
        if self._pending is not None:
            raise RuntimeError("an append's DSP is prepared and its append not yet handled")
        self._pending = self._begin(raw)
        return self._pending

    def clean(self, raw: bytes, now_ms: int) -> bytes:
        """The client's pcm16 bytes as the rest of the session hears them (rules 1, 4, 5),
        handled at the caller's `now_ms`; with its DSP already run if `prepare`d (rule 12)."""
        if not self.active:
            return raw
        job, self._pending = self._pending, None
        if job is None:
            job = self._begin(raw)
        elif job.raw is not raw:
            raise RuntimeError("an append was handled while another's DSP was prepared")
        job.run()
        assert job.cleaned is not None
        if job.near.size and job.far is not None and self._far is not None:
            end = self._far.position * 1000 // RATE
            since = self._since_played(end)
            if since is not None and since <= LINGER_MS:  # rule 11
                self._levels.add(job.start, job.near, job.cleaned)
                self._double_talk.add(job.start, job.near, job.far)
                self._no_echo.add(job.start, job.near, job.far)
            self._clock.heard(self._far.position, now_ms)
        return job.cleaned.astype("<i2").tobytes()

    def _begin(self, raw: bytes) -> InputDsp:
        """Rules 3-5: the append's samples and, with a canceller, the reference's for them."""
        data = self._odd + raw
        whole = len(data) - len(data) % 2
        self._odd = data[whole:]
        near: Pcm = np.frombuffer(data[:whole], dtype="<i2").astype(np.int16)
        far: Pcm | None = None
        cancelled: Pcm | None = None
        start = 0
        if near.size and self._canceller is not None and self._far is not None:
            start = self._far.position
            far = self._far.take(near.size)
            end = self._far.position * 1000 // RATE
            if int(np.abs(far).max()) > AUDIBLE:
                self._played_at.append((end - near.size * 1000 // RATE, end))
            if self._no_echo.none:  # rule 14
                cancelled = np.zeros_like(far)
        return InputDsp(raw, near, far, start, self._canceller, self._suppressor, cancelled)

    def heard(self, events: Iterable[se.ServerEvent], now_ms: int) -> None:
        """Rule 3: what the client was told, in order, sent at the caller's `now_ms`."""
        far = self._far
        if far is None:
            return
        at = self._clock.position(now_ms)
        for event in events:
            if isinstance(event, se.ResponseOutputAudioDelta):
                samples = np.frombuffer(event.delta, dtype="<i2").astype(np.int16)
                rid = event.response_id
                offset = self._sent.get(rid, 0)
                _remember(self._sent, rid, offset + samples.size)
                _remember(self._items, event.item_id, rid)
                far.sent(rid, samples, offset, at)
            elif isinstance(event, se.OutputAudioBufferPaused):
                far.pause()
            elif isinstance(event, se.OutputAudioBufferResumed):
                far.resume(at)
            elif isinstance(event, se.OutputAudioBufferCleared):
                far.clear(event.response_id)  # rule 9
            elif isinstance(event, se.ConversationItemTruncated):
                owner = self._items.get(event.item_id)
                if owner is not None:  # an item with no audio sent has none to clear
                    far.clear(owner)

    def over_echo(
        self, answer: SpeechProbabilities, threshold: float
    ) -> tuple[SpeechProbabilities, tuple[EchoVerdict, ...]]:
        """Rules 7, 8, 10 and 13: the VAD's answer as turn detection hears it, and rule 15's
        verdict for each chunk within the echo's tail."""
        if self._far is None or not self._played_at:
            return answer, ()
        heard = []
        verdicts = []
        for probability, end_ms in zip(answer.probabilities, answer.chunk_end_ms, strict=True):
            since = self._since_played(end_ms)
            if since is None or since > ECHO_TAIL_MS:
                self._sure.add(probability, None)
                self._over_before = False
                heard.append(probability)
                continue
            excess = self._double_talk.excess_db(end_ms - CHUNK_MS, end_ms)
            over = excess is not None and excess >= DOUBLE_TALK_DB
            # Rule 10: a little over the echo counts as the second chunk in a row over it.
            barely = over and excess is not None and excess < RELAX_DB
            over_alone = barely and not self._over_before
            self._over_before = over
            levels = self._levels.level(end_ms - CHUNK_MS, end_ms)
            held: tuple[EchoRule, ...] = ()
            vouched = self._sure.add(probability, excess)  # rule 13
            if not vouched:
                if levels is not None and since <= ECHO_FRESH_MS and probability < threshold:
                    self._echo_level.echo_only(levels[0])
                # Rule 8's margin widens where rule 10 hears clearly more than the echo.
                clear = excess is not None and excess >= CLEAR_DB and self._double_talk.trained
                margin = WIDE_MARGIN_DB if clear else MARGIN_DB
                quiet = levels is not None and not self._echo_level.loud_enough(levels[1], margin)
                echo_alone = (excess is not None and not over) or over_alone
                unclear = probability < ECHO_SPEECH and (excess is None or excess < RELAX_DB)
                tests: tuple[tuple[EchoRule, bool], ...] = (
                    (7, unclear),
                    (8, quiet),
                    (10, echo_alone),
                )
                held = tuple(rule for rule, holds in tests if holds)
            counted = probability
            if held:
                counted = min(probability, ECHO_SPEECH) * threshold / ECHO_SPEECH
                counted = min(counted, threshold * 0.999)
            heard.append(counted)
            moved_ms, moved_by_ms = self._moved(end_ms)
            verdicts.append(
                EchoVerdict(
                    chunk_end_ms=end_ms,
                    probability=probability,
                    heard=counted,
                    since_played_ms=since,
                    excess_db=excess,
                    microphone_db=None if levels is None else levels[0],
                    cleaned_db=None if levels is None else levels[1],
                    echo_db=self._echo_level.level_db,
                    trained=self._double_talk.trained,
                    held_by=held,
                    vouched=vouched,
                    reference_moved_ms=moved_ms,
                    reference_moved_by_ms=moved_by_ms,
                )
            )
        return SpeechProbabilities(tuple(heard), answer.chunk_end_ms), tuple(verdicts)

    def _moved(self, at_ms: int) -> tuple[int | None, int]:
        """Rule 15: how long before `at_ms` an ACK last moved the reference, and by how much
        (ms)."""
        far = self._far
        if far is None or far.moved_at is None:
            return None, 0
        return at_ms - far.moved_at * 1000 // RATE, far.moved_by * 1000 // RATE

    def _since_played(self, at_ms: int) -> int | None:
        """How long before `at_ms` the reference last had sound (0 while it has); None if not
        within what rule 7 remembers."""
        # Spans come in input order (starts and ends only grow), so the last one that began by
        # `at_ms` ended nearest it; a VAD chunk is among the newest, so this looks at one or two.
        for start, end in reversed(self._played_at):
            if start <= at_ms:
                return max(0, at_ms - end)
        return None

    def acknowledged(
        self, response_id: str, played_ms: int, now_ms: int, input_ms: float | None = None
    ) -> None:
        """Rule 3's correction, the ACK handled at the caller's `now_ms`: at the input sample
        it names (`input_ms`), exact; else where the input clock says the client stood, which
        is as late as the ACK waited on its way, so only a large difference moves it."""
        if self._far is None:
            return
        if input_ms is not None:
            self._far.played(response_id, played_ms, RATE, round(input_ms * RATE / 1000), True)
        else:
            self._far.played(response_id, played_ms, RATE, self._clock.position(now_ms))

"""The core's input processing (core_echo.py): what reaches the rest of the session, and the
echo reference it hands the canceller, driven through `SessionCore` in memory.

The DSP here records what it is given and takes the reference out sample for sample: these
tests check the core's wiring (which audio, which reference, when), not WebRTC's quality
(tests/orchestrator/session/echo/ does that on the real canceller).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

from orchestrator.protocol import client as ce
from orchestrator.protocol import server as se
from orchestrator.protocol.session_config import (
    PCMU,
    EchoCancellation,
    NoiseReduction,
    NoiseReductionType,
)
from orchestrator.protocol.session_config import SessionPatch as Patch
from orchestrator.session.actions import StartBackend
from orchestrator.session.core import CoreConfig, SessionCore, Step
from orchestrator.session.core_echo import DOUBLE_TALK_DB, RELAX_DB
from orchestrator.session.echo.processors import Canceller, Pcm, Suppressor
from orchestrator.session.echo.sure_speech import SURE_CHUNKS
from orchestrator.session.echo.verdict import EchoVerdict
from orchestrator.session.inputs import BackendAudio
from tests.orchestrator.session.core_driver import CoreDriver, of, types


@dataclass
class Recorded:
    near: list[Pcm] = field(default_factory=list)
    far: list[Pcm] = field(default_factory=list)
    made: list[str] = field(default_factory=list)


class Subtracting:
    def __init__(self, seen: Recorded, noise_reduction: NoiseReductionType | None) -> None:
        self.seen = seen
        self.noise_reduction = noise_reduction

    def process(self, near: Pcm, far: Pcm) -> Pcm:
        self.seen.near.append(near.copy())
        self.seen.far.append(far.copy())
        out = (near.astype(np.int32) - far).astype(np.int16)
        return out if self.noise_reduction is None else (out // 2).astype(np.int16)


class Halving:
    def process(self, near: Pcm) -> Pcm:
        return (near // 2).astype(np.int16)


@dataclass
class Dsp:
    seen: Recorded

    def canceller(self, rate: int, noise_reduction: NoiseReductionType | None) -> Canceller:
        self.seen.made.append(f"canceller {rate} {noise_reduction}")
        return Subtracting(self.seen, noise_reduction)

    def suppressor(self, rate: int, kind: NoiseReductionType) -> Suppressor:
        self.seen.made.append(f"suppressor {rate} {kind}")
        return Halving()


def core(seen: Recorded) -> CoreDriver:
    return CoreDriver(SessionCore("s", CoreConfig(processors=lambda: Dsp(seen))))


def update(driver: CoreDriver, **patch: object) -> list[se.ServerEvent]:
    return list(driver.handle(ce.SessionUpdate(session=Patch(**patch))).events)  # type: ignore[arg-type]


def pcm(values: list[int]) -> bytes:
    return np.array(values, dtype="<i2").tobytes()


def voice(hz: float = 1000.0, amplitude: int = 5000) -> bytes:
    """One 32 ms append of a user's voice: a tone, whole cycles (so appends join without a
    click), in a band the tests' answer (a constant: its power all under 400 Hz) leaves empty:
    rule 10's double talk."""
    t = np.arange(24 * 32) / 24000
    return (amplitude * np.sin(2 * np.pi * hz * t)).astype("<i2").tobytes()


def appended(driver: CoreDriver) -> bytes:
    """What the session's input buffer holds (what the transcription and the model get)."""
    return b"".join(part.audio for part in driver.core._turns.input._buffer.parts())


def test_rule1_off_the_audio_is_not_touched_and_no_dsp_is_built() -> None:
    seen = Recorded()
    driver = core(seen)
    raw = pcm([1, -2, 3, 400]) + b"\x07"
    driver.handle(ce.InputAudioBufferAppend(audio=raw))
    assert appended(driver) == raw
    assert seen.made == []


def test_rule2_echo_cancellation_needs_pcm16_in_and_out() -> None:
    driver = core(Recorded())
    update(driver, input_format=PCMU)
    events = update(driver, echo_cancellation=EchoCancellation())
    errors = [e for e in events if isinstance(e, se.ErrorEvent)]
    assert errors and errors[0].error.param == "session.audio.input.echo_cancellation"
    assert driver.core.settings.echo_cancellation is None, "the update is refused whole"


def test_rule3_the_reference_is_the_output_where_it_was_sent_and_a_clear_stops_it() -> None:
    seen = Recorded()
    driver = core(seen)
    update(driver, echo_cancellation=EchoCancellation(), turn_detection=None)
    assert seen.made == ["canceller 24000 None"]
    driver.handle(ce.InputAudioBufferAppend(audio=pcm([0] * 240)))  # 10 ms before the answer
    start = of(driver.handle(ce.ResponseCreate()), StartBackend)[0]
    answer = np.arange(1, 481, dtype=np.int16)
    driver.handle(BackendAudio(start.response_id, start.seq, answer.astype("<i2").tobytes()))
    # The microphone hears the answer (the echo) as it plays, and the reference is that answer
    # from where it was sent: the canceller takes it out sample for sample.
    echo = answer[:240]
    driver.handle(ce.InputAudioBufferAppend(audio=echo.astype("<i2").tobytes()))
    assert seen.far[-1].tolist() == echo.tolist()
    assert appended(driver)[480:] == pcm([0] * 240)
    driver.handle(ce.ResponseCancel())
    assert any(isinstance(e, se.OutputAudioBufferCleared) for e in driver.last.events)
    driver.handle(ce.InputAudioBufferAppend(audio=pcm([5] * 240)))
    assert seen.far[-1].tolist() == [0] * 240, "rule 3: cleared output is no reference at once"


def test_rule3_a_pause_holds_the_reference_and_a_resume_plays_it_on() -> None:
    seen = Recorded()
    driver = core(seen)
    update(driver, echo_cancellation=EchoCancellation(), turn_detection=None)
    start = of(driver.handle(ce.ResponseCreate()), StartBackend)[0]
    answer = np.arange(1, 961, dtype=np.int16)
    driver.handle(BackendAudio(start.response_id, start.seq, answer.astype("<i2").tobytes()))
    processing = driver.core._processing
    processing.heard([se.OutputAudioBufferPaused(response_id=start.response_id)], driver.now)
    driver.handle(ce.InputAudioBufferAppend(audio=pcm([0] * 100)))
    assert seen.far[-1].tolist() == [0] * 100
    processing.heard([se.OutputAudioBufferResumed(response_id=start.response_id)], driver.now)
    driver.handle(ce.InputAudioBufferAppend(audio=pcm([0] * 100)))
    assert seen.far[-1].tolist() == list(range(1, 101))


def test_rule4_an_odd_byte_waits_for_the_next_append() -> None:
    seen = Recorded()
    driver = core(seen)
    update(driver, noise_reduction=NoiseReduction(type="far_field"))
    raw = pcm([100, 200, 300])
    driver.handle(ce.InputAudioBufferAppend(audio=raw[:3]))
    driver.handle(ce.InputAudioBufferAppend(audio=raw[3:]))
    assert appended(driver) == pcm([50, 100, 150])


@pytest.mark.parametrize("kind", ["near_field", "far_field"])
def test_rule6_noise_reduction_comes_and_goes_with_the_setting(kind: str) -> None:
    seen = Recorded()
    driver = core(seen)
    update(driver, noise_reduction=NoiseReduction(type=kind))  # type: ignore[arg-type]
    driver.handle(ce.InputAudioBufferAppend(audio=pcm([100, -100])))
    update(driver, noise_reduction=None)
    driver.handle(ce.InputAudioBufferAppend(audio=pcm([100, -100])))
    assert appended(driver) == pcm([50, -50, 100, -100])
    assert seen.made == [f"suppressor 24000 {kind}"]


def test_rule6_with_a_canceller_noise_reduction_is_its_own_and_keeps_what_it_learnt() -> None:
    seen = Recorded()
    driver = core(seen)
    update(driver, echo_cancellation=EchoCancellation())
    update(driver, noise_reduction=NoiseReduction(type="near_field"))
    driver.handle(ce.InputAudioBufferAppend(audio=pcm([100, -100])))
    assert appended(driver) == pcm([50, -50])
    assert seen.made == ["canceller 24000 None"], "the same canceller, its suppressor set"
    update(driver, echo_cancellation=None)
    assert seen.made[-1] == "suppressor 24000 near_field", "alone, a suppressor of its own"


def _db(x: np.ndarray) -> float:
    return float(10 * np.log10(np.mean(np.square(x, dtype=np.float64)) + 1e-12))


def test_with_webrtc_the_echo_of_the_answer_leaves_the_input_and_the_user_stays() -> None:
    """The real DSP (the default `processors`): the answer's echo through a room, 120 ms late,
    is taken out of what the session hears; the user's own speech over it is kept."""
    from bench.rooms import EchoPath, Room
    from bench.speech import flite

    driver = CoreDriver(SessionCore("s"))
    update(driver, echo_cancellation=EchoCancellation(), turn_detection=None)
    answer = flite("The weather in Paris tomorrow will be sunny with a light breeze.")
    start = of(driver.handle(ce.ResponseCreate()), StartBackend)[0]
    pcm16 = (np.clip(answer, -1, 1) * 32767).astype("<i2")
    driver.handle(BackendAudio(start.response_id, start.seq, pcm16.tobytes()))
    echo = EchoPath(Room(delay_ms=120, rt60_s=0.3, level_db=-3.0), 24000)(answer)
    user = np.zeros_like(echo)
    spoken = flite("Wait a moment.", voice="kal")
    at = echo.size - spoken.size - 2400
    user[at : at + spoken.size] = spoken
    mic = echo + user
    for i in range(0, mic.size - 480, 480):
        chunk = (np.clip(mic[i : i + 480], -1, 1) * 32767).astype("<i2")
        driver.handle(ce.InputAudioBufferAppend(audio=chunk.tobytes()))
    heard = np.frombuffer(appended(driver), "<i2").astype(np.float32) / 32768
    # The canceller's output is one 10 ms frame late (echo/canceller.py rule 3).
    heard = heard[240:]
    converged = slice(24000, at)  # after a second of adaptation, before the user speaks
    erle = _db(mic[converged]) - _db(heard[converged])
    assert erle >= 20, f"the echo is only {erle:.1f} dB lower"
    kept = _db(heard[at : at + spoken.size]) - _db(spoken)
    assert kept >= -6, f"the user's speech over the echo lost {-kept:.1f} dB"


def test_rule14_with_a_headset_the_user_s_voice_over_the_answer_is_kept() -> None:
    """The real DSP, no echo at all (a headset: its own noise, -54 dBFS), a user who speaks
    softer than the answer plays (18 dB: the microphone's level and the playback's are
    unrelated): handed the answer as its reference, AEC3 takes 10-24 dB off the user as if
    they were its echo; once a block of the answer has shown that nothing comes back, it is
    handed silence."""
    from bench.speech import flite

    driver = CoreDriver(SessionCore("s"))
    update(driver, echo_cancellation=EchoCancellation(), turn_detection=None)
    answer = flite(
        "The weather in Paris tomorrow will be sunny with a light breeze, and warmer in the "
        "afternoon than it was today."
    )
    start = of(driver.handle(ce.ResponseCreate()), StartBackend)[0]
    pcm16 = (np.clip(answer, -1, 1) * 32767).astype("<i2")
    driver.handle(BackendAudio(start.response_id, start.seq, pcm16.tobytes()))
    mic = np.random.default_rng(2).standard_normal(answer.size) * 0.002
    spoken = flite("Wait, stop, I have a question.", voice="kal16") * 0.5
    at = 2 * 24000
    assert at + spoken.size < answer.size, "the user speaks while the answer plays"
    mic[at : at + spoken.size] += spoken
    for i in range(0, mic.size - 480, 480):
        chunk = (np.clip(mic[i : i + 480], -1, 1) * 32767).astype("<i2")
        driver.handle(ce.InputAudioBufferAppend(audio=chunk.tobytes()))
    heard = np.frombuffer(appended(driver), "<i2").astype(np.float32) / 32768
    heard = heard[240:]  # one 10 ms frame late (echo/canceller.py rule 3)
    kept = _db(heard[at : at + spoken.size]) - _db(spoken)
    assert kept >= -3, f"the user's speech with no echo to take lost {-kept:.1f} dB"


def _speech_started(step: object) -> bool:
    return any(isinstance(e, se.InputAudioBufferSpeechStarted) for e in step.events)  # type: ignore[attr-defined]


@pytest.mark.parametrize("echo", [True, False])
def test_rule7_over_the_echo_only_clear_speech_starts_a_turn(echo: bool) -> None:
    driver = core(Recorded())
    update(driver, echo_cancellation=EchoCancellation() if echo else None)
    start = of(driver.handle(ce.ResponseCreate()), StartBackend)[0]
    loud = np.full(24000 * 2, 3000, dtype="<i2").tobytes()  # two seconds of answer playing
    driver.handle(BackendAudio(start.response_id, start.seq, loud))
    residual = driver.speak(256, 0.7)
    assert _speech_started(residual) is not echo, "a residual-like 0.7 starts speech only raw"
    if echo:
        assert _speech_started(driver.speak(96, 0.97, append=voice())), "a user over the echo"


def _short_answer_playing() -> CoreDriver:
    """Echo cancellation on and 100 ms of an answer sent."""
    driver = core(Recorded())
    update(driver, echo_cancellation=EchoCancellation())
    start = of(driver.handle(ce.ResponseCreate()), StartBackend)[0]
    short = np.full(2400, 3000, dtype="<i2").tobytes()  # 100 ms of answer
    driver.handle(BackendAudio(start.response_id, start.seq, short))
    return driver


def test_rule7_after_the_echo_tail_the_plain_threshold_counts_again() -> None:
    driver = _short_answer_playing()
    assert not _speech_started(driver.speak(256, 0.7))
    driver.speak(1024, 0.0)  # the answer and its echo tail are over
    assert _speech_started(driver.speak(96, 0.7))


def test_rule8_a_residual_quieter_than_the_echo_starts_no_turn_and_the_user_does() -> None:
    """The recording canceller takes the reference (3000) out sample for sample: a microphone
    at 3030 leaves a residual of 30, far under the echo it is left of; a user at 2500 over
    the echo is as loud as it."""
    driver = core(Recorded())
    update(driver, echo_cancellation=EchoCancellation())
    start = of(driver.handle(ce.ResponseCreate()), StartBackend)[0]
    loud = np.full(24000 * 4, 3000, dtype="<i2").tobytes()  # four seconds of answer playing
    driver.handle(BackendAudio(start.response_id, start.seq, loud))
    assert not _speech_started(driver.speak(640, 0.1, value=3000)), "the echo alone"
    residual = driver.speak(256, 0.97, value=3030)
    assert not _speech_started(residual), "a residual 40 dB under the echo scored as speech"
    assert _speech_started(driver.speak(96, 0.97, append=voice(amplitude=5500))), "a user"


def test_rule8_before_the_echo_level_is_known_rule7_alone_decides() -> None:
    driver = core(Recorded())
    update(driver, echo_cancellation=EchoCancellation())
    start = of(driver.handle(ce.ResponseCreate()), StartBackend)[0]
    loud = np.full(24000 * 2, 3000, dtype="<i2").tobytes()
    driver.handle(BackendAudio(start.response_id, start.seq, loud))
    user = voice(amplitude=3030)
    assert _speech_started(driver.speak(96, 0.97, append=user)), "no echo level yet: 0.97 counts"


def test_rule6_turned_on_mid_session_the_reference_is_on_the_session_s_input_clock() -> None:
    """Rules 6-7: echo cancellation turned on after 2 s of the session (the page's Apply
    button): the reference's times are on the session's input clock, as the VAD's chunk ends
    are, so a residual-like 0.7 over the answer's echo still starts no turn."""
    driver = core(Recorded())
    driver.speak(2048, 0.0)  # two seconds of the session before echo cancellation is on
    update(driver, echo_cancellation=EchoCancellation())
    start = of(driver.handle(ce.ResponseCreate()), StartBackend)[0]
    loud = np.full(24000 * 2, 3000, dtype="<i2").tobytes()  # two seconds of answer playing
    driver.handle(BackendAudio(start.response_id, start.seq, loud))
    assert not _speech_started(driver.speak(256, 0.7)), "the echo's residual started a turn"
    assert _speech_started(driver.speak(96, 0.97, append=voice())), "a user over the echo"


def test_rule9_a_late_truncate_of_one_reply_keeps_the_next_reply_s_reference() -> None:
    seen = Recorded()
    driver = core(seen)
    update(driver, echo_cancellation=EchoCancellation(), turn_detection=None)
    first = of(driver.handle(ce.ResponseCreate()), StartBackend)[0]
    driver.handle(BackendAudio(first.response_id, first.seq, pcm([7] * 240)))
    [delta] = [e for e in driver.last.events if isinstance(e, se.ResponseOutputAudioDelta)]
    # The first reply plays out, and 300 ms pass (past far_end.py rule 2's slack).
    driver.handle(ce.InputAudioBufferAppend(audio=pcm([0] * 7440)))
    processing = driver.core._processing
    second = np.arange(1, 481, dtype=np.int16)
    processing.heard(
        [
            se.ResponseOutputAudioDelta(
                response_id="resp_next",
                item_id="item_next",
                output_index=0,
                content_index=0,
                delta=second.astype("<i2").tobytes(),
            )
        ],
        driver.now,
    )
    # The client truncates the first reply late, while the second one plays.
    late = se.ConversationItemTruncated(item_id=delta.item_id, content_index=0, audio_end_ms=10)
    processing.heard([late], driver.now)
    driver.handle(ce.InputAudioBufferAppend(audio=pcm([0] * 240)))
    assert seen.far[-1].tolist() == second[:240].tolist(), "the next reply's reference was lost"
    # A truncate of the reply that plays still stops its reference at once.
    processing.heard(
        [se.ConversationItemTruncated(item_id="item_next", content_index=0, audio_end_ms=5)],
        driver.now,
    )
    driver.handle(ce.InputAudioBufferAppend(audio=pcm([0] * 240)))
    assert seen.far[-1].tolist() == [0] * 240


class Passing:
    """A canceller that has not learnt the room: the echo passes through it whole."""

    noise_reduction: NoiseReductionType | None = None

    def process(self, near: Pcm, far: Pcm) -> Pcm:
        return near.copy()


@dataclass
class Unlearnt:
    def canceller(self, rate: int, noise_reduction: NoiseReductionType | None) -> Canceller:
        return Passing()

    def suppressor(self, rate: int, kind: NoiseReductionType) -> Suppressor:
        return Halving()


def test_rule10_a_residual_the_reference_explains_starts_no_turn_and_a_user_s_voice_does() -> None:
    """The canceller leaves the echo whole (a far, reverberant room, a canceller still
    learning): loud, and scored 0.97, it passes rules 7 and 8; its power is the answer's,
    which the reference predicts, so it starts no turn. A user's voice, in a band the answer
    leaves empty, does."""
    driver = CoreDriver(SessionCore("s", CoreConfig(processors=Unlearnt)))
    update(driver, echo_cancellation=EchoCancellation())
    start = of(driver.handle(ce.ResponseCreate()), StartBackend)[0]
    answer = voice(hz=250.0, amplitude=6000)  # 8 whole cycles an append
    driver.handle(BackendAudio(start.response_id, start.seq, answer * 150))  # 4.8 s
    echo = voice(hz=250.0, amplitude=3000)  # the room halves it (-6 dB)
    assert not _speech_started(driver.speak(1024, 0.1, append=echo)), "the echo, scored low"
    residual = driver.speak(320, 0.97, append=echo)
    assert not _speech_started(residual), "the echo itself, scored as speech, started a turn"
    both = (np.frombuffer(echo, "<i2") + np.frombuffer(voice(), "<i2")).astype("<i2").tobytes()
    assert _speech_started(driver.speak(96, 0.97, append=both)), "a user over the echo"


def test_rule11_with_no_answer_playing_only_the_canceller_runs() -> None:
    driver = CoreDriver(SessionCore("s", CoreConfig(processors=Unlearnt)))
    update(driver, echo_cancellation=EchoCancellation())
    driver.speak(2048, 0.97, append=voice())  # the user talks; nothing plays
    processing = driver.core._processing
    assert not processing._double_talk.frames_held, "double talk measured with no echo to hear"
    assert processing._levels.level(0, 2048) is None, "levels measured with no echo to hear"
    start = of(driver.handle(ce.ResponseCreate()), StartBackend)[0]
    driver.handle(BackendAudio(start.response_id, start.seq, voice(hz=250.0) * 10))
    driver.speak(320, 0.1, append=voice(hz=250.0, amplitude=3000))
    assert processing._double_talk.frames_held, "the answer plays: its echo is measured"


class Prepared(CoreDriver):
    """The session actor's way: each append's DSP prepared and run first, then the append."""

    def handle(self, event: object) -> Step:
        dsp = self.core.prepare_input(event)  # type: ignore[arg-type]
        if dsp is not None:
            dsp.run()
        return super().handle(event)


class RecordedPassing(Passing):
    def __init__(self, seen: Recorded) -> None:
        self.seen = seen

    def process(self, near: Pcm, far: Pcm) -> Pcm:
        self.seen.near.append(near.copy())
        self.seen.far.append(far.copy())
        return near.copy()


def _rule10_session(driver: CoreDriver) -> list[Step]:
    update(driver, echo_cancellation=EchoCancellation())
    start = of(driver.handle(ce.ResponseCreate()), StartBackend)[0]
    answer = voice(hz=250.0, amplitude=6000)
    steps = [driver.handle(BackendAudio(start.response_id, start.seq, answer * 150))]
    echo = voice(hz=250.0, amplitude=3000)
    both = (np.frombuffer(echo, "<i2") + np.frombuffer(voice(), "<i2")).astype("<i2").tobytes()
    steps.append(driver.speak(1024, 0.1, append=echo))
    steps.append(driver.speak(320, 0.97, append=echo))
    steps.append(driver.speak(96, 0.97, append=both))
    return steps


def test_rule12_an_append_s_dsp_run_apart_decides_as_the_whole_step_does() -> None:
    # Rule 12: prepare (the bookkeeping), run (the DSP, elsewhere), then the append: the same
    # events (rule 10's session: the echo starts no turn, the user over it does), the same
    # input buffer and the same reference as the one-step `clean`.
    whole, split = Recorded(), Recorded()
    one = CoreDriver(SessionCore("s", CoreConfig(processors=lambda: _Echoing(whole))))
    two = Prepared(SessionCore("s", CoreConfig(processors=lambda: _Echoing(split))))
    steps_one, steps_two = _rule10_session(one), _rule10_session(two)
    assert [types(s) for s in steps_one] == [types(s) for s in steps_two]
    assert not _speech_started(steps_two[-2]), "the echo started a turn"
    assert _speech_started(steps_two[-1]), "the user over the echo, with the DSP run apart"
    assert appended(one) == appended(two)
    assert len(split.far) == len(whole.far) > 0
    for a, b in zip(whole.far, split.far, strict=True):
        np.testing.assert_array_equal(a, b)


@dataclass
class _Echoing:
    seen: Recorded

    def canceller(self, rate: int, noise_reduction: NoiseReductionType | None) -> Canceller:
        return RecordedPassing(self.seen)

    def suppressor(self, rate: int, kind: NoiseReductionType) -> Suppressor:
        return Halving()


def test_rule12_nothing_is_handled_between_an_append_s_dsp_and_its_append() -> None:
    driver = core(Recorded())
    update(driver, echo_cancellation=EchoCancellation())
    first = ce.InputAudioBufferAppend(audio=pcm([1, 2, 3]))
    dsp = driver.core.prepare_input(first)
    assert dsp is not None
    with pytest.raises(RuntimeError, match="prepared"):
        driver.core.prepare_input(ce.InputAudioBufferAppend(audio=pcm([4])))
    with pytest.raises(RuntimeError, match="prepared"):
        driver.handle(ce.InputAudioBufferAppend(audio=pcm([4])))
    assert driver.core.prepare_input(ce.InputAudioBufferCommit()) is None


def tones(*parts: tuple[float, int]) -> np.ndarray:
    """One 32 ms append of tones (hz, amplitude), whole cycles each."""
    t = np.arange(24 * 32) / 24000
    return sum(a * np.sin(2 * np.pi * hz * t) for hz, a in parts)  # type: ignore[return-value]


def pcm16(samples: np.ndarray) -> bytes:
    return np.clip(np.round(samples), -32768, 32767).astype("<i2").tobytes()


# An answer with a tone in each of rule 10's bands (a weak one from 3.2 to 6.4 kHz), as the
# room returns it (-6 dB).
ECHO = tones((250, 3000), (625, 2000), (1250, 2000), (2500, 1500), (5000, 200), (8000, 500))


@dataclass
class _Removing:
    """A canceller that has learnt the room: the echo (ECHO, in step with each append) out."""

    noise_reduction: NoiseReductionType | None = None

    def process(self, near: Pcm, far: Pcm) -> Pcm:
        return np.clip(near.astype(np.float64) - ECHO, -32768, 32767).astype(np.int16)


@dataclass
class _Learnt:
    def canceller(self, rate: int, noise_reduction: NoiseReductionType | None) -> Canceller:
        return _Removing()

    def suppressor(self, rate: int, kind: NoiseReductionType) -> Suppressor:
        return Halving()


def _trained_on_the_echo() -> CoreDriver:
    """Rule 10's filter trained on every band: the answer plays, its echo arrives after the
    room's delay (silence first, the microphone's floor), then two seconds of echo alone (a
    band trains once its filter fits the echo: echo/double_talk.py rule 8)."""
    driver = CoreDriver(SessionCore("s", CoreConfig(processors=_Learnt)))
    update(driver, echo_cancellation=EchoCancellation())
    start = of(driver.handle(ce.ResponseCreate()), StartBackend)[0]
    driver.handle(BackendAudio(start.response_id, start.seq, pcm16(2 * ECHO) * 200))  # 6.4 s
    driver.speak(64, 0.0, value=0)
    assert not _speech_started(driver.speak(2304, 0.1, append=pcm16(ECHO)))
    assert driver.core._processing._double_talk.trained
    return driver


def test_rule7_once_rule10_hears_more_than_the_echo_the_session_threshold_counts() -> None:
    """A user's onset over the echo scores 0.7 (silero takes a chunk or two more to reach
    0.85): with a band far over the echo the reference predicts, it starts the turn; the
    echo itself at 0.7 does not."""
    driver = _trained_on_the_echo()
    assert not _speech_started(driver.speak(96, 0.7, append=pcm16(ECHO))), "the echo at 0.7"
    user = pcm16(ECHO + tones((1000, 6000)))  # 10 dB over the echo from 0.8 to 1.6 kHz
    assert _speech_started(driver.speak(128, 0.7, append=user)), "a user's onset at 0.7"


def test_rule7_a_chunk_only_a_little_over_the_echo_must_still_be_clearly_speech() -> None:
    """Rule 10's prediction can fall short of a loud syllable of the answer in a far,
    reverberant room while the canceller loses it (the page at 0 dB: 6.0 dB over at 0.7, 0.24 s
    before the user spoke): under `RELAX_DB` over the echo, a chunk needs `ECHO_SPEECH`."""
    user = pcm16(ECHO + tones((1000, 3800)))  # 6.5 dB over the echo from 0.8 to 1.6 kHz
    assert not _speech_started(_trained_on_the_echo().speak(128, 0.7, append=user)), "at 0.7"
    assert _speech_started(_trained_on_the_echo().speak(128, 0.9, append=user)), "at 0.9"


def test_rule10_a_little_over_the_echo_for_one_chunk_alone_is_the_echo() -> None:
    """A loud syllable of the answer after a pause can come 6-7 dB over what rule 10's filter
    predicts for one chunk (the page at 0 dB: 6.2 and 7.4 dB, clearly speech, the canceller
    losing it); a user stays over the echo for longer. Under `RELAX_DB`, a chunk counts only
    as the second in a row `DOUBLE_TALK_DB` over the echo."""
    syllable = pcm16(ECHO + tones((1000, 4400)))  # 32 ms of it: 6.5 dB over, 0.8-1.6 kHz
    user = pcm16(ECHO + tones((1000, 3800)))  # 6.5 dB over the echo there while it lasts
    once = _trained_on_the_echo()
    assert not _speech_started(once.speak(32, 0.9, append=syllable)), "one chunk over"
    assert not _speech_started(once.speak(96, 0.9, append=pcm16(ECHO))), "one chunk over"
    heard = once.core._processing._double_talk
    chunks = [heard.excess_db(end - 32, end) or 0.0 for end in range(once.now - 128, once.now, 8)]
    assert DOUBLE_TALK_DB <= max(chunks) < RELAX_DB, "the syllable was one chunk over the echo"
    twice = _trained_on_the_echo()
    started = _speech_started(twice.speak(160, 0.9, append=user))
    assert started or _speech_started(twice.speak(96, 0.9, append=pcm16(ECHO))), "two in a row"


def test_rule8_where_rule10_hears_clearly_more_than_the_echo_the_margin_is_wide() -> None:
    """A user 8 dB under the echo's level, the canceller taking nothing of them: rule 8's
    6 dB margin would hold them back, but rule 10 hears their band 19 dB over the echo
    there (every band trained), so the margin is 12 dB; the same user with no band clearly
    over the echo (3 dB) is held back."""
    driver = _trained_on_the_echo()
    faint = pcm16(ECHO + tones((4000, 250)))  # 3.2-6.4 kHz: 3 dB over the 200 there
    assert not _speech_started(driver.speak(96, 0.97, append=faint)), "rule 8's margin"
    user = pcm16(ECHO + tones((4000, 1800)))  # -7.8 dB against the echo's level; 19 dB there
    assert _speech_started(driver.speak(96, 0.97, append=user)), "a user clearly over the echo"


def test_rule13_speech_sure_for_a_quarter_second_over_more_than_the_echo_counts() -> None:
    """A user the canceller takes (rule 8 holds them back) and rule 10's filter tracks once
    their onset put 6 dB over the echo in one band: they still count once silero is sure of
    speech for `SURE_CHUNKS` chunks in a row; fewer, or one chunk less sure between them
    (a new run, the echo's prediction explaining all of it), does not."""
    driver = _trained_on_the_echo()
    onset = pcm16(ECHO + tones((4000, 400)))  # 3.2-6.4 kHz: 6 dB over the 200 there
    tracked = pcm16(ECHO)  # then all the filter predicts
    almost = (SURE_CHUNKS - 1) * 32
    assert not _speech_started(driver.speak(32, 0.995, append=onset))
    assert not _speech_started(driver.speak(almost - 32, 0.995, append=tracked)), "one short"
    assert not _speech_started(driver.speak(32, 0.9, append=tracked)), "one less sure"
    assert not _speech_started(driver.speak(almost + 32, 0.995, append=tracked)), "a new run"
    assert not _speech_started(driver.speak(32, 0.9, append=tracked))
    assert not _speech_started(driver.speak(32, 0.995, append=onset))
    assert not _speech_started(driver.speak(almost - 32, 0.995, append=tracked)), "one short"
    assert _speech_started(driver.speak(32, 0.995, append=tracked)), "all in a row"


def test_rule13_a_residual_the_echo_explains_never_counts_however_sure() -> None:
    """The canceller losing the echo for a moment leaves a residual silero may be sure of for
    a quarter second and more (the page at 0 dB); rule 10's prediction explains all of it, so
    it never counts."""
    driver = _trained_on_the_echo()
    residual = pcm16(ECHO)
    assert not _speech_started(driver.speak(4 * SURE_CHUNKS * 32, 0.995, append=residual))


def _verdicts(step: Step) -> list[EchoVerdict]:
    return [note for note in step.notes if isinstance(note, EchoVerdict)]


def test_verdict_rule2_each_chunk_over_the_echo_names_the_rules_that_held_it() -> None:
    """echo/verdict.py: the echo at 0.7 is held by rule 7 (not clearly speech), rule 8 (the
    canceller took it: what is left is far under the echo's level) and rule 10 (nothing over
    the echo's prediction); a user's band 10 dB over it at 0.7 is held by none and heard as
    scored, with rule 10's excess on its verdict."""
    driver = _trained_on_the_echo()
    echo = _verdicts(driver.speak(96, 0.7, append=pcm16(ECHO)))
    assert [v.held_by for v in echo] == [(7, 8, 10)] * 3, echo
    assert all(v.heard < 0.5 and v.probability == 0.7 and v.trained for v in echo)
    user = _verdicts(driver.speak(128, 0.7, append=pcm16(ECHO + tones((1000, 6000)))))
    counted = [v for v in user if not v.held_by]
    assert counted, user
    assert counted[0].heard == 0.7
    assert counted[0].excess_db is not None and counted[0].excess_db >= RELAX_DB


def test_verdict_rule2_a_run_of_sure_speech_is_vouched_for() -> None:
    """Rule 13's run lets a chunk through whatever rules 7, 8 and 10 say: its verdict says
    so, and names no rule that held it."""
    driver = _trained_on_the_echo()
    onset = pcm16(ECHO + tones((4000, 400)))  # 3.2-6.4 kHz: 6 dB over the 200 there
    driver.speak(32, 0.995, append=onset)
    held = _verdicts(driver.speak((SURE_CHUNKS - 2) * 32, 0.995, append=pcm16(ECHO)))
    assert all(v.held_by and not v.vouched for v in held), held
    [last] = _verdicts(driver.speak(32, 0.995, append=pcm16(ECHO)))
    assert last.vouched and last.held_by == () and last.heard == 0.995


def test_verdict_rule1_past_the_echo_s_tail_a_chunk_gets_none() -> None:
    driver = _short_answer_playing()
    assert _verdicts(driver.speak(256, 0.7))
    driver.speak(1024, 0.0)  # the answer and its echo tail are over
    assert not _verdicts(driver.speak(96, 0.7))


def test_verdict_rule3_it_says_when_an_ack_last_moved_the_reference() -> None:
    """Rule 15 with far_end.py rule 5: an ACK that moves the reference shows on the verdicts
    after it, how long before each chunk and by how much."""
    driver = core(Recorded())
    update(driver, echo_cancellation=EchoCancellation())
    start = of(driver.handle(ce.ResponseCreate()), StartBackend)[0]
    loud = np.full(24000 * 2, 3000, dtype="<i2").tobytes()
    driver.handle(BackendAudio(start.response_id, start.seq, loud))
    before = _verdicts(driver.speak(320, 0.1))
    assert before and all(v.reference_moved_ms is None for v in before)
    # The client says it has played nothing yet at the input's current sample: 200 ms late.
    driver.handle(ce.PlaybackAck(response_id=start.response_id, played_ms=0, input_ms=320.0))
    after = _verdicts(driver.speak(96, 0.1))
    assert after and all(v.reference_moved_by_ms > 0 for v in after), after
    assert [v.reference_moved_ms for v in after] == [v.chunk_end_ms - 320 for v in after]

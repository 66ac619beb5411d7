"""OverlapTracker (orchestrator/session/turns/overlap.py): pure measures and requests of pause
mode."""

from __future__ import annotations

from orchestrator.protocol.session_config import (
    DEFAULT_BACKCHANNELS,
    DEFAULT_INTERRUPT_WORDS,
    Interruption,
)
from orchestrator.session.actions import ArmTimer, CancelTimer
from orchestrator.session.turns.overlap import OverlapTracker, classify

POLICY = Interruption(mode="pause", min_speech_ms=400, resume_after_ms=1500)


def test_classify_whole_transcript_must_be_backchannels() -> None:
    assert classify("Yeah.", DEFAULT_BACKCHANNELS) == "backchannel"
    assert classify("Uh-huh, I see!", DEFAULT_BACKCHANNELS) == "backchannel"
    assert classify("Yeah, but wait", DEFAULT_BACKCHANNELS) == "words"
    assert classify("I", DEFAULT_BACKCHANNELS) == "words"  # "i see" is one entry of two words
    assert classify(" ... ", DEFAULT_BACKCHANNELS) == "noise"


def test_speech_ms_is_voiced_time_summed_over_parts() -> None:
    t = OverlapTracker(POLICY, transcribe=False)
    t.onset(audio_start_ms=700, voiced_from_ms=1000)
    t.voiced(1250, now_ms=0)
    assert t.speech_ms == 250 and t.audio_from_ms == 700
    t.stopped(speech_end_ms=1250, chunk_end_ms=1550, now_ms=10)
    t.onset(audio_start_ms=1700, voiced_from_ms=2000)
    t.voiced(2100, now_ms=0)
    assert t.speech_ms == 350 and t.audio_from_ms == 700  # same overlap, same audio start


def test_partials_every_200_ms_one_in_flight_stale_ignored() -> None:
    t = OverlapTracker(POLICY, transcribe=True, partial_every_ms=200)
    t.onset(0, 0)
    assert t.voiced(150, 0).ask is None
    first = t.voiced(200, 0).ask
    assert first is not None
    assert t.voiced(500, 0).ask is None  # one in flight
    assert t.transcribed(first + 99, "no").judge is False  # not the one in flight
    answered = t.transcribed(first, "Yeah")
    assert answered.ask is not None and t.facts().heard == "backchannel"  # 500 >= 200 + 200


def test_grace_armed_at_min_speech_with_a_partial_in_flight() -> None:
    t = OverlapTracker(POLICY, transcribe=True, grace_ms=150)
    t.onset(0, 0)
    t.voiced(200, now_ms=200)
    step = t.voiced(400, now_ms=400)
    assert step.judge and not t.facts().waited
    [grace] = step.timers
    assert grace == ArmTimer("overlap_grace", 550, grace.token)
    assert t.grace_over(grace.token).judge and t.facts().waited


def test_no_transcriber_means_duration_decides_at_once() -> None:
    t = OverlapTracker(POLICY, transcribe=False)
    t.onset(0, 0)
    step = t.voiced(400, 0)
    assert step.judge and step.timers == () and t.facts().waited


def test_resume_timer_counts_from_speech_end_and_new_onset_cancels_it() -> None:
    t = OverlapTracker(POLICY, transcribe=False)
    t.onset(0, 0)
    t.voiced(300, 0)
    [arm] = t.stopped(speech_end_ms=300, chunk_end_ms=800, now_ms=5000).timers
    assert isinstance(arm, ArmTimer) and arm.deadline_ms == 5000 + 1500 - 500
    assert t.onset(900, 1000).timers == (CancelTimer("overlap_resume"),)
    assert not t.resume_due(arm.token)


def test_close_forgets_the_overlap_and_cancels_its_timers() -> None:
    t = OverlapTracker(POLICY, transcribe=True)
    t.onset(0, 0)
    ask = t.voiced(200, 0).ask
    t.voiced(300, 0)
    [arm] = t.stopped(300, 600, 0).timers
    assert t.close() == (CancelTimer("overlap_resume"),)
    assert not t.is_open and ask is not None
    assert t.transcribed(ask, "stop").judge is False
    assert isinstance(arm, ArmTimer) and not t.resume_due(arm.token)


def test_words_heard_before_min_speech_wait_for_a_fresher_partial() -> None:
    # "yeah" 200 ms in reads "You": words of a partial asked before min_speech_ms are not
    # judged while the one asked at min_speech_ms is on its way (within the grace).
    t = OverlapTracker(POLICY, transcribe=True, grace_ms=150, partial_every_ms=200)
    t.onset(0, 0)
    early = t.voiced(200, now_ms=200).ask
    assert early is not None
    t.transcribed(early, "You")
    step = t.voiced(400, now_ms=400)
    assert step.ask is not None, "a partial is asked at min_speech_ms"
    assert t.facts().heard == "nothing" and not t.facts().waited, "stale words must wait"
    [grace] = step.timers
    assert isinstance(grace, ArmTimer) and grace.kind == "overlap_grace"
    answered = t.transcribed(step.ask, "Yeah.")
    assert answered.judge and t.facts().heard == "backchannel"
    assert answered.timers == (CancelTimer("overlap_grace"),)


def test_stale_words_decide_once_the_grace_is_over() -> None:
    t = OverlapTracker(POLICY, transcribe=True, grace_ms=150, partial_every_ms=200)
    t.onset(0, 0)
    early = t.voiced(200, now_ms=200).ask
    assert early is not None
    t.transcribed(early, "Tell")
    [grace] = t.voiced(400, now_ms=400).timers
    assert isinstance(grace, ArmTimer)
    assert t.grace_over(grace.token).judge
    assert t.facts().heard == "words" and t.facts().waited, "the duration rule decides then"


def test_a_hum_spelled_as_letters_is_a_backchannel() -> None:
    for hum in ("M-H-M-H.", "MMHMHMMH", "m m h n m", "Hmm, mhm"):
        assert classify(hum, DEFAULT_BACKCHANNELS) == "backchannel", hum
    assert classify("mm, but no", DEFAULT_BACKCHANNELS) == "words"


def test_a_laugh_or_a_sound_tag_is_noise_not_words() -> None:
    # Whisper writes a laugh as its syllables and non-speech as tags; none of it was said.
    for laugh in ("Ha ha!", "Hehehehe", "Heh.", "Ahaha", "hahaha ha", "[Laughter]", "(coughs)"):
        assert classify(laugh, DEFAULT_BACKCHANNELS, DEFAULT_INTERRUPT_WORDS) == "noise", laugh
    assert classify("Huh?", DEFAULT_BACKCHANNELS) == "backchannel", "a hum spelled huh"
    assert classify("hi", DEFAULT_BACKCHANNELS) == "words", "one syllable is a word"
    assert classify("Ha ha, tell me more", DEFAULT_BACKCHANNELS) == "words"


def test_an_interrupt_word_anywhere_is_urgent() -> None:
    words = DEFAULT_INTERRUPT_WORDS
    for said in ("Wait.", "Okay, wait!", "No.", "Hold on a second", "Hello?", "Sorry, what?"):
        assert classify(said, DEFAULT_BACKCHANNELS, words) == "urgent", said
    assert classify("I know", DEFAULT_BACKCHANNELS, words) == "words", "whole words only"
    assert classify("hold it", DEFAULT_BACKCHANNELS, words) == "words", "'hold on' is one entry"
    assert classify("Yeah.", DEFAULT_BACKCHANNELS, words) == "backchannel"
    assert classify("Wait.", DEFAULT_BACKCHANNELS, ()) == "words", "the list is the session's"


def test_an_interrupt_word_is_judged_before_min_speech() -> None:
    t = OverlapTracker(POLICY, transcribe=True)
    t.onset(0, 0)
    ask = t.voiced(100, now_ms=100).ask
    assert ask is not None, "the first partial is asked 100 ms into the overlap"
    step = t.transcribed(ask, "Wait!")
    assert step.judge and t.facts().heard == "urgent" and t.speech_ms < POLICY.min_speech_ms


def test_other_words_before_min_speech_are_not_judged() -> None:
    t = OverlapTracker(POLICY, transcribe=True)
    t.onset(0, 0)
    ask = t.voiced(100, now_ms=100).ask
    assert ask is not None
    assert not t.transcribed(ask, "Tell me").judge


def test_words_asked_within_one_period_of_min_speech_decide_without_waiting() -> None:
    t = OverlapTracker(POLICY, transcribe=True, grace_ms=150)  # a partial every 100 ms
    t.onset(0, 0)
    for end in (100, 200, 300):
        ask = t.voiced(end, now_ms=end).ask
        assert ask is not None, end
        t.transcribed(ask, "Tell me about")
    step = t.voiced(400, now_ms=400)
    assert step.judge and t.facts().heard == "words", "300 of 400 ms heard: no wait"
    assert not any(isinstance(timer, ArmTimer) for timer in step.timers), "no grace armed"

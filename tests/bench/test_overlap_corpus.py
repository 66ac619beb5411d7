"""bench/overlap_corpus.py: labels, durations, voices, levels and determinism of the corpus the
interruptions benchmark runs (bench/interruptions.py), synthetic and human items."""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest

from bench.human_speech import DISTRACTORS, PACKAGES
from bench.overlap_corpus import (
    BACKCHANNEL_MAX_S,
    BACKCHANNELS,
    HUMAN_BURST_MAX_S,
    INTERRUPTING,
    INTERRUPTION_MIN_S,
    KINDS,
    LABELS,
    NONSPEECH_MAX_S,
    SHORT_MAX_S,
    CorpusPlan,
    OverlapItem,
    build_corpus,
    burst,
    room_tone,
)


@pytest.fixture(scope="module")
def corpus() -> tuple[OverlapItem, ...]:
    return build_corpus(CorpusPlan())


def test_the_default_plan_has_every_class_at_every_offset(corpus: tuple[OverlapItem, ...]) -> None:
    plan = CorpusPlan()
    per_offset = {
        # 6 backchannels in the diphone voices and 8 in Piper's joe.
        "synthetic": {"interruption": 6, "short": 0, "backchannel": 14, "nonspeech": 0, "burst": 4},
        "human": {"interruption": 6, "short": 12, "backchannel": 0, "nonspeech": 20, "burst": 4},
    }
    assert len(corpus) == (24 + 42) * len(plan.offsets_s)
    for offset in plan.offsets_s:
        for origin, counts in per_offset.items():
            at = [it.kind for it in corpus if it.offset_s == offset and it.origin == origin]
            assert {kind: at.count(kind) for kind in KINDS} == counts, (origin, offset)
    assert len({it.name for it in corpus}) == len(corpus), "item names must be unique"
    human = [it.kind for it in corpus if it.origin == "human"]
    # Enough that a 5% rate means something (issue 32).
    assert human.count("nonspeech") >= 60 and human.count("short") >= 30


def test_labels_follow_the_class(corpus: tuple[OverlapItem, ...]) -> None:
    assert INTERRUPTING == ("interruption", "short")
    for item in corpus:
        expected = "interrupt" if item.kind in ("interruption", "short") else "not-interrupt"
        assert item.label == expected == LABELS[item.kind], item.name


def test_durations_are_the_classes_own(corpus: tuple[OverlapItem, ...]) -> None:
    for item in corpus:
        if item.kind == "interruption":
            assert INTERRUPTION_MIN_S <= item.duration_s <= 3.0, (item.name, item.duration_s)
        elif item.kind == "backchannel":
            assert 0.15 <= item.duration_s <= BACKCHANNEL_MAX_S, (item.name, item.duration_s)
        elif item.kind == "short":
            assert 0.2 <= item.duration_s <= SHORT_MAX_S, (item.name, item.duration_s)
        elif item.kind == "nonspeech":
            assert 0.15 <= item.duration_s <= NONSPEECH_MAX_S, (item.name, item.duration_s)
        elif item.origin == "human":
            assert 0.05 <= item.duration_s <= HUMAN_BURST_MAX_S, (item.name, item.duration_s)
        else:
            assert 0.05 <= item.duration_s <= 1.0, (item.name, item.duration_s)


def test_only_over_long_backchannels_are_spoken_faster(corpus: tuple[OverlapItem, ...]) -> None:
    stretched = {it.source for it in corpus if it.stretch != 1.0}
    assert stretched == {"mm-hmm"}, "only mm-hmm exceeds 0.8 s in these voices"
    assert all(it.kind == "backchannel" for it in corpus if it.stretch != 1.0)


def test_speech_never_uses_the_assistant_voice_and_each_offset_changes_voice(
    corpus: tuple[OverlapItem, ...],
) -> None:
    speech = [it for it in corpus if it.kind != "burst" and it.origin == "synthetic"]
    assert "slt" not in {it.voice for it in speech}
    joe = [it for it in speech if it.voice == "joe"]
    assert {it.kind for it in joe} == {"backchannel"}, "Piper speaks the backchannels only"
    assert {it.source for it in joe} == set(BACKCHANNELS), "every backchannel in Piper's voice"
    speech = [it for it in speech if it.voice != "joe"]
    assert {it.voice for it in speech} == {"kal16", "awb", "rms", "festival"}
    for source in {it.source for it in speech}:
        voices = [it.voice for it in speech if it.source == source]
        assert len(set(voices)) == len(voices), f"{source!r} repeats a voice across offsets"
    synthetic = [it for it in corpus if it.origin == "synthetic"]
    assert {it.voice for it in synthetic if it.kind == "burst"} == {"noise"}


def test_human_items_carry_their_package_and_recording(corpus: tuple[OverlapItem, ...]) -> None:
    human = [it for it in corpus if it.origin == "human"]
    for item in human:
        assert item.voice in PACKAGES and item.recording, item.name
        assert item.stretch == 1.0, "human speech is never re-spoken"
        assert item.name.startswith(f"{item.kind}/human/{item.voice}/"), item.name
    speakers = {it.voice for it in human if it.kind == "interruption"}
    assert speakers == set(PACKAGES) - {"scsynth", "hedgewars"}, "every speech source interrupts"
    assert {it.voice for it in human if it.kind == "burst"} == {"scsynth"}
    bursts = {it.recording for it in human if it.kind == "burst"}
    assert bursts == {f"{name}.flac" for name in DISTRACTORS}, "every distractor is played"
    for offset in CorpusPlan().offsets_s:
        heard = [it.recording for it in human if it.offset_s == offset]
        assert len(set(heard)) == len(heard), f"a recording repeats at {offset} s"


def test_no_human_item_that_must_not_interrupt_says_a_word(
    corpus: tuple[OverlapItem, ...],
) -> None:
    human = [it for it in corpus if it.origin == "human"]
    # No recorded acknowledgement over another speaker exists: greetings, "no" and "I'm sorry"
    # are interruptions a listener wants honoured, never backchannels.
    assert not [it for it in human if it.kind == "backchannel"]
    words = re.compile(r"\b(no|hello|hi|bye|sorry|wait|stop|yeah|okay|thank)\b", re.I)
    for item in human:
        if item.label == "not-interrupt":
            assert not words.search(item.source), item.name


def test_human_nonspeech_is_hums_laughs_coughs_moans_and_breaths(
    corpus: tuple[OverlapItem, ...],
) -> None:
    sounds = [it for it in corpus if it.origin == "human" and it.kind == "nonspeech"]
    by_voice = {v: {it.source for it in sounds if it.voice == v} for v in ("hedgewars", "mfa")}
    assert by_voice == {"hedgewars": {"hum", "laugh", "cough", "moan"}, "mfa": {"laugh", "breath"}}
    assert {it.voice for it in sounds} == {"hedgewars", "mfa"}
    played = {it.recording for it in sounds}
    assert len(played) >= 25, "the candidates rotate across offsets: most are heard"
    assert not any(it.recording.startswith("Robot/") for it in sounds), "a vocoded voice"
    assert all(np.abs(it.audio).max() < 1.0 for it in sounds), "scaled, never clipped"


def test_human_short_interruptions_hold_no_wait_and_greetings(
    corpus: tuple[OverlapItem, ...],
) -> None:
    short = [it for it in corpus if it.origin == "human" and it.kind == "short"]
    said = {it.source.lower().strip(".!?") for it in short}
    assert {"no", "hello", "i'm sorry", "just you wait", "watch it"} <= said
    assert {it.voice for it in short} == {"asterisk", "pyannote", "hedgewars"}
    english = ("British", "Classic", "Default", "Mobster", "Pirate", "Singer", "Surfer")
    for item in short:
        if item.voice == "hedgewars":
            assert item.recording.split("/")[0] in english, item.recording
    first = [it.source for it in short if it.offset_s == CorpusPlan().offsets_s[0]]
    assert first[0] == "no", "the quick plan's one short item is asterisk's 'no'"


def test_onset_is_sample_zero_and_levels_are_sane(corpus: tuple[OverlapItem, ...]) -> None:
    for item in corpus:
        audio = item.audio
        assert audio.dtype == np.float32 and audio.ndim == 1
        assert np.abs(audio).max() <= 1.0
        first = float(np.sqrt((audio[: item.rate // 100] ** 2).mean()))
        # A human onset may be soft (the nasal of "no"): within 30 dB of its loudest 10 ms.
        frames = audio[: len(audio) // (item.rate // 100) * (item.rate // 100)]
        loudest = float(np.sqrt((frames.reshape(-1, item.rate // 100) ** 2).mean(axis=1)).max())
        floor = 0.005 if item.origin == "synthetic" else 0.03 * loudest
        assert first > floor, f"{item.name} does not start at its onset"
        peak_db = 20 * np.log10(np.abs(audio).max())
        assert -24 <= peak_db <= 0, (item.name, peak_db)


def test_the_same_plan_gives_the_same_samples_and_another_seed_other_bursts() -> None:
    plan = CorpusPlan(
        interruptions=1,
        backchannels=2,
        bursts=4,
        offsets_s=(0.5, 1.5),
        human_interruptions=1,
        human_backchannels=0,
        human_bursts=1,
        human_short=2,
        human_nonspeech=2,
    )
    first, second = build_corpus(plan), build_corpus(plan)
    assert [it.name for it in first] == [it.name for it in second]
    for a, b in zip(first, second, strict=True):
        assert np.array_equal(a.audio, b.audio), a.name
    new = [it for it in first if it.kind in ("short", "nonspeech")]
    assert len(new) == 8 and len({it.recording for it in new}) == 8, "offsets hear others"
    other = build_corpus(replace(plan, seed=15))
    bursts = [
        (a, b)
        for a, b in zip(first, other, strict=True)
        if a.kind == "burst" and a.origin == "synthetic"
    ]
    assert any(not np.array_equal(a.audio, b.audio) for a, b in bursts)


def test_bursts_and_room_tone_are_seeded() -> None:
    for name in ("cough", "double-cough", "clicks", "knock"):
        a = burst(name, np.random.default_rng(3))
        b = burst(name, np.random.default_rng(3))
        assert np.array_equal(a, b) and np.abs(a).max() == pytest.approx(1.0, abs=0.05)
    with pytest.raises(ValueError, match="unknown burst"):
        burst("sneeze", np.random.default_rng(0))
    tone = room_tone(1.0, seed=7)
    assert np.array_equal(tone, room_tone(1.0, seed=7))
    assert float(np.sqrt((tone**2).mean())) == pytest.approx(0.002, rel=0.01)


def test_a_plan_beyond_the_phrase_lists_is_refused() -> None:
    with pytest.raises(ValueError):
        CorpusPlan(interruptions=99)
    with pytest.raises(ValueError):
        CorpusPlan(offsets_s=())
    with pytest.raises(ValueError):
        CorpusPlan(human_backchannels=1)  # none exists
    with pytest.raises(ValueError):
        CorpusPlan(human_short=99)
    with pytest.raises(ValueError):
        CorpusPlan(human_nonspeech=99)
    with pytest.raises(ValueError):
        CorpusPlan(human_nonspeech=-1)

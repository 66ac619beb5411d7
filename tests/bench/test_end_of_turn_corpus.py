"""bench/end_of_turn_corpus.py: classes, pauses, labels, voices, levels and determinism of the
corpus the end-of-turn benchmark runs (bench/end_of_turn.py)."""

from __future__ import annotations

import numpy as np
import pytest

from bench import human_turns
from bench.end_of_turn_corpus import (
    FADE_S,
    HELD_PAUSE_S,
    HUMAN_TURNS_MAX,
    SENTENCES,
    SPEECH_FLOOR,
    SPEECH_RMS,
    VOICES,
    CorpusPlan,
    TurnItem,
    build_corpus,
    frame_rms,
    speech_segments,
)
from bench.human_speech import PACKAGES

PLAN = CorpusPlan()


@pytest.fixture(scope="module")
def corpus() -> tuple[TurnItem, ...]:
    return build_corpus(PLAN)


def _pairs(corpus: tuple[TurnItem, ...]) -> list[tuple[TurnItem, TurnItem]]:
    """The synthetic items, each complete one with its paused twin."""
    synthetic = [it for it in corpus if it.origin == "synthetic"]
    return list(zip(synthetic[::2], synthetic[1::2], strict=True))


def _human(corpus: tuple[TurnItem, ...]) -> list[TurnItem]:
    return [it for it in corpus if it.origin == "human"]


def test_every_sentence_and_voice_is_a_complete_and_a_paused_item(
    corpus: tuple[TurnItem, ...],
) -> None:
    synthetic_count = PLAN.sentences * PLAN.voices_per_sentence * 2
    assert len(corpus) == synthetic_count + PLAN.human_turns
    assert len({it.name for it in corpus}) == len(corpus), "item names must be unique"
    assert all(it.origin == "synthetic" for it in corpus[:synthetic_count])
    for complete, paused in _pairs(corpus):
        assert (complete.kind, paused.kind) == ("complete", "paused")
        assert (complete.text, complete.voice) == (paused.text, paused.voice)
    texts = [" ".join(s.replace("|", " ").split()) for s in SENTENCES[: PLAN.sentences]]
    synthetic_items = [it for it in corpus if it.origin == "synthetic"]
    assert [it.text for it in synthetic_items[:: 2 * PLAN.voices_per_sentence]] == texts
    for text in texts:
        voices = [it.voice for it in corpus if it.text == text and it.kind == "complete"]
        assert len(set(voices)) == PLAN.voices_per_sentence, f"{text!r} repeats a voice"
    synthetic = {it.voice for it in corpus if it.origin == "synthetic"}
    assert synthetic == set(VOICES), "every voice speaks"


def test_a_paused_item_is_its_complete_twin_with_silence_put_in_at_a_word_gap(
    corpus: tuple[TurnItem, ...],
) -> None:
    low, high = PLAN.pauses_s
    fade = int(FADE_S * PLAN.rate)
    for complete, paused in _pairs(corpus):
        at, n = paused.pause_at, paused.pause_len
        assert at is not None, paused.name
        # The planned length: in the plan's range, whole 10 ms.
        assert low <= paused.pause_s <= high and n % (paused.rate // 100) == 0, paused.name
        assert len(paused.audio) == len(complete.audio) + n, "the pause is put in, nothing cut"
        # Silence there, the same speech on both sides (but for the 5 ms fades at the cut).
        assert not paused.audio[at : at + n].any(), f"{paused.name}: the pause is not silent"
        assert np.array_equal(paused.audio[: at - fade], complete.audio[: at - fade])
        assert np.array_equal(paused.audio[at + n + fade :], complete.audio[at + fade :])
        # At a word gap: the whole sentence is quiet where it was cut, and speech is on both
        # sides of the pause within 150 ms of it (segments are whole 10 ms frames: the frame
        # that holds the cut may reach into the pause).
        assert paused.gap_rms is not None and paused.gap_rms < 0.3 * SPEECH_RMS, paused.name
        (_, head_end), (tail_start, _) = paused.segments
        frame, reach = paused.rate // 100, int(0.15 * paused.rate)
        assert at - reach <= head_end < at + frame, paused.name
        assert at + n - frame < tail_start <= at + n + reach, paused.name
        assert 0.25 <= at / len(complete.audio) <= 0.85, f"{paused.name}: not inside the turn"
        assert paused.pauses == ((at, at + n),) and paused.held and not complete.held
        assert paused.before and paused.after
        assert f"{paused.before} {paused.after}" == paused.text


def test_complete_items_have_no_pause(corpus: tuple[TurnItem, ...]) -> None:
    for item in corpus:
        if item.kind == "complete":
            assert item.pause_at is None and item.pause_len == 0 and item.gap_rms is None
            assert len(item.segments) == 1 and item.pauses == (), item.name
            if item.origin == "synthetic":
                # No 300 ms without speech anywhere inside it (not even the engine's own
                # phrasing). A human turn's own labels say so (bench/human_turns.py).
                assert len(speech_segments(item.audio, item.rate)) == 1, item.name


def test_labels_say_where_speech_ends_and_where_each_segment_is(
    corpus: tuple[TurnItem, ...],
) -> None:
    for item in corpus:
        if item.origin == "human":
            continue  # its labels are bench/human_turns.py's: the next test
        frame = item.rate // 100
        rms = frame_rms(item.audio, item.rate)
        last = item.speech_end // frame - 1
        assert item.speech_end % frame == 0 and item.speech_end <= len(item.audio)
        assert rms[last] > SPEECH_FLOOR, f"{item.name}: no speech in the last labelled frame"
        assert (rms[last + 1 :] <= SPEECH_FLOOR).all(), f"{item.name}: speech after speech_end"
        assert item.final_segment[1] == item.speech_end
        assert item.segments[0][0] == 0, f"{item.name} does not start at its onset"
        for start, end in item.segments:
            assert rms[start // frame] > SPEECH_FLOOR and rms[end // frame - 1] > SPEECH_FLOOR
    for complete, paused in _pairs(corpus):
        assert paused.speech_end == complete.speech_end + paused.pause_len, paused.name
        assert len(paused.segments) == 2 and paused.pause_at is not None
        frame = paused.rate // 100
        silent = paused.segments[1][0] - paused.segments[0][1]
        assert paused.pause_len - 2 * frame < silent, f"{paused.name}: the pause is not a gap"


def test_levels_are_minus_20_dbfs_active(corpus: tuple[TurnItem, ...]) -> None:
    for item in corpus:
        assert item.audio.dtype == np.float32 and item.audio.ndim == 1
        assert np.abs(item.audio).max() <= 1.0
        rms = frame_rms(item.audio, item.rate)
        active = float(np.sqrt((rms[rms > 0.2 * SPEECH_RMS] ** 2).mean()))
        assert -22.0 <= 20 * np.log10(active) <= -18.0, (item.name, active)


def test_the_same_plan_gives_the_same_samples_and_another_seed_other_pauses() -> None:
    plan = CorpusPlan(sentences=3, voices_per_sentence=2)
    first, second = build_corpus(plan), build_corpus(plan)
    assert [it.name for it in first] == [it.name for it in second]
    for a, b in zip(first, second, strict=True):
        assert np.array_equal(a.audio, b.audio), a.name
        assert (a.speech_end, a.segments, a.pause_at) == (b.speech_end, b.segments, b.pause_at)
    other = build_corpus(CorpusPlan(sentences=3, voices_per_sentence=2, seed=22))
    for a, b in zip(first, other, strict=True):
        if a.kind == "complete":
            assert np.array_equal(a.audio, b.audio), "the seed only draws pauses"
    assert [a.pause_len for a in first] != [b.pause_len for b in other]


def test_a_16_khz_corpus_has_the_same_labels_in_its_own_samples() -> None:
    plan = CorpusPlan(sentences=1, voices_per_sentence=1, rate=16000, human_turns=0)
    complete, paused = build_corpus(plan)
    same = build_corpus(CorpusPlan(sentences=1, voices_per_sentence=1))[1]
    assert paused.rate == 16000 and paused.pause_s == same.pause_s
    assert abs(complete.duration_s - (same.duration_s - same.pause_s)) < 0.02


def test_a_plan_beyond_the_lists_is_refused() -> None:
    with pytest.raises(ValueError):
        CorpusPlan(sentences=len(SENTENCES) + 1)
    with pytest.raises(ValueError):
        CorpusPlan(voices_per_sentence=0)
    with pytest.raises(ValueError):
        CorpusPlan(pauses_s=(1.2, 0.4))
    with pytest.raises(ValueError):
        CorpusPlan(rate=22050 + 1)
    with pytest.raises(ValueError):
        CorpusPlan(human_turns=HUMAN_TURNS_MAX + 1)


def test_human_items_are_real_turns_with_their_real_pauses(
    corpus: tuple[TurnItem, ...],
) -> None:
    human = _human(corpus)
    assert len(human) == PLAN.human_turns
    turns = {t.name: t for t in human_turns.human_turns(PLAN.rate)}
    # hedgewars and scsynth serve the overlap corpus only (bench/overlap_corpus.py).
    assert {it.voice for it in human} == set(PACKAGES) - {"scsynth", "hedgewars"}, (
        "every source of human turns takes part"
    )
    kinds = [it.kind for it in human]
    assert set(kinds) == {"held", "complete"} and kinds[:2] == ["held", "complete"]
    assert kinds.count("held") >= 20, "every held human turn is in the default plan"
    for item in human:
        turn = turns[item.recording]
        assert item.voice == turn.source and item.text == (turn.transcript or "")
        assert item.name.startswith(f"{item.kind}/human/{item.voice}/")
        # Onset at 0, to the turn's last speech: its real audio, nothing put in or cut out.
        assert np.array_equal(item.audio, turn.audio[turn.onset : turn.speech_end]), item.name
        assert item.speech_end == len(item.audio) == item.final_segment[1]
        assert item.segments[0][0] == 0
        long = [p for p in turn.held if p.seconds >= HELD_PAUSE_S]
        assert len(item.segments) == len(long) + 1 and len(item.pauses) == len(long)
        assert item.held == bool(long) == (item.kind == "held"), item.name
        for (a, b), pause in zip(item.pauses, long, strict=True):
            assert (a, b) == (pause.start - turn.onset, pause.end - turn.onset)
        for (_, end), (start, _) in zip(item.segments, item.segments[1:], strict=False):
            assert (end, start) in item.pauses
            # The pause is quiet: no frame within 8 dB of the speech level.
            rms = frame_rms(item.audio[end:start], item.rate)
            assert rms.max() < 0.4 * SPEECH_RMS, item.name
        if item.pauses:
            longest = max(item.pauses, key=lambda p: p[1] - p[0])
            assert (item.pause_at, item.pause_len) == (longest[0], longest[1] - longest[0])
    held = [it for it in human if it.kind == "held"]
    assert max(it.pause_s for it in held) >= 1.5, "mfa's long spontaneous pauses are there"
    assert sum(it.text != "" for it in human) >= len(human) - 7, "most carry a transcript"


def test_the_quick_plans_human_turns_are_one_held_and_one_complete() -> None:
    human = _human(build_corpus(CorpusPlan(sentences=1, voices_per_sentence=1, human_turns=2)))
    assert [it.kind for it in human] == ["held", "complete"]

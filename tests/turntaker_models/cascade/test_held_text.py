"""Held text of the `tts` stage (turntaker_models/cascade/held_text.py): bounded per id, and words
lined up with the text they came in."""

from __future__ import annotations

from turntaker_models.cascade.held_text import HeldText, align


def test_held_text_is_bounded() -> None:
    held = HeldText(max_streams=2, max_chars=5)
    for request_id in ("a", "b", "c"):
        assert held.submit(request_id, b"word", sentence=False) == b""
    assert len(held) == 2 and held.snapshot("a") == (0, "")
    held.submit("c", b"longer", sentence=False)
    assert held.snapshot("c") == (0, "word")


def test_align_finds_words_in_order_or_nothing() -> None:
    assert align("  Hi there,\nyou. Next", ["Hi", "there,", "you."]) == [4, 11, 16]
    assert align("Hi there", ["Hi", "here"]) is None
    assert align("", ["Hi"]) is None


def test_waiting_ids_hold_text_and_no_sentence_job() -> None:
    """`waiting`: the ids whose text waits for a sentence still to come, which only a cancel
    can end if none comes (tts.py sweeps them)."""
    held = HeldText()
    held.submit("spoken", b"Hi.", sentence=True)
    held.submit("ahead", b"And then", sentence=False)
    assert held.waiting() == ["ahead"]
    held.done("spoken")
    assert held.waiting() == ["spoken", "ahead"], "its text now waits for another sentence"
    held.take_all("spoken")
    held.done("spoken")
    assert held.waiting() == ["ahead"]

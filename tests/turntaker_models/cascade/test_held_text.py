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

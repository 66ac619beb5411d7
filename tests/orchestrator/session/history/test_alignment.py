"""orchestrator/session/history/alignment.py: rule 5's alignment of text with audio."""

from __future__ import annotations

from orchestrator.session.history.alignment import TextAlignment


def test_rule_1_aligned_text_rides_with_the_next_audio_chunk() -> None:
    align = TextAlignment(audio=True, aligned=True)
    assert align.text("Hello ") is None
    assert align.text("there") is None
    assert align.audio() == "Hello there"
    assert align.audio() == ""  # each piece rides once


def test_rule_2_unaligned_text_goes_on_at_once() -> None:
    align = TextAlignment(audio=True, aligned=False)
    assert align.text("Hello") == "Hello"
    assert align.audio() == ""


def test_rule_2_a_reply_without_audio_sends_its_text_at_once() -> None:
    align = TextAlignment(audio=False, aligned=True)
    assert align.text("Hello") == "Hello"
    assert align.flush() == ""


def test_rule_3_text_held_before_a_call_or_the_end_goes_on_alone() -> None:
    align = TextAlignment(audio=True, aligned=True)
    assert align.text("Let me check") is None
    assert align.flush() == "Let me check"
    assert align.flush() == ""
    assert align.audio() == ""

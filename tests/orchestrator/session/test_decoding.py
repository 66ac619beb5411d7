"""orchestrator/session/decoding.py: which transcriptions take the fast decode."""

from __future__ import annotations

from orchestrator.session.decoding import fast_decode


def test_rule_1_an_overlaps_partial_is_fast() -> None:
    assert fast_decode("overlap")


def test_rule_2_a_pauses_words_are_fast() -> None:
    assert fast_decode("end_of_turn")


def test_rule_3_what_the_conversation_keeps_gets_the_full_decode() -> None:
    assert not fast_decode("turn")
    assert not fast_decode("preempt")

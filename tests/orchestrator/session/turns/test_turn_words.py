"""What a pause's words say: one test per rule of `orchestrator.session.turns.turn_words`."""

from __future__ import annotations

import math

import pytest

from orchestrator.session.turns.turn_words import COMPLETE_LIFT, turn_score, words_say


@pytest.mark.parametrize(
    "words",
    [
        "I would like to book a table for",
        "Please turn off the light in the",
        "I want to go to the station and",
        "Book it for my...",
        "Montreal forced uh um",
        "So, um",
        "Let me think,",
        "The thing is -",
        "Because",
    ],
)
def test_rule_1_words_that_stop_mid_phrase_continue(words: str) -> None:
    assert words_say(words) == "continues"


@pytest.mark.parametrize(
    "words",
    ["What is the weather like in Paris today?", "Book a table for four.", "Yes, I can.", "No!"],
)
def test_rule_1_a_marked_sentence_end_after_a_word_that_may_end_one_is_complete(
    words: str,
) -> None:
    assert words_say(words) == "complete"


@pytest.mark.parametrize("words", [None, "", "   ", "...", "Book a table for four"])
def test_rule_1_no_words_or_no_mark_leave_it_open(words: str | None) -> None:
    assert words_say(words) == "open"


def test_rule_2_words_that_go_on_veto_the_sound() -> None:
    assert turn_score(0.99, "continues") == 0.0


def test_rule_2_a_complete_sentence_lifts_the_sound_and_open_words_leave_it() -> None:
    assert turn_score(0.4, "open") == 0.4
    assert turn_score(0.4, "complete") == pytest.approx(0.4 + 0.6 * COMPLETE_LIFT)
    assert turn_score(1.0, "complete") == 1.0
    assert turn_score(0.0, "complete", complete_lift=0.0) == 0.0


def test_rule_2_a_broken_probability_stays_broken() -> None:
    """A NaN must not become a score a threshold can meet (end_of_turn's caller treats it as
    no answer)."""
    assert math.isnan(turn_score(math.nan, "open"))
    assert math.isnan(turn_score(math.nan, "complete"))

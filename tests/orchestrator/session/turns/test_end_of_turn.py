"""Semantic end of turn: one test per rule of `orchestrator.session.turns.end_of_turn`, then a
property."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.protocol.session_config import EAGERNESS
from orchestrator.session.turns.end_of_turn import (
    FALLBACK_SILENCE_MS,
    UNSURE_WAIT_MS,
    EndOfTurn,
    Verdict,
)

END = Verdict(True, "model")
WAIT = Verdict(False)


def test_ask_tokens_increase() -> None:
    """Rule: each candidate pause is asked once; `ask` gives the request's token, a new one
    each time."""
    eot = EndOfTurn(0.5)
    tokens = [eot.ask() for _ in range(5)]
    assert tokens == sorted(set(tokens)) and len(tokens) == 5
    eot.resumed()
    assert eot.ask() > tokens[-1]


def test_current_answer_at_or_above_threshold_ends_with_cause_model() -> None:
    """Rule: a current answer whose probability is >= the threshold ends the turn (`model`)."""
    for probability in (0.5, 0.51, 1.0):
        eot = EndOfTurn(0.5)
        assert eot.answered(eot.ask(), probability) == END, probability


def test_current_answer_below_threshold_waits_for_the_unsure_wait() -> None:
    """Rule 3: below the threshold, with no words that go on, the turn waits for speech or
    the unsure wait (cause `unsure`)."""
    eot = EndOfTurn(0.5)
    assert eot.answered(eot.ask(), 0.49) == WAIT
    assert eot.answered(eot.ask(), 0.0) == WAIT
    assert not eot.down and eot.silence_limit_ms == UNSURE_WAIT_MS
    assert eot.cause_of_silence_stop() == "unsure"


def test_an_asked_pause_has_the_unsure_wait_as_its_deadline() -> None:
    """Rule 2: from the ask on, the turn ends at the unsure wait unless an answer moves it;
    answers not back by then end it as `late` (a decision always arrives)."""
    eot = EndOfTurn(0.85, unsure_ms=1200)
    assert eot.silence_limit_ms is None  # nothing asked: the longest wait
    token = eot.ask(with_words=True)
    assert eot.pending and eot.silence_limit_ms == 1200
    assert eot.cause_of_silence_stop() == "late"
    eot.answered(token, 0.1)
    assert eot.pending and eot.cause_of_silence_stop() == "late"  # the words are still due
    eot.heard(token, "Book it for four.")
    assert not eot.pending and eot.silence_limit_ms == 1200
    assert eot.cause_of_silence_stop() == "unsure"
    eot.resumed()
    assert eot.silence_limit_ms is None


def test_eagerness_thresholds_decide() -> None:
    """Rule 3: the threshold is the eagerness's."""
    low = EndOfTurn(EAGERNESS["low"].threshold)
    high = EndOfTurn(EAGERNESS["high"].threshold)
    assert low.answered(low.ask(), 0.6) == WAIT  # below 0.85
    assert high.answered(high.ask(), 0.9) == END


def test_a_sure_pause_ends_the_turn_at_the_sure_wait() -> None:
    """Rule 3: a sure pause ends the turn once its silence reaches the sure wait: at once
    when it already has, else the silence limit becomes the sure wait (cause `model`)."""
    eot = EndOfTurn(0.5, sure_ms=600, unsure_ms=1500)
    assert eot.answered(eot.ask(), 0.9, silence_ms=200) == WAIT
    assert eot.silence_limit_ms == 600 and eot.cause_of_silence_stop() == "model"
    assert eot.answered(eot.ask(), 0.9, silence_ms=600) == END
    token = eot.ask(with_words=True)
    eot.answered(token, 0.9, silence_ms=200)
    assert eot.heard(token, "Yes.", silence_ms=700) == END  # the later answer's silence


def test_words_that_go_on_make_a_sure_sound_unsure() -> None:
    """Rule 3: words that go on score 0: the unsure wait, whatever the sound says."""
    eot = EndOfTurn(0.5, sure_ms=600, unsure_ms=1500)
    token = eot.ask(with_words=True)
    eot.answered(token, 0.99, silence_ms=700)
    assert eot.heard(token, "I would like a table for", silence_ms=700) == WAIT
    assert eot.silence_limit_ms == 1500 and eot.cause_of_silence_stop() == "unsure"


def test_an_answer_decides_once() -> None:
    """Rule: an answer decides its ask; a second answer to the same token is stale."""
    eot = EndOfTurn(0.5)
    token = eot.ask()
    assert eot.answered(token, 0.1) == WAIT
    assert eot.answered(token, 0.9) == WAIT


def test_answer_after_resumed_is_stale() -> None:
    """Rule: an ask is current until speech resumes (`resumed`); then its answer decides
    nothing, however sure."""
    eot = EndOfTurn(0.5)
    token = eot.ask()
    eot.resumed()
    assert eot.answered(token, 1.0) == WAIT


def test_older_token_after_a_newer_ask_is_stale() -> None:
    """Rule: a newer ask makes the older one stale; the newer one stays current."""
    eot = EndOfTurn(0.5)
    old = eot.ask()
    new = eot.ask()
    assert eot.answered(old, 1.0) == WAIT
    assert eot.answered(new, 1.0) == END


def test_unknown_token_is_stale() -> None:
    """Rule: an answer to any token but the current one decides nothing."""
    eot = EndOfTurn(0.5)
    token = eot.ask()
    assert eot.answered(token + 1, 1.0) == WAIT
    assert eot.answered(token, 1.0) == END  # the current ask is still open


def test_nan_probability_waits() -> None:
    """Rule: a NaN (a broken reply) fails the comparison: the turn waits."""
    eot = EndOfTurn(0.0)  # even a threshold every number meets
    assert eot.answered(eot.ask(), math.nan) == WAIT


def test_failure_starts_an_outage_told_once() -> None:
    """Rule: an error starts an outage; the first failure of an outage is told (True once),
    later ones are not (False)."""
    eot = EndOfTurn(0.5)
    assert not eot.down
    assert eot.failed(eot.ask()) is True
    assert eot.down
    assert eot.failed(eot.ask()) is False
    assert eot.failed(eot.ask()) is False
    assert eot.down


def test_silence_limit_is_fallback_during_an_outage() -> None:
    """Rule: while the outage lasts, the silence rule decides at `fallback_ms` (500 ms by
    default, server_vad's silence_duration_ms)."""
    assert FALLBACK_SILENCE_MS == 500
    eot = EndOfTurn(0.5)
    assert eot.silence_limit_ms is None and eot.fallback_ms == 500
    eot.failed(eot.ask())
    assert eot.silence_limit_ms == 500
    custom = EndOfTurn(0.5, fallback_ms=300)
    custom.failed(custom.ask())
    assert custom.silence_limit_ms == custom.fallback_ms == 300


def test_a_good_answer_ends_the_outage() -> None:
    """Rule: any good answer ends the outage (the silence limit back to the pause's own), and
    the next failure is a new outage, told again."""
    eot = EndOfTurn(0.5)
    eot.failed(eot.ask())
    assert eot.answered(eot.ask(), 0.1) == WAIT
    assert not eot.down and eot.silence_limit_ms == UNSURE_WAIT_MS
    assert eot.failed(eot.ask()) is True


def test_a_stale_good_answer_ends_the_outage_too() -> None:
    """Rule: any good answer, even one that decides nothing (stale), says the model is back."""
    eot = EndOfTurn(0.5)
    old = eot.ask()
    eot.failed(eot.ask())
    assert eot.answered(old, 0.9) == WAIT  # stale: decides nothing
    assert not eot.down and eot.silence_limit_ms is None  # the failed ask is no pause


def test_a_failure_makes_its_ask_stale() -> None:
    """Rule: a failed ask has no answer to wait for; a late answer to it decides nothing."""
    eot = EndOfTurn(0.5)
    token = eot.ask()
    eot.failed(token)
    assert eot.answered(token, 1.0) == WAIT


def test_a_stale_failure_leaves_the_current_ask_open() -> None:
    """Rule: only the current token's answer decides; an older ask failing does not cancel
    the newer one (it still starts the outage)."""
    eot = EndOfTurn(0.5)
    old = eot.ask()
    new = eot.ask()
    assert eot.failed(old) is True
    assert eot.answered(new, 1.0) == END


def test_pauses_are_still_asked_during_an_outage() -> None:
    """Rule: pauses go on being asked during an outage, so a recovered model is noticed: a
    current answer then decides as usual."""
    eot = EndOfTurn(0.5)
    eot.failed(eot.ask())
    assert eot.answered(eot.ask(), 0.8) == END
    assert not eot.down


def test_fallback_due_only_during_an_outage_and_at_fallback_ms() -> None:
    """Rule: during an outage, a pause already `fallback_ms` long ends the turn at once."""
    eot = EndOfTurn(0.5)
    assert not eot.fallback_due(10_000)  # no outage: the model decides
    eot.failed(eot.ask())
    assert not eot.fallback_due(499)
    assert eot.fallback_due(500)
    assert eot.fallback_due(501)
    eot.answered(eot.ask(), 0.1)
    assert not eot.fallback_due(10_000)


def test_cause_of_silence_stop_names_the_wait_that_ended_the_turn() -> None:
    """Rule 5: the detector's own silence rule ends a semantic turn by `model` (a sure
    pause's wait), `unsure` (the unsure wait), `late` (the answers not back by it), or
    `fallback` during an outage."""
    eot = EndOfTurn(0.5, sure_ms=600)
    eot.failed(eot.ask())
    assert eot.cause_of_silence_stop() == "fallback"
    eot.answered(eot.ask(), 0.2)
    assert eot.cause_of_silence_stop() == "unsure"
    eot.answered(eot.ask(), 0.9)
    assert eot.cause_of_silence_stop() == "model"
    eot.ask()
    assert eot.cause_of_silence_stop() == "late"


Step = tuple[str, int, float]
steps = st.lists(
    st.tuples(
        st.sampled_from(["ask", "resumed", "answer", "fail"]),
        st.integers(-2, 0),  # which token: the latest, or one or two before it
        st.floats(0.0, 1.0),  # NaN: test_nan_probability_waits
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(threshold=st.floats(0.0, 1.0), steps=steps)
def test_only_the_current_ask_ends_a_turn_and_outages_are_told_once(
    threshold: float, steps: list[Step]
) -> None:
    """Rules, against a model of them: an answer ends the turn only when its token is the
    current ask and its probability >= threshold; `failed` is True exactly on the first
    failure after a good answer (or ever); silence_limit_ms follows the outage."""
    eot = EndOfTurn(threshold)
    current: int | None = None
    latest = 0
    down = False
    decided = False  # a current answer came back since the last ask or resume
    sure = False  # ... and it met the threshold
    for kind, back, probability in steps:
        token = latest + back
        if kind == "ask":
            latest = eot.ask()
            assert latest > token - back  # increasing
            current = latest
            decided = sure = False
        elif kind == "resumed":
            eot.resumed()
            current = None
            decided = sure = False
        elif kind == "answer":
            verdict = eot.answered(token, probability)
            ends = token == current and probability >= threshold
            assert verdict == (END if ends else WAIT)
            if token == current:
                current = None
                decided, sure = True, probability >= threshold
            down = False
        else:
            assert eot.failed(token) is (not down)
            if token == current:
                current = None
            down = True
        assert eot.down is down
        asked = current is not None or decided
        limit = 0 if sure and current is None else UNSURE_WAIT_MS  # sure_ms is 0 here
        assert eot.silence_limit_ms == (FALLBACK_SILENCE_MS if down else limit if asked else None)
        cause = "late" if current is not None else ("model" if sure else "unsure")
        assert eot.cause_of_silence_stop() == ("fallback" if down else cause)


# Words: a pause's transcript and the model's probability decide together.


def test_with_words_the_verdict_waits_for_both_answers() -> None:
    """Rule: the verdict waits for the probability and the transcript, in either order."""
    e = EndOfTurn(0.5)
    token = e.ask(with_words=True)
    assert not e.answered(token, 0.9).end
    assert e.heard(token, "What time is it?") == Verdict(True, "model")
    token = e.ask(with_words=True)
    assert not e.heard(token, "What time is it?").end
    assert e.answered(token, 0.9) == Verdict(True, "model")


def test_words_that_go_on_keep_the_turn_open_whatever_the_probability() -> None:
    e = EndOfTurn(0.5)
    token = e.ask(with_words=True)
    e.answered(token, 0.99)
    assert not e.heard(token, "I would like to book a table for").end


def test_a_failed_or_empty_transcript_leaves_the_model_alone_to_decide() -> None:
    e = EndOfTurn(0.5)
    token = e.ask(with_words=True)
    e.answered(token, 0.9)
    assert e.heard(token, None).end
    token = e.ask(with_words=True)
    assert e.heard(token, "") == Verdict(False)
    assert e.answered(token, 0.9).end


def test_words_of_a_stale_ask_decide_nothing() -> None:
    e = EndOfTurn(0.5)
    old = e.ask(with_words=True)
    new = e.ask(with_words=True)
    e.answered(new, 0.9)
    assert not e.heard(old, "Done.").end
    assert e.heard(new, "Done.").end

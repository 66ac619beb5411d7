"""Answers that suit speech (turntaker_models/cascade/spoken.py): markdown dropped from the
streamed text, however it is split, and no repeated runs of tokens."""

from __future__ import annotations

import pytest

from turntaker_models.cascade.spoken import MarkdownFilter, repeat_bans

MARKDOWN = "# Tips\n- **Drink** water.\n  + Sleep `well`.\n* Walk daily.\nA - B and 3-4 stay."
SPOKEN = " Tips\nDrink water.\n  Sleep well.\n Walk daily.\nA - B and 3-4 stay."


@pytest.mark.parametrize("step", [1, 2, 3, 7, len(MARKDOWN)])
def test_markdown_symbols_and_bullets_are_dropped_however_the_text_is_split(step: int) -> None:
    f = MarkdownFilter()
    out = "".join(f.feed(MARKDOWN[i : i + step]) for i in range(0, len(MARKDOWN), step))
    assert out + f.flush() == SPOKEN


def test_a_dash_at_the_very_end_is_not_lost() -> None:
    f = MarkdownFilter()
    assert f.feed("Yes\n-") == "Yes\n"
    assert f.flush() == "-"


def test_repeat_bans_stop_a_loop_of_n_tokens() -> None:
    said = [1, 2, 3, 4, 9, 1, 2, 3]
    assert repeat_bans(said, n=4) == {4}
    assert repeat_bans(said, n=5) == set()
    assert repeat_bans([7, 7, 7], n=2) == {7}
    assert repeat_bans([1, 2], n=6) == set()

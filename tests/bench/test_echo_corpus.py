"""bench/echo_corpus.py: what the echo benches replay."""

from __future__ import annotations

from bench.echo_corpus import EchoItem, Plan, build


def _speech(items: tuple[EchoItem, ...], with_room: bool) -> set[tuple[str, str, float]]:
    return {
        (i.user.text, i.user.source, i.offset_s)
        for i in items
        if i.user is not None and (i.room is not None) == with_room
    }


def test_rule5_the_echo_free_items_say_what_the_items_over_echo_say_at_their_offsets() -> None:
    """The latency target compares the median over echo with the echo-free one: a different
    mix of speech on either side would be a different measure."""
    for seeds in (1, 3):  # 20 cells (fewer than rule 5's cycle), 60 (more)
        plan = Plan(voices=("cascade",), kinds=("interruption",), seeds=seeds, human=False)
        items = build(plan)
        free = [i for i in items if i.room is None]
        assert len(free) == min(20 * seeds, 48)
        assert _speech(items, False) == _speech(items, True)

"""bench/echo_offline.py: the echo bench's sessions replayed through the real session core and
silero, on a simulated clock. Its rules 1-3 must hold for its numbers to mean what the live
bench's do: the echo of an answer barges in without cancellation and not with it, and a user
who speaks over the answer cuts it."""

from __future__ import annotations

import pytest

from bench.echo import Run
from bench.echo_corpus import EchoItem, Plan, build
from bench.echo_offline import replay, table, targets
from bench.machine_load import Load, mark

PLAN = Plan(
    voices=("cascade",),
    levels_db=(-6.0,),
    delays_ms=(120.0,),
    kinds=("echo", "interruption"),
    echo_free=1,
    human=False,
)


@pytest.fixture(scope="module")
def items() -> dict[str, EchoItem]:
    built = build(PLAN)
    return {f"{i.kind}-{'echo' if i.room else 'free'}": i for i in built}


def test_rule1_the_answer_s_echo_barges_in_without_cancellation_and_not_with_it(
    items: dict[str, EchoItem],
) -> None:
    run = Run(plan=PLAN)
    off = replay(run, items["echo-echo"], cancellation=False)
    on = replay(run, items["echo-echo"], cancellation=True)
    assert off.first_audio is not None and on.first_audio is not None
    assert off.cut_by_echo, "without cancellation the echo must cut the answer"
    assert not on.cut_by_echo, f"the canceller let the echo cut the answer: {on.cut}"
    assert on.done_status == "completed"


def test_rule3_a_user_who_speaks_over_the_echo_interrupts_the_answer(
    items: dict[str, EchoItem],
) -> None:
    run = Run(plan=PLAN)
    over = replay(run, items["interruption-echo"], cancellation=True)
    assert over.onset is not None and over.interrupted, over
    free = replay(run, items["interruption-free"], cancellation=False)
    assert free.interrupted and 0 < free.latency < 1.0


def test_rule4_the_targets_need_fifty_answers_a_level(items: dict[str, EchoItem]) -> None:
    run = Run(plan=PLAN)
    outcomes = [replay(run, items["echo-echo"], cancellation=True)]
    lines = targets(outcomes)
    assert "1 answers" not in lines[2]
    assert lines[2].endswith("MISSED"), "one answer cannot show 2%"
    section = table(run, outcomes, "python -m bench.echo_offline", Load(mark(), mark()))
    assert section.startswith("## Echo (in memory)")
    assert "0/1 (0%; 0-79%)" in section

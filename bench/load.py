"""Load benchmark: N realtime sessions over real WebSockets on the `null` pipeline.

One run, side by side: a real tritonserver (`null`, `vad`, `cancel`), the realtime server in
its own process (`bench/load_server.py`, measured from inside: samples of its latency
metrics, CPU and RSS), and N client sessions (`bench/load_clients.py`) that stream flite
speech in real time, barge in on every answer and ACK playback. The `null` model streams fixed
80 ms chunks at real-time pace after 234 ms (Qwen3-Omni's reported first-packet latency), so
everything measured beyond that is the orchestrator's own cost.

Per N (a sweep that stops at the first N that is not real time, but not before N=100):
- barge-in: speech onset sent -> `output_audio_buffer.cleared` at the client, and the server's
  part (its VAD decision -> cleared sent);
- time to first audio: from the end of speech, and from `committed` (the orchestrator's path),
  against the same `null` request sent straight to Triton with tritonclient in the same run;
- event-loop lag, input backlog, CPU and RSS per session; real time means p99 lag <= 20 ms,
  input backlog p99 <= two appends per session, and no missed clear, answer or session;
- all of it twice: VAD batched in Triton, and one silero per session in the server process;
  with `--echo off,on` also with the server's echo cancellation on (WebRTC AEC3 on every
  append, its reference the answers' audio), the two side by side (real-time N, CPU/session).
Then memory over 10,000 interruptions in one session (a second Triton whose `null` runs 1000x
faster, so the loop takes a minute, not hours).

Run: `python -m bench.load --write` (writes "## Load" in docs/benchmarks.md and the PNG
plots beside it).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import soxr

from bench import cli, report, servers, stats
from bench.load_clients import Figures, Script, interruptions, loop_lag, run_sessions
from bench.servers import RealtimeProcess
from bench.speech import flite_from_onset as flite_speech
from bench.vad_batching import group_cpu_s
from orchestrator.triton.pipeline_client import PipelineRequest, PipelineStream
from turntaker_models.contract import AudioPart, Conversation, GenerationParameters, Message

HEADING = "## Load"
Audio16 = npt.NDArray[np.float32]
MODELS = ("null", "vad", "cancel", "turn")
QUESTION = "What is the capital of France?"
MAX_TOKENS = 50  # 50 chunks of 80 ms: a 4 s answer, always still streaming at the barge-in
LAG_LIMIT_S = 0.020
BACKLOG_LIMIT = 6.25  # VAD chunks per session: two 100 ms appends
# The sweep goes on past a broken limit up to this N, where the issue sets a barge-in target.
TARGET_N = 100


def _direct_request(n: int, audio16: Audio16) -> PipelineRequest:
    conversation = Conversation(messages=[Message(role="user", content=[AudioPart(0, None)])])
    return PipelineRequest(
        request_id=f"direct-{os.getpid()}-{n}-{time.monotonic_ns()}",
        conversation=conversation,
        audio=[audio16],
        parameters=GenerationParameters(max_tokens=MAX_TOKENS),
    )


def direct_probe(url: str, audio16: Audio16, stop: threading.Event, out: list[float]) -> None:
    """The same request straight to Triton with tritonclient, once a second, in the same run:
    stream opened, request sent, first audio chunk received; then cancelled as a barge-in."""
    n = 0
    while not stop.wait(1.0):
        n += 1
        began = time.monotonic()
        with PipelineStream(url, "null") as stream:
            stream.start(_direct_request(n, audio16))
            for chunk in stream.chunks(timeout_s=30):
                if chunk.audio.size:
                    out.append(chunk.received_at - began)
                    break
            stream.cancel()


@dataclass
class Row:
    vad: str
    sessions: int
    figures: Figures
    server: dict[str, Any]
    baseline_rss: int
    direct: list[float]
    client_lag: list[float]
    triton_cpu_s: float
    # The sessions asked for `audio.input.echo_cancellation: server`.
    echo: bool = False

    @property
    def label(self) -> str:
        return f"{self.vad} echo" if self.echo else self.vad

    @property
    def samples(self) -> dict[str, list[float]]:
        result: dict[str, list[float]] = self.server["samples"]
        return result

    @property
    def lag_p99(self) -> float:
        return stats.p99(self.samples.get("event_loop_lag", []))

    @property
    def backlog_p99_per_session(self) -> float:
        return stats.p99(self.samples.get("input_backlog", [])) / self.sessions

    @property
    def realtime(self) -> bool:
        f = self.figures
        return (
            self.lag_p99 <= LAG_LIMIT_S
            # A 100 ms append is 3.125 VAD chunks, and a session's chunks go one per batch, so
            # up to one append waits in normal running; two appends waiting is falling behind.
            and self.backlog_p99_per_session <= BACKLOG_LIMIT
            and f.missed_clears == 0
            and f.missed_answers == 0
            and f.failed_sessions == 0
        )

    @property
    def overhead(self) -> float:
        """Median TTFA from commit over median direct TTFA (1.0: no overhead)."""
        return stats.ratio(stats.median(self.figures.ttfa_commit), stats.median(self.direct))

    @property
    def cpu_per_session(self) -> float:
        """Orchestrator CPU seconds per second of wall time, per session."""
        return float(self.server["cpu_s"]) / float(self.server["wall_s"]) / self.sessions

    @property
    def rss_per_session_mb(self) -> float:
        return (int(self.server["rss"]) - self.baseline_rss) / self.sessions / 2**20


async def _drive(
    server: RealtimeProcess, script: Script, sessions: int, warmup_s: float, measure_s: float,
    grpc_url: str, audio16: Audio16, triton_pgid: int, profile: Path | None, echo: bool,
) -> tuple[Figures, dict[str, Any], list[float], list[float], float]:  # fmt: skip
    figures = Figures()
    client_lag: list[float] = []
    direct: list[float] = []
    stop_lag = asyncio.Event()
    stop_probe = threading.Event()
    triton_cpu = [0.0, 0.0]

    async def measuring() -> None:
        if profile is not None:
            # Collapsed stacks of the server over the measured window (py-spy, not blocking it).
            subprocess.Popen(
                [str(Path(sys.executable).parent / "py-spy"), "record", "--nonblocking",
                 "--format", "raw", "--rate", "200",
                 "--duration", str(int(measure_s)), "--pid", str(server.pid), "-o", str(profile)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
        await asyncio.to_thread(server.ask, "reset")
        triton_cpu[0] = group_cpu_s(triton_pgid)
        client_lag.clear()

    lag_task = asyncio.create_task(loop_lag(client_lag, stop_lag))
    probe = threading.Thread(
        target=direct_probe, args=(grpc_url, audio16, stop_probe, direct), daemon=True
    )
    probe.start()
    try:
        await run_sessions(
            server.url, script, sessions, warmup_s, measure_s, figures, on_measure=measuring,
            echo=echo,
        )  # fmt: skip
        counters = await asyncio.to_thread(server.ask, "stats")
        triton_cpu[1] = group_cpu_s(triton_pgid)
    finally:
        stop_lag.set()
        stop_probe.set()
        await lag_task
        probe.join(30)
    return figures, counters, direct, client_lag, triton_cpu[1] - triton_cpu[0]


def sweep_point(
    grpc_url: str, triton_pgid: int, vad: str, sessions: int, script: Script,
    audio16: Audio16, warmup_s: float, measure_s: float, profile: Path | None = None,
    echo: bool = False,
) -> Row:  # fmt: skip
    server = RealtimeProcess(grpc_url, instrumented=servers.instrumented(vad))
    try:
        time.sleep(0.5)
        baseline = int(server.ask("stats")["rss"])
        figures, counters, direct, client_lag, triton_cpu = asyncio.run(
            _drive(
                server,
                script,
                sessions,
                warmup_s,
                measure_s,
                grpc_url,
                audio16,
                triton_pgid,
                profile,
                echo,
            )
        )
    finally:
        server.close()
    return Row(vad, sessions, figures, counters, baseline, direct, client_lag, triton_cpu, echo)


def _print_row(row: Row) -> None:
    s, f = row.samples, row.figures
    print(
        f"[{row.label} N={row.sessions}] turns {f.turns} barge-in client p50 "
        f"{report.ms(stats.median(f.barge_in))} p99 {report.ms(stats.p99(f.barge_in))} server p99 "
        f"{report.ms(stats.p99(s.get('barge_in_latency', [])))} ms; ttfa(commit) "
        f"{report.ms(stats.median(f.ttfa_commit))} direct "
        f"{report.ms(stats.median(row.direct))} ms; lag p99 "
        f"{report.ms(row.lag_p99)} ms; backlog/session p99 {row.backlog_p99_per_session:.2f}; "
        f"cpu/session {row.cpu_per_session * 100:.2f}%; triton cpu "
        f"{row.triton_cpu_s / float(row.server['wall_s']) * 100:.0f}%; rss/session "
        f"{row.rss_per_session_mb:.2f} MB; missed clears {f.missed_clears} answers "
        f"{f.missed_answers} failed {f.failed_sessions}; realtime {row.realtime}; errors "
        f"{f.errors[:3]}",
        flush=True,
    )


@dataclass
class Memory:
    points: list[tuple[int, int, int]]  # (interruptions, rss bytes, open fds)
    statuses: dict[str, int]
    seconds: float

    @property
    def drift(self) -> float:
        """RSS growth from the first checkpoint (warm) to the last, as a fraction."""
        first, last = self.points[1][1], self.points[-1][1]
        return (last - first) / first


def memory_run(script: Script, count: int) -> Memory:
    with servers.triton(MODELS, null_speed=1000.0) as fast:
        server = RealtimeProcess(fast.grpc_url, instrumented=servers.instrumented())
        try:
            counters = server.ask("stats")
            points = [(0, int(counters["rss"]), int(counters["fds"]))]

            async def progress(n: int) -> None:
                counters = await asyncio.to_thread(server.ask, "stats")
                points.append((n, int(counters["rss"]), int(counters["fds"])))
                print(f"[memory] {n} interruptions: rss {counters['rss'] / 2**20:.1f} MiB, "
                      f"fds {counters['fds']}", flush=True)  # fmt: skip

            began = time.monotonic()
            every = max(1, count // 10)
            statuses = asyncio.run(interruptions(server.url, script, count, progress, every))
            return Memory(points, statuses, time.monotonic() - began)
        finally:
            server.close()


def render(rows: list[Row], memory: Memory | None, command: str, machine: str) -> str:
    lines = [
        HEADING,
        "",
        f"Command: `{command}` ({machine}).",
        "",
        "Pipeline `null` in a real tritonserver: 80 ms chunks of audio at real-time pace, the "
        "first after 234 ms, no compute. Each session streams flite speech in real time "
        "(100 ms appends), server VAD (silence 500 ms), and barges in 1 s into every 4 s "
        "answer, ACKing playback every 0.5 s; with echo, its session.update turns on "
        "`audio.input.echo_cancellation` (`server`: WebRTC AEC3 on every append, its reference "
        "the answers' audio). The realtime server runs in its own process; "
        "client, server and Triton share the machine's 2 cores. Times in ms: median / p99.",
        "",
        "- barge-in (client): onset append sent -> `output_audio_buffer.cleared` received, "
        "including the VAD's own detection time; (server): VAD decision -> cleared sent.",
        "- TTFA (end): last speech append sent -> first audio delta (includes the 500 ms "
        "silence window); (commit): `committed` -> first audio delta at the client, the "
        "orchestrator's path; direct: the same `null` request with tritonclient, stream opened "
        "-> first chunk, in the same run; ratio = commit / direct medians.",
        "- lag: the server's event-loop lag (10 ms probe); backlog: appends waiting for or "
        "in the VAD per session (p99; the one being answered counts); CPU: orchestrator "
        "process CPU per session as % of one core; "
        "RSS: growth over the idle server per session; client lag: the load generator's own "
        "event-loop lag, which bounds how far its timings can be off.",
        "",
        "| VAD | echo | N | turns | barge-in client | barge-in server | TTFA end | TTFA commit | "
        "direct | ratio | lag | backlog p99 | CPU/session | Triton CPU | RSS/session MB | "
        "real time | client lag p99 |",
        "|---|---|---:|---:|---|---|---|---|---|---:|---|---:|---:|---:|---:|---|---:|",
    ]
    for row in rows:
        f, s = row.figures, row.samples

        def pair(values: list[float]) -> str:
            return f"{report.ms(stats.median(values))} / {report.ms(stats.p99(values))}"

        triton_pct = row.triton_cpu_s / float(row.server["wall_s"]) * 100
        lines.append(
            f"| {row.vad} | {'on' if row.echo else 'off'} | {row.sessions} | {f.turns} | "
            f"{pair(f.barge_in)} | "
            f"{pair(s.get('barge_in_latency', []))} | {pair(f.ttfa_end)} | "
            f"{pair(f.ttfa_commit)} | {pair(row.direct)} | {row.overhead:.3f}x | "
            f"{pair(s.get('event_loop_lag', []))} | {row.backlog_p99_per_session:.2f} | "
            f"{row.cpu_per_session * 100:.2f}% | {triton_pct:.0f}% | "
            f"{row.rss_per_session_mb:.2f} | {'yes' if row.realtime else 'no'} | "
            f"{report.ms(stats.p99(row.client_lag))} |"
        )
    by_label: dict[str, list[Row]] = {}
    for row in rows:
        by_label.setdefault(row.label, []).append(row)
    lines.append("")
    for label, group in by_label.items():
        real = [r.sessions for r in group if r.realtime]
        broke = [r for r in group if not r.realtime]
        limit = f"largest real-time N {max(real)}" if real else "no N was real time"
        if broke:
            r = broke[0]
            why = []
            if r.lag_p99 > LAG_LIMIT_S:
                why.append(f"lag p99 {report.ms(r.lag_p99)} ms")
            if r.backlog_p99_per_session > BACKLOG_LIMIT:
                why.append(f"backlog p99 {r.backlog_p99_per_session:.1f} chunks/session")
            f = r.figures
            if f.missed_clears or f.missed_answers or f.failed_sessions:
                why.append(
                    f"missed clears {f.missed_clears}, answers {f.missed_answers}, "
                    f"failed sessions {f.failed_sessions}"
                )
            limit += f"; at N={r.sessions}: " + ", ".join(why)
        lines.append(f"- VAD {label}: {limit}.")
    lines += echo_against_off(rows)
    lines += ["", *targets(rows, memory)]
    if memory is not None:
        lines += [
            "",
            f"Memory over {memory.points[-1][0]} interruptions in one session "
            f"({memory.seconds:.0f} s; client-side barge-in: short turn, `response.create`, "
            "partial ACK and `output_audio_buffer.clear` at the first audio delta; `null` "
            f"1000x faster; response statuses {memory.statuses}):",
            "",
            "| interruptions | RSS MiB | open fds |",
            "|---:|---:|---:|",
        ]
        lines += [f"| {n} | {rss / 2**20:.1f} | {fds} |" for n, rss, fds in memory.points]
        lines += [
            "",
            f"RSS drift from {memory.points[1][0]} to {memory.points[-1][0]} interruptions: "
            f"{memory.drift * 100:+.2f}%.",
        ]
    lines += ["", "![latency vs N](bench_load_latency.png)", ""]
    lines.append("![cost vs N](bench_load_cost.png)")
    return "\n".join(lines) + "\n"


def echo_against_off(rows: list[Row]) -> list[str]:
    """Echo cancellation on against off, side by side per VAD and N run both ways: real time
    and CPU per session, then the largest real-time N of each."""
    off = {(r.vad, r.sessions): r for r in rows if not r.echo}
    pairs = [(off[r.vad, r.sessions], r) for r in rows if r.echo and (r.vad, r.sessions) in off]
    if not pairs:
        return []
    lines = [
        "",
        "Echo cancellation on against off:",
        "",
        "| VAD | N | CPU/session off | CPU/session on | real time off | real time on |",
        "|---|---:|---:|---:|---|---|",
    ]
    for a, b in pairs:
        lines.append(
            f"| {a.vad} | {a.sessions} | {a.cpu_per_session * 100:.2f}% | "
            f"{b.cpu_per_session * 100:.2f}% | {'yes' if a.realtime else 'no'} | "
            f"{'yes' if b.realtime else 'no'} |"
        )
    lines.append("")
    for vad in dict.fromkeys(a.vad for a, _ in pairs):

        def largest(echo: bool, vad: str = vad) -> int:
            real = [r.sessions for r in rows if r.vad == vad and r.echo == echo and r.realtime]
            return max(real, default=0)

        lines.append(
            f"- VAD {vad}: largest real-time N {largest(False)} with echo cancellation off, "
            f"{largest(True)} on."
        )
    return lines


def targets(rows: list[Row], memory: Memory | None) -> list[str]:
    """The issue's targets against this run's figures (VAD in Triton, the production path,
    echo cancellation off)."""
    triton_rows = {r.sessions: r for r in rows if r.vad == "triton" and not r.echo}

    def verdict(ok: bool) -> str:
        return "met" if ok else "MISSED"

    out = ["Targets (VAD in Triton):", ""]
    for n, limit in ((1, 0.005), (100, 0.025)):
        row = triton_rows.get(n)
        if row is None:
            out.append(f"- server barge-in p99 <= {limit * 1000:.0f} ms at {n}: not run")
            continue
        p99 = stats.p99(row.samples.get("barge_in_latency", []))
        out.append(
            f"- server barge-in p99 <= {limit * 1000:.0f} ms at {n} session(s): "
            f"{report.ms(p99)} ms, {verdict(p99 <= limit)}"
            + ("" if row.realtime else " (this N is past the real-time limit)")
        )
    real = [r for r in triton_rows.values() if r.realtime]
    if real:
        worst = max(r.overhead for r in real)
        out.append(
            f"- TTFA overhead <= 5% over direct Triton: {(worst - 1) * 100:+.1f}% at worst "
            f"over the real-time N, {verdict(worst <= 1.05)}"
        )
    largest = max((r.sessions for r in real), default=0)
    out.append(f"- >= 200 real-time sessions per process: {largest}, {verdict(largest >= 200)}")
    if memory is not None:
        out.append(
            f"- memory within 5% over {memory.points[-1][0]} interruptions: "
            f"{memory.drift * 100:+.2f}%, {verdict(abs(memory.drift) <= 0.05)}"
        )
    return out


def plot(rows: list[Row], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for vad in sorted({r.label for r in rows}):
        group = [r for r in rows if r.label == vad]
        n = [r.sessions for r in group]
        axes[0].plot(n, [stats.p99(r.figures.barge_in) * 1000 for r in group], "o-",
                     label=f"client p99 ({vad} VAD)")  # fmt: skip
        axes[0].plot(n, [stats.p99(r.samples.get("barge_in_latency", [])) * 1000 for r in group],
                     "s--", label=f"server p99 ({vad} VAD)")  # fmt: skip
        axes[1].plot(n, [r.overhead for r in group], "o-", label=f"{vad} VAD")
        axes[2].plot(n, [r.lag_p99 * 1000 for r in group], "o-", label=f"{vad} VAD")
    axes[0].set(title="Barge-in latency", xlabel="sessions", ylabel="ms", yscale="log")
    axes[1].set(title="TTFA from commit / direct Triton", xlabel="sessions", ylabel="ratio")
    axes[1].axhline(1.05, color="grey", linestyle=":", label="target 1.05")
    axes[2].set(title="Event-loop lag p99", xlabel="sessions", ylabel="ms")
    axes[2].axhline(20, color="grey", linestyle=":", label="limit 20 ms")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "bench_load_latency.png", dpi=90)
    plt.close(fig)

    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2))
    for vad in sorted({r.label for r in rows}):
        group = [r for r in rows if r.label == vad]
        n = [r.sessions for r in group]
        axes[0].plot(n, [r.cpu_per_session * 100 for r in group], "o-", label=f"{vad} VAD")
        axes[1].plot(n, [r.rss_per_session_mb for r in group], "o-", label=f"{vad} VAD")
    axes[0].set(title="Orchestrator CPU per session", xlabel="sessions", ylabel="% of a core")
    axes[1].set(title="Orchestrator RSS per session", xlabel="sessions", ylabel="MB")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "bench_load_cost.png", dpi=90)
    plt.close(fig)


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sessions", default="1,10,50,75,100,150,200,300,400")
    parser.add_argument("--vad", default="triton,inprocess")
    parser.add_argument(
        "--echo",
        default="off",
        help="off, on or off,on: the sessions with the server's echo cancellation off, on, or "
        "both side by side (default: %(default)s)",
    )
    parser.add_argument("--warmup", type=float, default=6.0)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--interruptions", type=int, default=10000)
    parser.add_argument(
        "--profile", type=Path, help="folder for py-spy collapsed stacks of each sweep point"
    )


def echo_modes(value: str) -> list[bool]:
    """`--echo`'s value: echo cancellation off, on, or both in the order given."""
    words = [w.strip() for w in value.split(",") if w.strip()]
    if not words or any(w not in ("off", "on") for w in words) or len(set(words)) < len(words):
        raise cli.Usage(f"--echo: off, on or off,on, not {value!r}")
    return [w == "on" for w in words]


def _run(args: argparse.Namespace, command: str) -> cli.Outcome:
    echoes = echo_modes(args.echo)
    speech = flite_speech(QUESTION)
    script = Script.from_audio(speech)
    audio16 = np.asarray(soxr.resample(speech, 24000, 16000), np.float32)
    rows: list[Row] = []
    with servers.triton(MODELS) as server:
        assert server.pid is not None
        pgid = os.getpgid(server.pid)
        for vad in args.vad.split(","):
            for echo in echoes:
                name = f"{vad}-echo" if echo else vad
                for sessions in [int(n) for n in args.sessions.split(",")]:
                    row = sweep_point(
                        server.grpc_url, pgid, vad, sessions, script, audio16,
                        args.warmup, args.seconds,
                        args.profile / f"server-{name}-{sessions}.txt" if args.profile else None,
                        echo,
                    )  # fmt: skip
                    _print_row(row)
                    rows.append(row)
                    if not row.realtime and sessions >= TARGET_N:
                        break  # the limit broke: larger N only break it further
    memory = memory_run(script, args.interruptions) if args.interruptions else None
    machine = f"{os.cpu_count()} cores, Python {sys.version.split()[0]}, CPU only"
    return cli.Outcome(render(rows, memory, command, machine), files=lambda at: plot(rows, at))


BENCH = cli.Bench("bench.load", __doc__, report.DOC, _arguments, _run, local=("--profile",))


def main(argv: list[str] | None = None) -> int:
    return cli.main(BENCH, argv)


if __name__ == "__main__":
    raise SystemExit(main())

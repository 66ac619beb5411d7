"""Barge-in on a speakerphone: the assistant's own answer in the microphone, without and with the
server's echo cancellation (`audio.input.echo_cancellation: {"type": "server"}`, issue 26).

One run: per voice (bench/echo_corpus.py: the cascade's Piper `joe`, and a stand-in for
Qwen3-Omni's), a tritonserver whose `null` model answers with that voice (`null_audio`: the
answer costs no compute) beside `vad`, `asr`, `cancel` and `turn`, the realtime server in its
own process (`turntaker serve --pipeline null`), and one session per corpus item, a few at a
time, for each cancellation setting and interruption mode. Each session is a speakerphone
(bench/speakerphone.py): it plays the answer at real time with playout jitter, hears it back
through the item's room, and sends that (plus the user's speech, where the item has some) as
its microphone.

Rules:
1. Per voice, setting, mode and echo level (and again per delay), from the echo items alone:
   false barge-ins (the answer cut: `output_audio_buffer.cleared`, a cancelled
   `response.done` or an interrupt `overlap.decision`), false pauses (pause mode's
   `output_audio_buffer.paused`) and the echo heard as speech at all (`speech_started`).
2. From the interruption items: cut by the echo before the user spoke; missed (the answer
   still playing when the user spoke, and not cut after); speech onset (the send time of the
   append holding the user's first sample) -> interrupt (the clear, or the interrupt decision
   in pause mode), median / p90, against the same figure with no echo at all (the echo-free
   items, cancellation off: the plain server with a headset). From the backchannels: heard
   (`speech_started` after the onset) and cut.
3. Echo return loss enhancement, offline on the same corpus (every echo item's answer through
   its room and jitter, no near-end talk) with the canceller class the server uses
   (orchestrator/session/echo/webrtc.py): 10 log10 of the echo's energy over the cleaned
   signal's, over the whole answer and after its first second (AEC3's convergence); and the
   canceller's CPU time per second of audio.
4. The server's CPU per session-second: its process's user + system time (/proc) over one
   setting's sessions, divided by the sum of their durations.
5. Targets, with cancellation on, shown met / MISSED (`targets`, bench/echo_offline.py's too):
   echo alone causes <= 2% false barge-ins at every level from -20 to 0 dB, on >= 50 answers
   per level (95% intervals beside each share); true interruptions over echo are missed
   <= 2% and decided (median) within 80 ms of the echo-free figure (the plain server with a
   headset); the interruptions 0.5 s into an answer all work (no blind window).

Run: `python -m bench.echo --write` (writes "## Echo" in docs/benchmarks.md); `--quick` runs a
handful of items (CI).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
import wave
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

import numpy as np
import numpy.typing as npt
from websockets.exceptions import WebSocketException
from websockets.sync.client import connect

from bench import cli, machine_load, report, servers, stats
from bench.echo_corpus import KINDS, VOICES, EchoItem, Plan, Voice, answer, build
from bench.overlap_corpus import room_tone
from bench.rooms import EchoPath
from bench.speakerphone import TICK_MS, Playout, Speakerphone, played
from bench.speech import RATE, pcm16

HEADING = "## Echo"
MODELS = ("null", "vad", "asr", "cancel", "turn")
Mode = Literal["immediate", "pause"]
QUICK = Plan(
    voices=("cascade",),
    levels_db=(-6.0, 0.0),
    delays_ms=(120.0,),
    kinds=("echo", "interruption"),
    echo_free=1,
)
FALSE_TARGET = 0.02
MISSED_TARGET = 0.02
LATENCY_MARGIN_MS = 80.0
MIN_ANSWERS = 50  # answers per level before a share can show 2%
CHUNK_S = 0.08  # the null pipeline's chunk
# A client that knows its player's position acknowledges it often (far_end.py rule 5: frequent
# ACKs keep the reference in step with its stalls).
ACK_EVERY_S = 0.1
SETTLE_S = 0.3
ASK = {
    "type": "conversation.item.create",
    "item": {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": "What is the weather like in Paris?"}],
    },
}


@dataclass(frozen=True)
class Run:
    plan: Plan
    modes: tuple[Mode, ...] = ("immediate",)
    settings: tuple[bool, ...] = (False, True)  # echo cancellation off, on
    parallel: int = 4
    min_speech_ms: int = 400
    resume_after_ms: int = 1500


@dataclass
class Outcome:
    """What one session saw (client `time.monotonic` seconds); None: never seen."""

    item: EchoItem
    cancellation: bool
    mode: Mode
    answer_id: str | None = None
    began: float = 0.0
    ended: float = 0.0
    first_audio: float | None = None
    onset: float | None = None
    speech_starts: list[float] = field(default_factory=list)
    paused: float | None = None
    cut: float | None = None
    done_status: str | None = None
    decision: dict[str, Any] | None = None
    errors: list[str] = field(default_factory=list)

    def on_event(self, event: dict[str, Any], at: float) -> None:
        kind = event["type"]
        response = event.get("response") if isinstance(event.get("response"), dict) else None
        rid = response.get("id") if response else event.get("response_id")
        if kind == "response.created" and self.answer_id is None and response:
            self.answer_id = str(response["id"])
        elif kind == "input_audio_buffer.speech_started":
            self.speech_starts.append(at)
        elif kind == "error":
            self.errors.append(str(event.get("error")))
        elif self.answer_id is None or rid != self.answer_id:
            return
        elif kind == "response.output_audio.delta" and self.first_audio is None:
            self.first_audio = at
        elif kind == "output_audio_buffer.paused" and self.paused is None:
            self.paused = at
        elif kind == "output_audio_buffer.cleared" and self.cut is None:
            self.cut = at
        elif kind == "overlap.decision" and self.decision is None:
            self.decision = event
            if event.get("decision") == "interrupt" and self.cut is None:
                self.cut = at
        elif kind == "response.done" and response:
            self.done_status = str(response.get("status"))
            if self.done_status == "cancelled" and self.cut is None:
                self.cut = at

    @property
    def cut_by_echo(self) -> bool:
        """Cut before the user said anything (rule 2; for an echo item: a false barge-in)."""
        return self.cut is not None and (self.onset is None or self.cut < self.onset)

    @property
    def echo_speech(self) -> bool:
        """`speech_started` while only the echo played (rule 1)."""
        end = self.onset if self.onset is not None else math.inf
        return any(t < end for t in self.speech_starts)

    @property
    def false_pause(self) -> bool:
        return self.paused is not None and (self.onset is None or self.paused < self.onset)

    @property
    def heard(self) -> bool:
        return self.onset is not None and any(t >= self.onset for t in self.speech_starts)

    @property
    def interrupted(self) -> bool:
        """Cut after the user began to speak."""
        return self.cut is not None and self.onset is not None and self.cut >= self.onset

    @property
    def latency(self) -> float:
        if self.interrupted and self.cut is not None and self.onset is not None:
            return self.cut - self.onset
        return math.nan

    def settled(self, now: float) -> bool:
        if self.cut is not None:
            return now - self.cut >= SETTLE_S
        return self.done_status is not None


def session_update(run: Run, item: EchoItem, cancellation: bool, mode: Mode) -> dict[str, Any]:
    interruption: dict[str, Any] = {"mode": mode}
    if mode == "pause":
        interruption |= {"min_speech_ms": run.min_speech_ms}
        interruption |= {"resume_after_ms": run.resume_after_ms}
    audio_s = answer(item.voice).size / RATE
    return {
        "type": "session.update",
        "session": {
            "type": "realtime",
            "output_modalities": ["audio"],
            # The voice ends the answer (null plays it once); this only bounds it.
            "max_output_tokens": math.ceil(audio_s / CHUNK_S) + 4,
            "audio": {
                "input": {
                    "echo_cancellation": {"type": "server"} if cancellation else None,
                    "turn_detection": {
                        "type": "server_vad",
                        "silence_duration_ms": 500,
                        "interruption": interruption,
                    },
                }
            },
        },
    }


def run_session(url: str, run: Run, item: EchoItem, cancellation: bool, mode: Mode) -> Outcome:
    """One item in one session; failures are kept on the outcome, not raised."""
    out = Outcome(item, cancellation, mode, began=time.monotonic())
    seed = item.room.seed if item.room is not None else 0
    try:
        with connect(url, max_size=None, compression=None, open_timeout=60) as ws:
            ws.send(json.dumps(session_update(run, item, cancellation, mode)))
            while True:
                event = json.loads(ws.recv(timeout=30))
                if event["type"] == "session.updated":
                    shown = event["session"]["audio"]["input"].get("echo_cancellation")
                    if bool(shown) != cancellation:
                        raise RuntimeError(f"echo_cancellation not taken: {shown!r}")
                    break
                if event["type"] == "error":
                    raise RuntimeError(f"session.update refused: {event.get('error')}")
            phone = Speakerphone(
                ws,
                EchoPath(item.room, RATE) if item.room is not None else None,
                Playout(item.jitter_ms, seed=seed),
                ack_every_s=ACK_EVERY_S,
                on_event=out.on_event,
                tone=room_tone(10.0, seed),
            )
            ws.send(json.dumps(ASK))
            ws.send(json.dumps({"type": "response.create"}))
            phone.run(20, until=lambda: out.first_audio is not None)
            if out.first_audio is None:
                raise RuntimeError("no answer audio within 20 s")
            answer_s = answer(item.voice).size / RATE
            if item.user is not None:
                phone.run(item.offset_s, until=lambda: out.cut is not None)
                if out.cut is None:
                    phone.say(item.user.audio)
                    phone.run(0.04)  # the first append of it goes out
                    out.onset = phone.onset
            now = time.monotonic
            phone.run(answer_s + 3.0, until=lambda: out.settled(now()))
    except (OSError, TimeoutError, WebSocketException, RuntimeError, KeyError) as error:
        out.errors.append(f"session failed: {error!r}")
    out.ended = time.monotonic()
    return out


def _cpu_s(pid: int) -> float:
    """A process's user + system CPU seconds so far (rule 4)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Measured:
    outcomes: list[Outcome] = field(default_factory=list)
    # (voice, cancellation): server CPU seconds per session-second (rule 4)
    cpu: dict[tuple[Voice, bool], float] = field(default_factory=dict)
    erle: list[tuple[EchoItem, float, float]] = field(default_factory=list)  # whole, after 1 s
    canceller_cpu: float = math.nan  # CPU seconds per audio second (rule 3)
    built_s: float = 0.0
    load: machine_load.Load | None = None


def _write_voice(voice: Voice, folder: Path) -> Path:
    path = folder / f"{voice}.wav"
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(RATE)
        wav.writeframes(pcm16(answer(voice)))
    return path


def measure(run: Run) -> Measured:
    load_before = machine_load.mark()
    began = time.monotonic()
    items = build(run.plan)
    measured = Measured(built_s=time.monotonic() - began)
    folder = Path(tempfile.mkdtemp(prefix="bench-echo-"))
    for voice in run.plan.voices:
        mine = [i for i in items if i.voice == voice]
        with servers.triton(MODELS, null_audio=_write_voice(voice, folder)) as triton:
            server = servers.RealtimeProcess(triton.grpc_url, "null", ready_timeout_s=60)
            try:
                for cancellation in run.settings:
                    cpu0 = _cpu_s(server.pid)
                    done: list[Outcome] = []
                    for mode in run.modes:
                        done += _sessions(server.url, run, mine, cancellation, mode)
                    session_s = sum(o.ended - o.began for o in done)
                    measured.cpu[(voice, cancellation)] = stats.ratio(
                        _cpu_s(server.pid) - cpu0, session_s
                    )
                    measured.outcomes += done
            finally:
                server.close()
    measured.erle, measured.canceller_cpu = echo_return_loss(
        [i for i in items if i.kind == "echo" and i.room is not None]
    )
    measured.load = machine_load.Load(load_before, machine_load.mark())
    return measured


def _sessions(
    url: str, run: Run, items: list[EchoItem], cancellation: bool, mode: Mode
) -> list[Outcome]:
    def one(index: int) -> Outcome:
        time.sleep(0.1 * (index % run.parallel))  # spread the starts
        return run_session(url, run, items[index], cancellation, mode)

    with ThreadPoolExecutor(run.parallel) as pool:
        return list(pool.map(one, range(len(items))))


def echo_return_loss(items: list[EchoItem]) -> tuple[list[tuple[EchoItem, float, float]], float]:
    """Rule 3: (item, ERLE dB over the whole answer, after its first second) per echo item, and
    the canceller's CPU seconds per second of audio."""
    from orchestrator.session.echo.webrtc import WebRtcProcessors

    processors = WebRtcProcessors()
    results = []
    cpu_s = audio_s = 0.0
    step = RATE * TICK_MS // 1000
    for item in items:
        assert item.room is not None
        seed = item.room.seed
        far = answer(item.voice)
        # The reference where the server places it; the echo after the client's jitter and
        # the room, a second of silence after it for the tail.
        far = np.concatenate([far, np.zeros(RATE, np.float32)])
        mic = EchoPath(item.room, RATE)(played(far, Playout(item.jitter_ms, seed=seed)))
        n = min(far.size, mic.size)
        near16 = np.frombuffer(pcm16(mic[:n]), "<i2").astype(np.int16)
        far16 = np.frombuffer(pcm16(far[:n]), "<i2").astype(np.int16)
        canceller = processors.canceller(RATE, None)
        parts = []
        t0 = time.process_time()
        for start in range(0, n, step):
            parts.append(
                canceller.process(near16[start : start + step], far16[start : start + step])
            )
        cpu_s += time.process_time() - t0
        audio_s += n / RATE
        out = np.concatenate(parts).astype(np.float64)
        near = near16.astype(np.float64)
        results.append((item, _erle(near, out, 0), _erle(near, out, RATE)))
    return results, stats.ratio(cpu_s, audio_s)


def _erle(near: npt.NDArray[np.float64], out: npt.NDArray[np.float64], skip: int) -> float:
    return float(10 * np.log10(np.sum(near[skip:] ** 2) / max(np.sum(out[skip:] ** 2), 1e-9)))


# --- the section -------------------------------------------------------------------------------


def _setting(cancellation: bool) -> str:
    return "on" if cancellation else "off"


def _share(outcomes: list[Outcome], test: Callable[[Outcome], bool]) -> str:
    return report.share(sum(test(o) for o in outcomes), len(outcomes))


def _rows(measured: Measured, group: Callable[[EchoItem], str], keys: list[str]) -> list[str]:
    lines = []
    for voice in dict.fromkeys(o.item.voice for o in measured.outcomes):
        for cancellation in dict.fromkeys(o.cancellation for o in measured.outcomes):
            for mode in dict.fromkeys(o.mode for o in measured.outcomes):
                for key in keys:
                    lines.append(_row(measured, voice, cancellation, mode, group, key))
    return [line for line in lines if line]


def _row(
    measured: Measured,
    voice: Voice,
    cancellation: bool,
    mode: Mode,
    group: Callable[[EchoItem], str],
    key: str,
) -> str:
    mine = [
        o
        for o in measured.outcomes
        if (o.item.voice, o.cancellation, o.mode) == (voice, cancellation, mode)
        and group(o.item) == key
    ]
    if not mine:
        return ""
    echo = [o for o in mine if o.item.kind == "echo"]
    speech = [o for o in mine if o.item.kind == "interruption"]
    playing = [o for o in speech if not o.cut_by_echo]
    backchannels = [o for o in mine if o.item.kind == "backchannel" and not o.cut_by_echo]
    erle = [(w, a) for i, w, a in measured.erle if i.voice == voice and group(i) == key]
    cells = [
        voice,
        _setting(cancellation),
        mode,
        key,
        _share(echo, lambda o: o.cut_by_echo),
        _share(echo, lambda o: o.false_pause) if mode == "pause" else "-",
        _share(echo, lambda o: o.echo_speech),
        _share(speech, lambda o: o.cut_by_echo),
        _share(playing, lambda o: not o.interrupted),
        report.median_p90([o.latency for o in playing], 0),
        _share(backchannels, lambda o: o.heard),
        _share(backchannels, lambda o: o.interrupted),
        f"{stats.median(w for w, _ in erle):.1f} / {stats.median(a for _, a in erle):.1f}"
        if erle and cancellation
        else "-",
    ]
    return "| " + " | ".join(cells) + " |"


COLUMNS = (
    "voice",
    "cancellation",
    "mode",
    "{group}",
    "false barge-ins (echo alone)",
    "false pauses (echo alone)",
    "echo heard as speech",
    "interruptions cut by echo first",
    "interruptions missed",
    "onset -> interrupt",
    "backchannels heard",
    "backchannels cut",
    "ERLE dB (whole / after 1 s)",
)


def _header(group: str) -> list[str]:
    names = [c.format(group=group) for c in COLUMNS]
    return ["| " + " | ".join(names) + " |", "|---|---|---|---|" + "---:|" * (len(names) - 4)]


def _levels(item: EchoItem) -> str:
    return item.level


def _delays(item: EchoItem) -> str:
    return "none" if item.room is None else f"{item.room.delay_ms:g} ms"


def table(run: Run, measured: Measured, command: str) -> str:
    plan = run.plan
    levels = [f"{level:g} dB" for level in plan.levels_db] + ["none"]
    delays = [f"{d:g} ms" for d in plan.delays_ms] + ["none"]
    sessions = len(measured.outcomes)
    voices = "; ".join(f"`{v}`: {VOICES[v]}" for v in plan.voices)
    sources = sorted({o.item.user.source for o in measured.outcomes if o.item.user})
    lines = [
        HEADING,
        "",
        f"Command: `{command}` ({os.cpu_count()} cores, CPU; Python {sys.version.split()[0]}; "
        f"{sessions} sessions, {run.parallel} at a time; corpus built in "
        f"{measured.built_s:.1f} s).",
        "",
        *machine_load.lines(measured.load),
        f"Corpus (bench/echo_corpus.py, seed {plan.seed}): the answer in each voice ({voices}) "
        "played by a speakerphone client at real time (bench/speakerphone.py) with "
        f"{plan.jitter_ms:g} ms of playout jitter and playback ACKs every {ACK_EVERY_S:g} s, "
        "heard back through a room (bench/rooms.py: pyroomacoustics image sources, a shoebox "
        "room per item; rt60 0.2/0.4/0.6 s, loudspeaker to microphone 0.1/0.5/1.5 m) at each "
        f"echo level ({', '.join(f'{x:g}' for x in plan.levels_db)} dB against "
        f"the user's speech) and delay ({', '.join(f'{x:g}' for x in plan.delays_ms)} ms), "
        f"{plan.seeds} room(s) per cell and kind: the echo alone, an interruption "
        "(0.5/1.5/3 s into the answer) and a backchannel over it; `none`: no echo at all "
        f"(a headset). User speech from {', '.join(sources) or '-'}. Pipeline `null` "
        "answering with the voice (no compute); server VAD, silence_duration_ms 500; pause "
        f"mode: min_speech_ms {run.min_speech_ms}. Times in ms, median / p90, client clocks; "
        "interruptions missed and their latency over those the echo had not cut first.",
        "",
        "By echo level (every delay):",
        "",
        *_header("echo level"),
        *_rows(measured, _levels, levels),
        "",
        "By delay (every level):",
        "",
        *_header("delay"),
        *_rows(measured, _delays, delays),
        "",
        *_costs(measured),
        *_notes(measured),
        *targets(measured.outcomes),
    ]
    return "\n".join(lines) + "\n"


def _costs(measured: Measured) -> list[str]:
    lines = ["Cost:", ""]
    for (voice, cancellation), cpu in measured.cpu.items():
        lines.append(
            f"- server CPU per session-second, {voice}, cancellation {_setting(cancellation)}: "
            f"{cpu * 1000:.1f} ms/s ({cpu:.1%} of a core)"
        )
    lines.append(
        "- the canceller alone (offline, the server's class, 20 ms chunks): "
        f"{measured.canceller_cpu * 1000:.1f} ms of CPU per second of audio"
    )
    return [*lines, ""]


# One session in `notes`: (its item's name, the answer's first audio, the cut or the user's
# onset), on its bench's clock; None: never seen.
Noted = tuple[str, float | None, float | None]


def notes(
    cut: Sequence[Noted],
    missed: Sequence[Noted],
    *,
    cut_label: str,
    missed_label: str = "Missed with cancellation on",
    per_second: float = 1.0,
    most: int = 8,
    onsets: bool = True,
    end: str = ".",
) -> list[str]:
    """The "Cut by echo" and "Missed" lines under an echo bench's table. This bench,
    bench/echo_page.py and bench/echo_offline.py report the same thing from their own outcome
    types and clocks: each chooses its sessions, this one piece of code words them, and what
    the three sections have always worded differently is a parameter.

    `cut`: the sessions the echo cut; `missed`: the interruptions missed; each on a clock of
    `per_second` units a second (1: seconds, 1000: the page's ms). A time shows as seconds
    after the answer's first audio, "-" where either is unknown. At most `most` sessions a
    line, then `end`; `onsets=False` leaves the onsets out. An empty list has no line."""

    def after(first: float | None, t: float | None) -> str:
        return "-" if t is None or first is None else f"{(t - first) / per_second:.2f} s"

    lines = []
    if cut:
        named = [f"{name} at {after(first, t)}" for name, first, t in cut[:most]]
        lines.append(f"{cut_label}: " + "; ".join(named) + end)
    if missed:
        named = [
            f"{name} (onset {after(first, t)})" if onsets else name
            for name, first, t in missed[:most]
        ]
        lines.append(f"{missed_label}: " + "; ".join(named) + end)
    return lines


def _notes(measured: Measured) -> list[str]:
    false = [o for o in measured.outcomes if o.cancellation and o.cut_by_echo]
    missed = [
        o
        for o in measured.outcomes
        if o.cancellation and o.item.kind == "interruption" and o.onset and not o.interrupted
    ]
    lines = notes(
        [(o.item.name, o.first_audio, o.cut) for o in false],
        [(o.item.name, o.first_audio, o.onset) for o in missed],
        cut_label="Cut by echo alone with cancellation on (after the answer's first audio)",
    )
    failed = [o for o in measured.outcomes if o.errors]
    if failed:
        lines.append(f"Sessions with errors: {len(failed)}.")
    for o in failed[:3]:
        lines.append(f"- {o.item.name} ({_setting(o.cancellation)}, {o.mode}): {o.errors[0]}")
    return [*lines, ""] if lines else []


def targets(outcomes: list[Outcome]) -> list[str]:
    """Rule 5: issue 34's targets, met or MISSED, with cancellation on, every voice together
    (bench/echo_offline.py's too)."""
    on = [o for o in outcomes if o.cancellation and o.item.room is not None]
    # The echo-free figure: the plain server with a headset (no room, cancellation off).
    free = [
        o
        for o in outcomes
        if o.item.room is None
        and o.item.kind == "interruption"
        and not o.cancellation
        and o.mode == "immediate"
    ]
    lines = ["Targets (cancellation on):", ""]

    def verdict(ok: bool) -> str:
        return "met" if ok else "MISSED"

    echo = [o for o in on if o.item.kind == "echo"]
    levels = sorted({o.item.room.level_db for o in echo if o.item.room is not None})
    worst, cells, enough = 0.0, [], bool(levels)
    for level in levels:
        at = [o for o in echo if o.item.room is not None and o.item.room.level_db == level]
        cut = sum(o.cut_by_echo for o in at)
        worst = max(worst, cut / len(at))
        enough = enough and len(at) >= MIN_ANSWERS
        cells.append(f"{level:g} dB {report.share_ci(cut, len(at))}")
    lines.append(
        f"- false barge-ins from echo alone <= {FALSE_TARGET:.0%} at every level, on >= "
        f"{MIN_ANSWERS} answers per level: {'; '.join(cells) or '-'}: "
        f"{verdict(enough and worst <= FALSE_TARGET)}"
    )
    over = [o for o in on if o.item.kind == "interruption"]
    playing = [o for o in over if not o.cut_by_echo]
    missed = sum(not o.interrupted for o in playing)
    lines.append(
        f"- interruptions over echo missed <= {MISSED_TARGET:.0%}: "
        f"{report.share_ci(missed, len(playing))}: "
        f"{verdict(bool(playing) and missed / len(playing) <= MISSED_TARGET)}"
    )
    with_echo = stats.median_ms([o.latency for o in playing if o.mode == "immediate"])
    alone = stats.median_ms([o.latency for o in free])
    lines.append(
        f"- onset -> interrupt over echo within {LATENCY_MARGIN_MS:.0f} ms of the echo-free "
        f"median (the plain server, a headset): {with_echo:.0f} ms against {alone:.0f} ms: "
        f"{verdict(with_echo - alone <= LATENCY_MARGIN_MS)}"
    )
    early = [o for o in over if o.item.offset_s == 0.5]
    worked = sum(o.interrupted for o in early)
    lines.append(
        f"- no blind window: interruptions 0.5 s into the answer that interrupted: "
        f"{report.share(worked, len(early))}: {verdict(bool(early) and worked == len(early))}"
    )
    return [*lines, ""]


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="a handful of items (CI)")
    parser.add_argument("--voices", default="cascade,omni")
    parser.add_argument("--modes", default="immediate")
    parser.add_argument("--seeds", type=int, default=1, help="rooms per level, delay and kind")
    parser.add_argument("--parallel", type=int, default=4)
    parser.add_argument("--kinds", default=",".join(KINDS), help="echo,interruption,backchannel")
    parser.add_argument("--cancellation", default="off,on", help="off, on or off,on")


def _choose(given: str, allowed: tuple[str, ...], option: str) -> tuple[str, ...]:
    chosen = tuple(given.split(","))
    if not chosen or any(c not in allowed for c in chosen) or len(set(chosen)) != len(chosen):
        raise cli.Usage(f"{option}: a comma-separated list of {allowed}")
    return chosen


def _run(args: argparse.Namespace, command: str) -> cli.Outcome:
    voices = _choose(args.voices, get_args(Voice), "--voices")
    modes = _choose(args.modes, get_args(Mode), "--modes")
    if args.seeds < 1 or args.parallel < 1:
        raise cli.Usage("--seeds and --parallel: at least 1")
    kinds = _choose(args.kinds, KINDS, "--kinds")
    settings = tuple(c == "on" for c in _choose(args.cancellation, ("off", "on"), "--cancellation"))
    plan = (
        QUICK if args.quick else Plan(voices=voices, seeds=args.seeds, kinds=kinds)  # type: ignore[arg-type]
    )
    run = Run(plan=plan, modes=modes, settings=settings, parallel=args.parallel)  # type: ignore[arg-type]
    return cli.Outcome(table(run, measure(run), command))


BENCH = cli.Bench("bench.echo", __doc__, report.DOC, _arguments, _run)


def main(argv: Sequence[str] | None = None) -> int:
    return cli.main(BENCH, argv)


if __name__ == "__main__":
    raise SystemExit(main())

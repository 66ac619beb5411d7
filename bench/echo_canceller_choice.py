"""Which echo canceller the server uses (issue 26): WebRTC's AEC3 from two wheels, measured.

Run: `python -m bench.echo_canceller_choice` (from the repo root). Prints a markdown section;
with `--write`, replaces "## Echo canceller choice" in docs/benchmarks.md (bench/cli.py).

Rules:
1. The room is the echo bench's, seeded (bench/rooms.py: a pyroomacoustics shoebox of a given
   RT60, the loudspeaker DISTANCE_M from the microphone): the assistant's voice (flite "slt")
   through its impulse response, delayed by the playout delay, at an echo level in dB
   relative to the user's speech (flite "rms", -20 dBFS RMS while it speaks), over a -85 dBFS
   noise floor. Everything runs at 24 kHz, the server's input rate, in 10 ms frames, one
   stream at a time.
2. Each candidate gets the microphone and the far-end reference as the server would give
   them: the reference as sent, without the playout delay (the canceller must find it).
3. ERLE is 10 log10(mic energy / output energy) with echo alone: over the first second of
   echo ("first s") and from 3 s after the echo starts to the end ("converged").
4. Double talk: the user speaks 5 s into the echo. The output is compared, over the user's
   speech, with the same candidate's output for the user alone (no echo, a silent reference),
   so its own filtering (high-pass, resampling, delay) is not counted as damage: "SNR out" is
   alone / (double talk - alone) in dB, next to "SNR in" (user / echo at the microphone);
   "kept" is the median over the user's voiced 10 ms frames of their level against alone
   (dB), "lost" the share of those frames more than 10 dB down (what a VAD would miss).
   "delay" is the candidate's own input-to-output delay (cross-correlation, user alone).
5. CPU is process time (every thread of this process) over audio time, with echo alone:
   the fraction of one core a stream costs, the candidate's resampling included.
6. Noise suppression (OpenAI's `noise_reduction`): the user's speech after 2 s of stationary
   white noise at 15 and 25 dB below it, through each suppressor in 10 ms frames; "noise
   down" is the noise's level drop over its second second, "speech kept" the median voiced
   frame's level against the clean speech (aligned), "delay" the suppressor's own.
7. A candidate whose wheel is not installed is reported as such, never an error: livekit is
   not a dependency of the project (measured once: `pip install livekit`).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import itertools
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt
import soxr

from bench import cli, report, speech, stats
from bench.rooms import Room

HEADING = "## Echo canceller choice"
RATE = 24000
FRAME = RATE // 100  # 10 ms: what WebRTC's audio processing takes
NEAR_DBFS = -20.0  # the user's speech, RMS over its voiced frames
NOISE_DBFS = -85.0
DOUBLE_TALK_AT_S = 5.0
# A speakerphone across a desk: as much of the echo is the room's reverberation as its direct
# sound, which is what makes an echo hard to cancel (bench/rooms.py, rule 1).
DISTANCE_M = 1.0
CONVERGED_AFTER_S = 3.0

Audio = npt.NDArray[np.float32]
Pcm = npt.NDArray[np.int16]

FAR_TEXT = (
    "Sure, here is what I found. The museum opens at nine in the morning and closes at six. "
    "Tickets cost twelve dollars for adults and are free for children under ten. "
    "On Thursdays the galleries stay open until nine in the evening, and the cafe on the "
    "second floor serves lunch until three. Would you like directions from your hotel?"
)
NEAR_TEXT = "Wait, stop, what about the weekend hours on Sunday?"


class Stream(Protocol):
    """One session's canceller: 10 ms of microphone and reference in, 10 ms out."""

    def frame(self, near: Pcm, far: Pcm) -> Pcm: ...


# --- the room (rule 1) -------------------------------------------------------------------


def room_impulse_response(rt60_s: float, seed: int = 0, rate: int = RATE) -> Audio:
    """The echo bench's room (bench/rooms.py: pyroomacoustics image sources) with `rt60_s`,
    the loudspeaker `DISTANCE_M` from the microphone, from its direct path on: the playout
    delay and the level are `echo_of`'s."""
    return Room(
        delay_ms=0.0, rt60_s=rt60_s, level_db=0.0, seed=seed, distance_m=DISTANCE_M
    ).impulse_response(rate)


def rms_active(audio: Audio, below_peak_db: float = 30.0) -> float:
    """RMS over the 10 ms frames within `below_peak_db` of the loudest: the speaking level."""
    frames = audio[: len(audio) // FRAME * FRAME].reshape(-1, FRAME)
    power = (frames.astype(np.float64) ** 2).mean(axis=1)
    loud = power > power.max() * 10 ** (-below_peak_db / 10)
    return float(np.sqrt(power[loud].mean())) if loud.any() else 0.0


def scaled(audio: Audio, dbfs: float) -> Audio:
    return (audio * (10 ** (dbfs / 20) / max(rms_active(audio), 1e-9))).astype(np.float32)


def echo_of(far: Audio, rir: Audio, delay_s: float, dbfs: float) -> Audio:
    """`far` through the room, `delay_s` later, at `dbfs` (active RMS), as long as `far`."""
    wet = np.convolve(far, rir)[: len(far)].astype(np.float32)
    delayed = np.concatenate([np.zeros(int(delay_s * RATE), np.float32), wet])[: len(far)]
    return scaled(delayed, dbfs)


def noise(n: int, dbfs: float = NOISE_DBFS, seed: int = 1) -> Audio:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(n) * 10 ** (dbfs / 20)).astype(np.float32)


def to_pcm(audio: Audio) -> Pcm:
    return np.asarray(np.clip(np.round(audio * 32768), -32768, 32767), np.int16)


def to_float(pcm: Pcm) -> Audio:
    return (pcm.astype(np.float32) / 32768).astype(np.float32)


@dataclass(frozen=True)
class Voices:
    far: Audio  # the assistant's answer, at 24 kHz
    near: Audio  # the user's interruption, -20 dBFS active RMS


def voices() -> Voices:
    far = speech.spoken_part(speech.flite(FAR_TEXT, "slt"))
    near = scaled(speech.spoken_part(speech.flite(NEAR_TEXT, "rms")), NEAR_DBFS)
    return Voices(scaled(far, -20.0), near)


# --- the candidates (rule 2) -----------------------------------------------------------


class _PywebrtcNative:
    """pywebrtc-audio's AudioProcessor (AEC3 only) at 24 kHz: WebRTC resamples inside."""

    def __init__(self) -> None:
        import pywebrtc_audio

        self._ap = pywebrtc_audio.AudioProcessor(sample_rate=RATE, echo_cancellation=True)

    def frame(self, near: Pcm, far: Pcm) -> Pcm:
        return self._ap.process(near, far)


class _Resampled:
    """A canceller that takes only `rate`: soxr streams up for the microphone and the
    reference, down for the output; whatever is not out yet is zeros (a fixed delay)."""

    def __init__(self, rate: int, process: Callable[[Pcm, Pcm], Pcm]) -> None:
        self._rate = rate
        self._process = process
        self._up_near = soxr.ResampleStream(RATE, rate, 1, dtype="float32")
        self._up_far = soxr.ResampleStream(RATE, rate, 1, dtype="float32")
        self._down = soxr.ResampleStream(rate, RATE, 1, dtype="float32")
        self._near = np.zeros(0, np.float32)
        self._far = np.zeros(0, np.float32)
        self._out = np.zeros(0, np.float32)

    def frame(self, near: Pcm, far: Pcm) -> Pcm:
        self._near = np.concatenate([self._near, self._up_near.resample_chunk(to_float(near))])
        self._far = np.concatenate([self._far, self._up_far.resample_chunk(to_float(far))])
        size = self._rate // 100
        while len(self._near) >= size and len(self._far) >= size:
            done = self._process(to_pcm(self._near[:size]), to_pcm(self._far[:size]))
            self._near, self._far = self._near[size:], self._far[size:]
            self._out = np.concatenate([self._out, self._down.resample_chunk(to_float(done))])
        if len(self._out) < len(near):
            self._out = np.concatenate(
                [np.zeros(len(near) - len(self._out), np.float32), self._out]
            )
        out, self._out = self._out[: len(near)], self._out[len(near) :]
        return to_pcm(out)


def _pywebrtc_at(rate: int) -> Callable[[], Stream]:
    def make() -> Stream:
        import pywebrtc_audio

        aec = pywebrtc_audio.EchoCanceller(rate, 1, 0)
        return _Resampled(rate, aec.process)

    return make


class _Livekit:
    """livekit.rtc.AudioProcessingModule (AEC3 only) at 24 kHz, one FFI call per direction."""

    def __init__(self) -> None:
        from livekit import rtc

        self._rtc = rtc
        self._apm = rtc.AudioProcessingModule(echo_cancellation=True)
        self._apm.set_stream_delay_ms(0)

    def frame(self, near: Pcm, far: Pcm) -> Pcm:
        far_frame = self._rtc.AudioFrame(far.tobytes(), RATE, 1, len(far))
        near_frame = self._rtc.AudioFrame(near.tobytes(), RATE, 1, len(near))
        self._apm.process_reverse_stream(far_frame)
        self._apm.process_stream(near_frame)
        return np.frombuffer(bytes(near_frame.data.cast("B")), np.int16).copy()


def _wrapper() -> Stream:
    from orchestrator.session.echo.canceller import EchoCanceller

    class Wrapped:
        def __init__(self) -> None:
            self._aec = EchoCanceller()

        def frame(self, near: Pcm, far: Pcm) -> Pcm:
            return self._aec.process(near, far)

    return Wrapped()


CANDIDATES: dict[str, Callable[[], Stream]] = {
    "pywebrtc-audio AudioProcessor, 24 kHz (WebRTC resamples)": _PywebrtcNative,
    "pywebrtc-audio EchoCanceller, 48 kHz (soxr 24->48->24)": _pywebrtc_at(48000),
    "pywebrtc-audio EchoCanceller, 16 kHz (soxr 24->16->24)": _pywebrtc_at(16000),
    "livekit AudioProcessingModule, 24 kHz": _Livekit,
    "Turntaker wrapper (orchestrator/session/echo/canceller.py)": _wrapper,
}


# --- one run -------------------------------------------------------------------------------


def run_stream(make: Callable[[], Stream], near: Audio, far: Audio) -> tuple[Audio, float]:
    """The candidate's output for the whole signals, fed 10 ms at a time; its CPU seconds."""
    stream = make()
    mic, ref = to_pcm(near), to_pcm(far)
    n = len(mic) // FRAME * FRAME
    out = []
    start = time.process_time()
    for i in range(0, n, FRAME):
        out.append(stream.frame(mic[i : i + FRAME], ref[i : i + FRAME]))
    return to_float(np.concatenate(out)), time.process_time() - start


def energy(x: Audio) -> float:
    return float(np.sum(x.astype(np.float64) ** 2))


def db(a: float, b: float) -> float:
    return float(10 * np.log10(max(a, 1e-20) / max(b, 1e-20)))


def lag_of(out: Audio, clean: Audio, max_lag: int) -> int:
    """The delay (samples) of `clean` inside `out`: the peak of their cross-correlation."""
    lags = range(0, max_lag + 1)
    scores = [float(np.dot(out[lag:], clean[: len(clean) - lag])) for lag in lags]
    return int(np.argmax(scores))


@dataclass(frozen=True)
class Result:
    erle_first: float
    erle_converged: float
    snr_in: float
    snr_out: float
    kept_db: float
    lost: float  # share of the user's voiced frames more than 10 dB down
    corr: float
    cpu: float  # fraction of a core
    delay_ms: float  # the candidate's own delay, input to output


def measure(
    make: Callable[[], Stream], sounds: Voices, delay_s: float, level_db: float, rt60_s: float
) -> Result:
    far = sounds.far
    echo = echo_of(far, room_impulse_response(rt60_s), delay_s, NEAR_DBFS + level_db)
    floor = noise(len(far))
    # Echo alone: ERLE and CPU (rules 3, 5).
    mic = echo + floor
    out, cpu_s = run_stream(make, mic, far)
    mic = mic[: len(out)]
    start = int(delay_s * RATE)
    first = slice(start, start + RATE)
    converged = slice(start + int(CONVERGED_AFTER_S * RATE), len(out))
    erle_first = db(energy(mic[first]), energy(out[first]))
    erle_converged = db(energy(mic[converged]), energy(out[converged]))
    # Double talk (rule 4): the user speaks over the echo, and alone (the reference output).
    at = int(DOUBLE_TALK_AT_S * RATE)
    clean = np.zeros(len(far), np.float32)
    clean[at : at + len(sounds.near)] = sounds.near[: len(far) - at]
    out, _ = run_stream(make, echo + floor + clean, far)
    alone, _ = run_stream(make, floor + clean, np.zeros_like(far))
    lag = lag_of(alone[at:], clean[at : len(alone)], FRAME * 10)
    talk = slice(at + lag, min(at + lag + len(sounds.near), len(out)))
    heard, ref = out[talk], alone[talk]
    voiced = _frame_power(clean[talk.start - lag : talk.stop - lag])
    voiced = voiced > voiced.max() * 1e-3
    per_frame = 10 * np.log10((_frame_power(heard) + 1e-12) / (_frame_power(ref) + 1e-12))
    return Result(
        erle_first=erle_first,
        erle_converged=erle_converged,
        snr_in=db(energy(clean[talk.start - lag : talk.stop - lag]), energy(echo[talk])),
        snr_out=db(energy(ref), energy(heard - ref)),
        kept_db=stats.median(per_frame[voiced]),
        lost=float(np.mean(per_frame[voiced] < -10)),
        corr=float(np.corrcoef(heard, ref)[0, 1]),
        cpu=cpu_s / (len(out) / RATE),
        delay_ms=1000 * lag / RATE,
    )


def _frame_power(x: Audio) -> npt.NDArray[np.float64]:
    frames = x[: len(x) // FRAME * FRAME].astype(np.float64).reshape(-1, FRAME)
    power: npt.NDArray[np.float64] = (frames**2).sum(axis=1)
    return power


# --- noise suppression (rule 6) ----------------------------------------------------------


def _ap_suppressor(level: int) -> Callable[[], Stream]:
    def make() -> Stream:
        import pywebrtc_audio

        ap = pywebrtc_audio.AudioProcessor(sample_rate=RATE, noise_suppression=True, ns_level=level)

        class Ns:
            def frame(self, near: Pcm, far: Pcm) -> Pcm:
                return ap.process(near)

        return Ns()

    return make


def _wrapper_suppressor(level: int) -> Callable[[], Stream]:
    def make() -> Stream:
        from orchestrator.session.echo import canceller as echo_canceller

        ns = echo_canceller._Suppressor(RATE, level)  # the wrapper's path, any level

        class Ns:
            def frame(self, near: Pcm, far: Pcm) -> Pcm:
                return ns(near)

        return Ns()

    return make


SUPPRESSORS: dict[str, Callable[[], Stream]] = {
    **{f"pywebrtc-audio AudioProcessor, 24 kHz, level {n}": _ap_suppressor(n) for n in (1, 2, 3)},
    **{
        f"wrapper: NoiseSuppressor at 48 kHz via half-band 2x, level {n}{name}": (
            _wrapper_suppressor(n)
        )
        for n, name in ((1, " (near_field)"), (2, " (far_field)"), (3, ""))
    },
}


def suppression_lines(sounds: Voices) -> list[str]:
    lines = [
        "Noise suppression: the user's speech after 2 s of stationary white noise; noise down "
        "over the noise's second second; speech kept: median voiced frame against the clean "
        "speech; delay: the suppressor's own (the wrapper's 10 ms of framing comes on top).",
        "",
        "| suppressor | noise down, SNR 25 / 15 dB | speech kept, SNR 25 / 15 dB | delay (ms) "
        "| CPU per stream |",
        "|---|---:|---:|---:|---:|",
    ]
    clean = np.concatenate([np.zeros(2 * RATE, np.float32), sounds.near])
    for name, make in SUPPRESSORS.items():
        downs, kepts, delay, cpu = [], [], 0.0, 0.0
        for snr in (25.0, 15.0):
            hiss = noise(len(clean), NEAR_DBFS - snr, seed=2)
            out, cpu_s = run_stream(make, clean + hiss, np.zeros_like(clean))
            lag = lag_of(out, clean[: len(out)], FRAME * 10)
            out = out[lag:]
            second = slice(RATE, 2 * RATE)
            downs.append(db(energy(hiss[second]), energy(out[second])))
            said = clean[2 * RATE : len(out)]
            power = _frame_power(said)
            voiced = power > power.max() * 1e-2
            ratio = _frame_power(out[2 * RATE :]) / np.maximum(power, 1e-20)
            kepts.append(stats.median(10 * np.log10(np.maximum(ratio[voiced], 1e-20))))
            delay, cpu = 1000 * lag / RATE, cpu_s / (len(out) / RATE)
        lines.append(
            f"| {name} | {downs[0]:.1f} / {downs[1]:.1f} | {kepts[0]:.1f} / {kepts[1]:.1f} "
            f"| {delay:.1f} | {100 * cpu:.2f}% |"
        )
    return [*lines, ""]


# --- the section ---------------------------------------------------------------------------


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _available(make: Callable[[], Stream]) -> str | None:
    try:
        make()
    except ImportError as error:  # rule 7
        return f"not installed ({error.name})"
    return None


def _cell(values: Sequence[float], digits: int = 1) -> str:
    """median (min) of the conditions, "-" of none."""
    kept = stats.finite(values)
    if not kept:
        return "-"
    return f"{stats.median(kept):.{digits}f} ({min(kept):.{digits}f})"


def run(
    delays_ms: Sequence[int], levels_db: Sequence[float], rt60s: Sequence[float], command: str
) -> str:
    sounds = voices()
    conditions = list(itertools.product(delays_ms, levels_db, rt60s))
    wheels = ", ".join(f"{name} {_version(name)}" for name in ("pywebrtc-audio", "livekit"))
    lines = [
        HEADING,
        "",
        f"Command: `{command}` (Python {platform.python_version()}, {platform.machine()}, "
        f"{platform.processor() or 'cpu'}; one stream at a time; {wheels}).",
        "",
        f"The assistant's voice (flite slt, {len(sounds.far) / RATE:.1f} s) through a "
        f"room (bench/rooms.py: pyroomacoustics, loudspeaker {DISTANCE_M:g} m from the "
        f"microphone), playout delays {list(delays_ms)}"
        f" ms, echo {list(levels_db)} dB relative to the user's speech ({NEAR_DBFS:.0f} dBFS), "
        f"RT60 {list(rt60s)} s: {len(conditions)} conditions, 24 kHz pcm16 in 10 ms frames; "
        f"the user (flite rms) speaks {DOUBLE_TALK_AT_S:.0f} s into the echo. Cells: median "
        "(worst) over the conditions; ERLE over the first second of echo and from 3 s on; "
        "double talk: SNR of the output against the candidate's output for the user alone "
        "(SNR in: user against echo at the microphone), the user's level kept (median voiced "
        "frame, dB), the voiced frames lost (> 10 dB down); the candidate's own delay; CPU: "
        "fraction of one core per stream.",
        "",
        "| canceller | ERLE first s (dB) | ERLE converged (dB) | double talk SNR in -> out (dB)"
        " | user kept (dB) | frames lost | delay (ms) | CPU per stream |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    detail: dict[str, list[Result]] = {}
    for name, make in CANDIDATES.items():
        missing = _available(make)
        if missing:
            lines.append(f"| {name} | {missing} | | | | | | |")
            continue
        results = [measure(make, sounds, d / 1000, lv, rt) for d, lv, rt in conditions]
        detail[name] = results
        lines.append(
            f"| {name} | {_cell([r.erle_first for r in results])} "
            f"| {_cell([r.erle_converged for r in results])} "
            f"| {stats.median([r.snr_in for r in results]):.1f} -> "
            f"{_cell([r.snr_out for r in results])} "
            f"| {_cell([r.kept_db for r in results])} "
            f"| {100 * stats.median([r.lost for r in results]):.0f}% "
            f"({100 * max(r.lost for r in results):.0f}%) "
            f"| {stats.median([r.delay_ms for r in results]):.1f} "
            f"| {100 * stats.median([r.cpu for r in results]):.2f}% |"
        )
    lines += [
        "",
        "Per condition (delay ms / echo dB / RT60 s): ERLE first s / converged / double-talk "
        "SNR out, dB.",
        "",
        "| condition | " + " | ".join(detail) + " |",
        "|---|" + "---:|" * len(detail),
    ]
    for i, (d, lv, rt) in enumerate(conditions):
        cells = " | ".join(
            f"{r[i].erle_first:.1f} / {r[i].erle_converged:.1f} / {r[i].snr_out:.1f}"
            for r in detail.values()
        )
        lines.append(f"| {d} / {lv:g} / {rt:g} | {cells} |")
    lines += ["", *suppression_lines(sounds)]
    return "\n".join(lines)


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--delays-ms", type=int, nargs="+", default=[40, 120, 250, 400])
    parser.add_argument("--levels-db", type=float, nargs="+", default=[-20.0, -10.0, 0.0])
    parser.add_argument("--rt60-s", type=float, nargs="+", default=[0.2, 0.6])


def _run(args: argparse.Namespace, command: str) -> cli.Outcome:
    return cli.Outcome(run(args.delays_ms, args.levels_db, args.rt60_s, command))


BENCH = cli.Bench("bench.echo_canceller_choice", __doc__, report.DOC, _arguments, _run)


def main(argv: list[str] | None = None) -> int:
    return cli.main(BENCH, argv)


if __name__ == "__main__":
    raise SystemExit(main())

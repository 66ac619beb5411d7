"""Overlap partials: Whisper-base (`asr`) against Whisper tiny.en (`asr_partial`).

The fast partial decode (turntaker_models/cascade/asr.py: an 8 s window, greedy,
PARTIAL_MAX_TOKENS) of both models, in this process, one clip at a time, on:
- speech: the first 0.2-1.0 s of human utterances (bench/human_speech.py `utterances()`,
  sources taking turns; each cut from 0.1 s before its first loud frame), what an overlap's
  partial hears of an interruption;
- non-speech: hedgewars' hums, laughs and coughs (Debian `hedgewars-data`, decoded with
  `oggdec`; identical files counted once), whole and their first 0.3, 0.5 and 1.0 s, what
  must read as "".

Printed: per model and clip set, the no-speech probability and mean token log-probability
(median and p10/p90), how often the model's own thresholds keep words (speech) or abstain
(non-speech), the decode time; then tiny.en's threshold grid: for each pair, the share of
non-speech read as "" and of speech prefixes kept, the pairs that abstain on non-speech at
least as often as Whisper-base first. TINY_EN_PARTIAL_UNSURE in asr.py is chosen from it.

With `--triton`: partial round trips through a local tritonserver (bench/servers.py, one model
thread), on the 0.3-1.0 s prefixes: `asr` with PARTIAL against `asr_partial`, one request at a
time, 4 at once, and one at a time while `asr` transcribes 4 s turns back to back (what a
partial queued behind before `asr_partial`).

Run: `python -m bench.partial_asr [--utterances 80] [--triton] [--write]` (`--write`: its
section in docs/benchmarks.md; TURNTAKER_MODEL_THREADS: the in-process decode threads).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import soxr

from bench import cli, machine_load, report, stats
from bench.human_speech import decode_wav, round_robin, spans, utterances
from turntaker_models.cascade.asr import (
    BASE_PARTIAL_UNSURE,
    TINY_EN_PARTIAL_UNSURE,
    PartialHypothesis,
    Transcriber,
    Unsure,
    partial_transcriber,
)
from turntaker_models.cascade.whisper_assets import whisper_model_dir
from turntaker_models.contract import INPUT_SAMPLE_RATE
from turntaker_models.settings import ModelSettings

Audio = npt.NDArray[np.float32]
RATE = INPUT_SAMPLE_RATE
PREFIXES_S = (0.2, 0.3, 0.5, 0.8, 1.0)
# What an overlap's first partials hear of a real interruption: these must keep their words.
KEEP_PREFIXES_S = (0.3, 0.5)
LEAD_S = 0.1
HEDGEWARS = Path("/usr/share/games/hedgewars/Data/Sounds/voices")
NON_SPEECH = ("Hmm", "Laugh", "PoisonCough")
NON_SPEECH_PREFIXES_S = (0.3, 0.5, 1.0)
GRID_NO_SPEECH = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8)
GRID_LOGPROB = (-0.6, -0.7, -0.8, -0.9, -1.0, -1.1, -1.2, -1.3, -1.4, -1.5)


@dataclass(frozen=True)
class Clip:
    name: str
    audio: Audio
    prefix_s: float | None  # None: the whole clip


def speech_prefixes(count: int) -> list[Clip]:
    out = []
    for recording in round_robin(utterances(RATE))[:count]:
        found = spans(recording.audio, RATE)
        start = max(found[0][0] - int(LEAD_S * RATE), 0) if found else 0
        for prefix in PREFIXES_S:
            part = recording.audio[start : start + int(prefix * RATE)]
            out.append(Clip(f"{recording.source}:{recording.name}", part, prefix))
    return out


def ogg(path: Path) -> Audio:
    """One Ogg Vorbis file as float32 mono at RATE."""
    binary = shutil.which("oggdec")
    assert binary, "oggdec is not installed (apt-get install vorbis-tools)"
    wav = subprocess.run([binary, "--quiet", "-o", "-", str(path)], capture_output=True)
    assert wav.returncode == 0, f"oggdec failed on {path}: {wav.stderr.decode(errors='replace')}"
    audio, rate = decode_wav(wav.stdout)
    if rate != RATE:
        audio = soxr.resample(audio, rate, RATE)
    return np.ascontiguousarray(np.clip(audio, -1.0, 1.0), np.float32)


def non_speech() -> list[Clip]:
    assert HEDGEWARS.is_dir(), f"{HEDGEWARS} is missing (apt-get install hedgewars-data)"
    seen: set[str] = set()
    out = []
    for kind in NON_SPEECH:
        for path in sorted(HEDGEWARS.glob(f"*/{kind}.ogg")):
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            if digest in seen:
                continue
            seen.add(digest)
            audio = ogg(path)
            name = f"{path.parent.name}/{path.stem}"
            out.append(Clip(name, audio, None))
            for prefix in NON_SPEECH_PREFIXES_S:
                out.append(Clip(name, audio[: int(prefix * RATE)], prefix))
    return out


@dataclass(frozen=True)
class Decoded:
    clip: Clip
    found: PartialHypothesis
    seconds: float

    def kept(self, unsure: Unsure) -> bool:
        """Words come out under `unsure` (the partial is not "")."""
        return bool(self.found.text) and not unsure.rejects(
            self.found.no_speech_prob, self.found.logprob
        )


def decode(transcriber: Transcriber, clips: Sequence[Clip]) -> list[Decoded]:
    transcriber.partial_hypothesis(np.zeros(RATE, np.float32))  # warm-up
    out = []
    for clip in clips:
        began = time.perf_counter()
        found = transcriber.partial_hypothesis(clip.audio)
        out.append(Decoded(clip, found, time.perf_counter() - began))
    return out


def _spread(values: Sequence[float]) -> str:
    p10, p50, p90 = (stats.quantile(values, q) for q in (0.1, 0.5, 0.9))
    return f"{p50:.2f} ({p10:.2f}..{p90:.2f})"


def _share(flags: Sequence[bool]) -> str:
    return f"{100 * sum(flags) / max(len(flags), 1):.0f}% of {len(flags)}"


def model_table(results: dict[str, tuple[Unsure, list[Decoded], list[Decoded]]]) -> list[str]:
    lines = [
        "| model | clips | no-speech prob. median (p10..p90) | mean log-prob. median (p10..p90) "
        "| own thresholds: words kept | decode ms median / p90 |",
        "|---|---|---|---|---|---|",
    ]
    for model, (unsure, speech, other) in results.items():
        groups: list[tuple[str, list[Decoded]]] = [
            (f"speech {p:.1f} s", [d for d in speech if d.clip.prefix_s == p]) for p in PREFIXES_S
        ]
        groups += [("non-speech whole", [d for d in other if d.clip.prefix_s is None])]
        groups += [
            (f"non-speech {p:.1f} s", [d for d in other if d.clip.prefix_s == p])
            for p in NON_SPEECH_PREFIXES_S
        ]
        for label, group in groups:
            ms = [1000 * d.seconds for d in group]
            lines.append(
                f"| {model} | {label} | {_spread([d.found.no_speech_prob for d in group])} | "
                f"{_spread([d.found.logprob for d in group])} | "
                f"{_share([d.kept(unsure) for d in group])} | "
                f"{stats.median(ms):.0f} / {stats.p90(ms):.0f} |"
            )
    return lines


def grid(speech: list[Decoded], other: list[Decoded], base_abstains: float) -> list[str]:
    keep = [d for d in speech if d.clip.prefix_s in KEEP_PREFIXES_S]
    rows = []
    for max_ns in GRID_NO_SPEECH:
        for min_lp in GRID_LOGPROB:
            unsure = Unsure(max_ns, min_lp)
            abstains = sum(not d.kept(unsure) for d in other) / len(other)
            kept = sum(d.kept(unsure) for d in keep) / len(keep)
            kept_all = sum(d.kept(unsure) for d in speech) / len(speech)
            rows.append((abstains >= base_abstains, kept, abstains, kept_all, unsure))
    rows.sort(key=lambda r: (not r[0], -r[1], -r[2]))
    lines = [
        f'tiny.en thresholds (non-speech as "" at least as often as base\'s '
        f"{100 * base_abstains:.0f}% first; speech kept: the "
        f"{'/'.join(f'{p}' for p in KEEP_PREFIXES_S)} s prefixes, then all):",
        "",
        '| max no-speech | min log-prob | non-speech "" | speech kept (0.3/0.5 s) '
        "| speech kept (all prefixes) |",
        "|---|---|---|---|---|",
    ]
    for ok, kept, abstains, kept_all, unsure in rows[:15]:
        mark = "" if ok else " (below base)"
        lines.append(
            f"| {unsure.max_no_speech} | {unsure.min_logprob} | {100 * abstains:.0f}%{mark} | "
            f"{100 * kept:.0f}% | {100 * kept_all:.0f}% |"
        )
    return lines


TRITON_PREFIXES_S = (0.3, 0.5, 0.8, 1.0)
TURN_S = 4.0


def _infer(url: str, model: str, audio: Audio) -> float:
    """One request's round trip, seconds (a client of its own, as each session's call)."""
    import tritonclient.grpc as grpcclient

    samples = grpcclient.InferInput("AUDIO", [audio.shape[0]], "FP32")
    samples.set_data_from_numpy(np.ascontiguousarray(audio, np.float32))
    lengths = grpcclient.InferInput("AUDIO_LENGTHS", [1], "INT32")
    lengths.set_data_from_numpy(np.array([audio.shape[0]], np.int32))
    inputs = [samples, lengths]
    if model == "asr":
        flag = grpcclient.InferInput("PARTIAL", [1], "BOOL")
        flag.set_data_from_numpy(np.array([True]))
        inputs.append(flag)
    with grpcclient.InferenceServerClient(url) as client:
        began = time.perf_counter()
        client.infer(model, inputs)
        return time.perf_counter() - began


def _turns(url: str, audio: Audio, stop: threading.Event) -> None:
    """`asr` transcribing a turn (no PARTIAL), back to back until `stop`."""
    import tritonclient.grpc as grpcclient

    samples = grpcclient.InferInput("AUDIO", [audio.shape[0]], "FP32")
    samples.set_data_from_numpy(audio)
    lengths = grpcclient.InferInput("AUDIO_LENGTHS", [1], "INT32")
    lengths.set_data_from_numpy(np.array([audio.shape[0]], np.int32))
    with grpcclient.InferenceServerClient(url) as client:
        while not stop.is_set():
            client.infer("asr", [samples, lengths])


def _one_at_a_time(url: str, model: str, clips: list[Audio]) -> list[float]:
    return [_infer(url, model, c) for c in clips]


def _four_at_once(url: str, model: str, clips: list[Audio]) -> list[float]:
    with ThreadPoolExecutor(4) as pool:
        return list(pool.map(lambda c: _infer(url, model, c), clips))


def _behind_turns(url: str, model: str, clips: list[Audio], turn: Audio) -> list[float]:
    stop = threading.Event()
    worker = threading.Thread(target=_turns, args=(url, turn, stop))
    worker.start()
    try:
        time.sleep(0.5)
        out = []
        for c in clips:
            out.append(_infer(url, model, c))
            time.sleep(0.05)  # partials come a chunk apart, not back to back
        return out
    finally:
        stop.set()
        worker.join()


def triton_latency(clips: list[Audio], turn: Audio) -> list[str]:
    from bench import servers

    rows = [
        "| model | load | partials | round trip ms median / p90 |",
        "|---|---|---|---|",
    ]
    with servers.triton(("asr", "asr_partial")) as server:
        url = server.grpc_url
        for model in ("asr", "asr_partial"):
            _infer(url, model, clips[0])  # warm-up
            runs: list[tuple[str, list[float]]] = [
                ("one at a time", _one_at_a_time(url, model, clips)),
                ("4 at once", _four_at_once(url, model, clips)),
                (f"`asr` busy with {TURN_S:.0f} s turns", _behind_turns(url, model, clips, turn)),
            ]
            for label, seconds in runs:
                ms = [1000 * t for t in seconds]
                rows.append(
                    f"| {model} | {label} | {len(ms)} | "
                    f"{stats.median(ms):.0f} / {stats.p90(ms):.0f} |"
                )
    return rows


HEADING = "## Partial transcripts (overlaps)"


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--utterances", type=int, default=80)
    parser.add_argument("--show", action="store_true", help="print every non-speech text")
    parser.add_argument("--triton", action="store_true", help="round trips through Triton only")


def _run(args: argparse.Namespace, command: str) -> cli.Outcome:
    if args.utterances < 1:
        raise cli.Usage("--utterances: at least 1")
    settings = ModelSettings.from_env()
    speech = speech_prefixes(args.utterances)
    lines = [HEADING, "", f"Command: `{command}`.", ""]
    if args.triton:
        clips = [c.audio for c in speech if c.prefix_s in TRITON_PREFIXES_S]
        long = [r.audio for r in utterances(RATE) if r.duration_s >= TURN_S]
        turn = np.ascontiguousarray(long[0][: int(TURN_S * RATE)], np.float32)
        load_before = machine_load.mark()
        rows = triton_latency(clips, turn)
        load = machine_load.Load(load_before, machine_load.mark())
        lines += [f"{len(clips)} partials of 0.3-1.0 s; {os.cpu_count()} cores.", ""]
        lines += [*rows, "", *machine_load.lines(load)]
        return cli.Outcome("\n".join(lines))
    other = non_speech()
    base = Transcriber(whisper_model_dir(settings.cache_dir), settings.threads)
    tiny = partial_transcriber(settings.threads)
    results = {
        "base": (BASE_PARTIAL_UNSURE, decode(base, speech), decode(base, other)),
        "tiny.en": (TINY_EN_PARTIAL_UNSURE, decode(tiny, speech), decode(tiny, other)),
    }
    lines += [
        f"{args.utterances} utterances x {len(PREFIXES_S)} prefixes, {len(other)} non-speech "
        f"clips; {settings.threads} thread(s), {os.cpu_count()} cores, load average "
        f"{os.getloadavg()[0]:.1f}.",
        "",
        *model_table(results),
        "",
    ]
    base_unsure, _, base_other = results["base"]
    base_abstains = sum(not d.kept(base_unsure) for d in base_other) / len(base_other)
    _, tiny_speech, tiny_other = results["tiny.en"]
    lines += grid(tiny_speech, tiny_other, base_abstains)
    if args.show:
        lines.append("")
        for model, (unsure, _, decoded) in results.items():
            for d in decoded:
                lines.append(
                    f"    {model:8} {d.clip.name:28} {d.clip.prefix_s or 'whole'!s:5} "
                    f"ns={d.found.no_speech_prob:.2f} lp={d.found.logprob:.2f} "
                    f"kept={d.kept(unsure)!s:5} {d.found.text!r}"
                )
    return cli.Outcome("\n".join(lines))


BENCH = cli.Bench("bench.partial_asr", __doc__, report.DOC, _arguments, _run)


def main(argv: Sequence[str] | None = None) -> int:
    return cli.main(BENCH, argv)


if __name__ == "__main__":
    raise SystemExit(main())

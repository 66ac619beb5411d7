"""Per-stage timings of the step-by-step Qwen3-Omni stages, in one process.

    python -m bench.omni_stages [--weights DIR] [--tokens N] [--frames N]

Without --weights it uses (and builds once) the tiny random weights in the cache. Prints load
times, thinker prefill/step, talker prefill/frame (and the code-predictor share of a frame) and
Code2Wav window decode times, as medians in milliseconds.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bench import cli, report, stats
from turntaker_models.contract import Conversation, Message, TextPart
from turntaker_models.omni import loader
from turntaker_models.omni.code2wav import Code2WavStream, WindowPlan, trim_samples, warm_up
from turntaker_models.omni.prompt import PromptBuilder
from turntaker_models.omni.sampling import SamplingConfig
from turntaker_models.omni.talker import TalkerSession
from turntaker_models.omni.thinker import ThinkerSession
from turntaker_models.settings import ModelSettings


def _ms(samples: Sequence[float]) -> str:
    return f"{report.ms(stats.median(samples), 2)} ms" if samples else "-"


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    began = time.perf_counter()
    result = fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return result, time.perf_counter() - began


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--weights", type=Path, help="checkpoint folder (default: tiny)")
    parser.add_argument("--tokens", type=int, default=32, help="thinker steps to time")
    parser.add_argument("--frames", type=int, default=32, help="talker frames to time")


def _run(args: argparse.Namespace, command: str) -> cli.Outcome:
    settings = ModelSettings.from_env()
    torch.set_num_threads(settings.threads)
    path = args.weights or loader.weights_dir(settings)
    placement = loader.Placement.auto()
    config = loader.load_config(path)
    models = {}
    for stage in ("thinker", "talker", "code2wav"):
        models[stage], took = _timed(lambda s=stage: loader.load_stage(path, s, placement))  # type: ignore[misc]
        print(f"load {stage}: {took:.2f} s")
    prompts = PromptBuilder(
        loader.load_tokenizer(path), loader.load_feature_extractor(path), config.thinker_config
    )
    prompt = prompts.build(Conversation([Message("user", [TextPart("Read me the news.")])]), [])

    def never() -> bool:
        return False

    thinker = ThinkerSession(models["thinker"], config, prompt, SamplingConfig(), 0, never)
    (token, start), prefill = _timed(lambda: thinker.prefill(want_talker=True))
    steps = []
    for _ in range(args.tokens):
        token, took = _timed(lambda t=token: thinker.step(t))  # type: ignore[misc]
        steps.append(took)
    print(f"thinker: prefill {prefill * 1000:.2f} ms ({prompt.input_ids.shape[1]} tokens)")
    print(f"thinker: step {_ms(steps)} (median of {len(steps)})")

    talker = TalkerSession(models["talker"], config, True, 0, 10**6, never)
    frame, talker_prefill = _timed(lambda: talker.start(start, "default"))
    row = thinker.embed(token)
    frames = []
    predictor = []
    for _ in range(args.frames):
        frame, took = _timed(lambda: talker.step(row))
        if frame is None:
            break
        frames.append(took)
        predictor.append(talker.predictor_s)
    print(f"talker: prefill {talker_prefill * 1000:.2f} ms, frame {_ms(frames)}")
    forwards = config.talker_config.num_code_groups - 1
    print(f"talker: of which code predictor {_ms(predictor)} ({forwards} forwards)")

    plan = WindowPlan()
    code2wav = models["code2wav"]
    warm_up(code2wav, plan)
    stream = Code2WavStream(code2wav, plan, trim_samples(code2wav), never)
    windows = []
    groups = int(config.code2wav_config.num_quantizers)
    codes = np.random.default_rng(0).integers(0, 16, (groups, 64))
    for i in range(codes.shape[1]):
        audio, took = _timed(lambda i=i: stream.push(codes[:, i]))  # type: ignore[misc]
        if audio is not None:
            windows.append(took)
    print(
        f"code2wav: first window {windows[0] * 1000:.2f} ms ({plan.first_frames} frames), "
        f"later windows {_ms(windows[1:])} ({plan.chunk_frames} new + {plan.left_context} context)"
    )
    # Its figures are printed as they come, for a look at one machine: no section of a document.
    return cli.Outcome("")


BENCH = cli.Bench("bench.omni_stages", __doc__, None, _arguments, _run)


def main(argv: Sequence[str] | None = None) -> int:
    return cli.main(BENCH, argv)


if __name__ == "__main__":
    raise SystemExit(main())

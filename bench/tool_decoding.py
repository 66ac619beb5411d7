"""Constrained vs free decoding of one function call: SmolLM2-135M on CPU, the `llm` decoder.

The same request (a weather question, the weather tool in the system prompt) decoded three
ways by turntaker_models/cascade/llm.py's Decoder, runs interleaved so that drift in machine load
hits every way alike:
- constrained, fast-forward: tool_choice "function" under the CallConstraint, the grammar's
  forced tokens (the call's fixed text) fed several per forward pass, as the service runs;
- constrained, one token per pass: the same grammar, every token its own forward pass;
- free: tool_choice "auto", same prompt, no mask, max_tokens the constrained call's length.
  SmolLM2-135M does not write calls by itself, so this decodes text: a forward pass costs
  the same whatever the token, which is what the per-pass figures compare.

Figures: time per decode pass (forward, mask and pick; median, p90), the grammar's own time
per pass (mask, accept, forced tokens), time from the request to the first delta of argument
text and to the whole call, all greedy. Then the mask alone, replaying the call's tokens
through a fresh constraint without the model, many times.

Run: `python -m bench.tool_decoding --write` (writes "## Function calling: constrained decoding" in
docs/benchmarks.md; about a minute).
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from dataclasses import dataclass

from bench import cli, report, stats
from turntaker_models.cascade import smollm
from turntaker_models.cascade.llm import Decoder, GenerationStats
from turntaker_models.contract import (
    Conversation,
    GenerationParameters,
    Message,
    TextPart,
    ToolSpec,
)
from turntaker_models.settings import ModelSettings
from turntaker_models.tool_grammar import CallConstraint

HEADING = "## Function calling: constrained decoding"
WEATHER = ToolSpec(
    "get_weather",
    "Get the current weather in a city.",
    {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        },
        "required": ["city"],
        "additionalProperties": False,
    },
)
QUESTION = Conversation([Message("user", [TextPart("What's the weather like in Paris?")])])
CONSTRAINED = GenerationParameters(
    tools=[WEATHER], tool_choice="function", tool_name="get_weather", max_tokens=64
)


@dataclass(frozen=True)
class Run:
    stats: GenerationStats
    total_s: float
    call: str


def decode(decoder: Decoder, params: GenerationParameters, fast_forward: bool) -> Run:
    decoder.fast_forward = fast_forward
    counted = GenerationStats()
    began = time.perf_counter()
    steps = list(decoder.generate(QUESTION, [], params, lambda: False, counted))
    total = time.perf_counter() - began
    deltas = [s.tool_call for s in steps if s.tool_call is not None]
    call = "".join(d.name + d.arguments for d in deltas)
    return Run(counted, total, call)


def replay_mask_s(decoder: Decoder, tokens: list[int], repeats: int) -> list[float]:
    """Mask and accept per token, replaying a call's tokens through fresh constraints."""
    import torch

    times: list[float] = []
    logits = torch.zeros(int(decoder.model.config.vocab_size))
    for _ in range(repeats):
        constraint = CallConstraint(decoder.grammar_tokenizer, [WEATHER], "get_weather")
        for token in tokens:
            began = time.perf_counter()
            constraint.mask_logits(logits)
            constraint.accept(token)
            times.append(time.perf_counter() - began)
            logits.zero_()
    return times


def _median_ms(values: list[float]) -> str:
    return report.ms(stats.median(values), 0)


def _row(label: str, runs: list[Run], free: list[Run]) -> str:
    steps = [s for r in runs for s in r.stats.step_s]
    masks = [m for r in runs for m in r.stats.mask_s]
    firsts = [r.stats.first_arguments_s for r in runs if r.stats.first_arguments_s is not None]
    calls = [r.total_s for r in runs if r.call]
    free_steps = [s for r in free for s in r.stats.step_s]
    ratio = stats.median(steps) / stats.median(free_steps)
    whole = stats.median(r.total_s for r in runs) / stats.median(r.total_s for r in free)
    first = runs[0].stats
    return (
        f"| {label} | {len(runs)} | {first.new_tokens} ({first.forced_tokens} forced) | "
        f"{first.decode_steps} | {report.median_p90(steps, 1)} | {report.median_p90(masks, 2)} | "
        f"{_median_ms(firsts)} | {_median_ms(calls)} | "
        f"{_median_ms([r.total_s for r in runs])} | {ratio:.2f}x | {whole:.2f}x |"
    )


def run(runs: int, threads: int, command: str = "python -m bench.tool_decoding") -> str:
    loaded = smollm.load(ModelSettings.from_env().cache_dir)
    decoder = Decoder(loaded.model, loaded.tokenizer, threads)
    # Warm torch and the grammar before timing.
    decode(decoder, CONSTRAINED, True)
    reference = decode(decoder, CONSTRAINED, False)
    assert reference.call.startswith("get_weather{"), reference.call
    free_params = GenerationParameters(
        tools=[WEATHER], tool_choice="auto", max_tokens=reference.stats.new_tokens
    )
    ways: dict[str, list[Run]] = {"ff": [], "one": [], "free": []}
    for _ in range(runs):
        ways["ff"].append(decode(decoder, CONSTRAINED, True))
        ways["one"].append(decode(decoder, CONSTRAINED, False))
        ways["free"].append(decode(decoder, free_params, True))
    assert all(r.call == reference.call for r in ways["ff"] + ways["one"])
    call_text = reference.call.removeprefix("get_weather")
    tokens = decoder.tokenizer(
        f'<tool_call>\n{{"name": "get_weather", "arguments": {call_text}}}\n</tool_call>',
        add_special_tokens=False,
    )["input_ids"]
    replayed = replay_mask_s(decoder, tokens, repeats=50)
    free_steps = [s for r in ways["free"] for s in r.stats.step_s]
    free = ways["free"]
    free_calls = sum(1 for r in free if r.call)
    prefill = stats.median(r.stats.prefill_s for r in ways["one"])
    import llguidance
    import torch

    return "\n".join(
        [
            HEADING,
            "",
            f"Command: `{command}` ({runs} runs per way, interleaved, greedy; "
            f"{os.cpu_count()} cores, torch threads {threads}; Python "
            f"{platform.python_version()}, torch {torch.__version__}, llguidance "
            f"{llguidance.__version__}; SmolLM2-135M-Instruct float32 on CPU).",
            "",
            f"One weather question with the weather tool in the system prompt "
            f"({reference.stats.prompt_tokens} prompt tokens, prefill "
            f"{prefill * 1000:.0f} ms median). The constrained call, every run: "
            f"`{call_text}`. Free decoding is the same prompt with tool_choice auto and "
            f"no mask, for as many tokens; SmolLM2-135M answers it in text "
            f"({free_calls}/{runs} runs wrote a call), so it has no call times.",
            "",
            "Per pass: one decode forward pass after the prefill with its mask and pick (ms, "
            "median / p90); fast-forward passes may feed several forced tokens. Grammar: the "
            "constraint's own time in that pass (mask, accept, forced tokens), the only work "
            "constrained decoding adds to a pass: per-pass differences beyond it are the "
            f"machine's load (load average {os.getloadavg()[0]:.1f} at the end). First "
            "arguments and whole call: from the request, prefill included; with fast-forward "
            "the forced start of the arguments goes out before the prefill. Ratios against "
            "free decoding.",
            "",
            "| decoding | runs | new tokens | decode passes | per pass ms | grammar per pass ms "
            "| first arguments ms | whole call ms | whole generation ms | per pass vs free "
            "| whole vs free |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            _row("constrained, fast-forward (served)", ways["ff"], free),
            _row("constrained, one token per pass", ways["one"], free),
            f"| free, same prompt, no mask | {runs} | {free[0].stats.new_tokens} | "
            f"{free[0].stats.decode_steps} | {report.median_p90(free_steps, 1)} | - | - | - | "
            f"{_median_ms([r.total_s for r in free])} | 1.00x | 1.00x |",
            "",
            f"Mask alone, the call's {len(tokens)} tokens replayed 50 times through fresh "
            f"constraints without the model: {report.median_p90(replayed, 3)} ms per token "
            f"(median / p90), {stats.median(replayed) / stats.median(free_steps):.1%} "
            "of a free decode pass.",
            "",
        ]
    )


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", type=int, default=8, help="runs per way")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")


def _run(args: argparse.Namespace, command: str) -> cli.Outcome:
    return cli.Outcome(run(args.runs, args.threads, command))


BENCH = cli.Bench("bench.tool_decoding", __doc__, report.DOC, _arguments, _run)


def main(argv: list[str] | None = None) -> int:
    return cli.main(BENCH, argv)


if __name__ == "__main__":
    raise SystemExit(main())

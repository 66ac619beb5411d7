"""bench/load.py without servers: `--echo` and the echo-on-against-off rows it reports."""

from __future__ import annotations

import json

import pytest

from bench import cli, load
from bench.load_clients import Figures, session_update


def _row(vad: str, sessions: int, echo: bool, cpu_s: float, lag_s: float = 0.001) -> load.Row:
    server = {
        "samples": {"event_loop_lag": [lag_s], "input_backlog": [0.0]},
        "cpu_s": cpu_s,
        "wall_s": 10.0,
        "rss": 2**30,
    }
    return load.Row(vad, sessions, Figures(), server, 2**29, [0.3], [0.0], 1.0, echo)


def test_echo_takes_off_on_or_both_in_order() -> None:
    assert load.echo_modes("off") == [False]
    assert load.echo_modes("on") == [True]
    assert load.echo_modes("off,on") == [False, True]
    for wrong in ("", "yes", "on,on"):
        with pytest.raises(cli.Usage):
            load.echo_modes(wrong)
    args = cli.parser(load.BENCH).parse_args(["--echo", "off,on"])
    assert args.echo == "off,on"
    assert cli.parser(load.BENCH).parse_args([]).echo == "off", "echo off unless asked"


def test_the_sessions_ask_for_the_servers_echo_cancellation_only_with_echo() -> None:
    on = json.loads(session_update(50, echo=True))["session"]["audio"]["input"]
    off = json.loads(session_update(50))["session"]["audio"]["input"]
    assert on["echo_cancellation"] == {"type": "server"}
    assert "echo_cancellation" not in off
    assert on["turn_detection"] == off["turn_detection"]


def test_echo_on_is_reported_beside_echo_off_and_the_targets_stay_echo_off() -> None:
    rows = [
        _row("triton", 1, False, cpu_s=0.1),
        _row("triton", 100, False, cpu_s=10.0),
        _row("triton", 1, True, cpu_s=0.3),
        _row("triton", 100, True, cpu_s=30.0, lag_s=0.05),
    ]
    section = load.render(rows, None, "python -m bench.load --echo off,on", "test machine")
    assert "| triton | 100 | 1.00% | 3.00% | yes | no |" in section
    assert "- VAD triton: largest real-time N 100 with echo cancellation off, 1 on." in section
    assert "- VAD triton echo: largest real-time N 1; at N=100: lag p99 50.0 ms." in section
    assert ">= 200 real-time sessions per process: 100," in section, "targets: echo off only"
    assert "Echo cancellation on against off" not in load.render(rows[:2], None, "c", "m")

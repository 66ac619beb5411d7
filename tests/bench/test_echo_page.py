"""bench/echo_page.py without a browser or a server: what one page session's record says
(false barge-in, missed, onset -> interrupt), the section's rows and target, the command it
quotes, and the injected audio graph's script (valid JavaScript, the room's response in it).
The sessions themselves run in tests/browser/test_echo_page.py (the same `run_session`)."""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from bench import echo_page
from bench.echo_page import Measured, PageOutcome, Session
from bench.rooms import Room

SHARE = re.compile(r"^(\d+)/(\d+) \((\d+)%(; \d+-\d+%)?\)$")


def _echo_alone(cut_at: float | None) -> PageOutcome:
    return PageOutcome(
        answer_id="resp_1",
        created=900.0,
        first_audio=1000.0,
        cut=cut_at,
        trigger="speech_started" if cut_at is not None else None,
        finished=cut_at is None,
        finished_at=7000.0 if cut_at is None else None,
        played_ms=6000.0 if cut_at is None else 300.0,
        progress_acks=60,
        echo_rms=0.1,
    )


def _interrupted(latency_ms: float) -> PageOutcome:
    onset = 2500.0
    return PageOutcome(
        answer_id="resp_1",
        created=900.0,
        first_audio=1000.0,
        onset=onset,
        cut=onset + latency_ms,
        cleared=onset + latency_ms + 5,
        trigger="speech_started",
        speech_starts=[onset + latency_ms],
        played_ms=1500.0 + latency_ms,
        played_at_onset_ms=1500.0,
        progress_acks=15,
        echo_rms=0.05,
    )


def test_one_session_s_record() -> None:
    clean = _echo_alone(None)
    assert not clean.cut_by_echo and not clean.echo_speech and not clean.playing_at_onset
    false = _echo_alone(1300.0)
    assert false.cut_by_echo and math.isnan(false.latency_s)
    spoke = _interrupted(250.0)
    assert spoke.playing_at_onset and spoke.interrupted and not spoke.cut_by_echo
    assert spoke.latency_s == pytest.approx(0.25) and spoke.offset_s == pytest.approx(1.5)
    assert spoke.echo_db == pytest.approx(20 * math.log10(0.05 / 0.1))
    # Speech the echo started before the user spoke is echo heard as speech; the user's is not.
    assert not spoke.echo_speech
    assert PageOutcome(first_audio=1000.0, onset=2500.0, speech_starts=[1800.0]).echo_speech
    # An answer heard to its end before the user spoke: that interruption came over nothing.
    over = PageOutcome(first_audio=1000.0, onset=8000.0, finished=True, finished_at=7000.0)
    assert not over.playing_at_onset and not over.interrupted
    # Missed: the user spoke over the answer and it played on.
    missed = PageOutcome(first_audio=1000.0, onset=2500.0, played_at_onset_ms=1500.0)
    assert missed.playing_at_onset and not missed.interrupted


def _measured() -> Measured:
    run = echo_page.QUICK
    outcomes = {
        ("echo", True): _echo_alone(None),
        ("interruption", True): _interrupted(180.0),
        ("echo", False): _echo_alone(1250.0),
    }
    sessions = [Session(item, on, outcomes[(item.kind, on)]) for item, on in echo_page.items(run)]
    return Measured(sessions=sessions, browser="156.0", answer_s=5.9)


def test_the_section_has_a_row_per_setting_and_the_target() -> None:
    assert [(i.kind, on) for i, on in echo_page.items(echo_page.QUICK)] == [
        ("echo", True),
        ("interruption", True),
        ("echo", False),
    ]
    section = echo_page.table(echo_page.QUICK, _measured(), "python -m bench.echo_page --quick")
    assert section.startswith(echo_page.HEADING + "\n")
    assert "`python -m bench.echo_page --quick`" in section and "Chromium 156.0" in section
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == len(echo_page.COLUMNS) and cells[0] in ("on", "off"):
            rows[(cells[0], cells[1])] = dict(zip(echo_page.COLUMNS, cells, strict=True))
    on, off = rows[("on", "0 dB")], rows[("off", "0 dB")]
    assert on["sessions (echo alone + interruption)"] == "1 + 1"
    assert on["false barge-ins (echo alone)"] == "0/1 (0%; 0-79%)"
    assert off["false barge-ins (echo alone)"] == "1/1 (100%; 21-100%)"
    for cell in (on["echo heard as speech"], on["interruptions missed"]):
        assert SHARE.match(cell), cell
    assert on["onset -> page cut"] == "180 / 180" and on["onset -> cleared"] == "185 / 185"
    assert on["user offset s"] == "1.50" and off["progress ACKs / s"] == "-"
    assert float(on["progress ACKs / s"]) > 0 and float(on["echo in the page, dB"]) < 0
    target = next(x for x in section.splitlines() if "false barge-ins from echo alone" in x)
    assert target.endswith(", met"), target


def test_a_false_barge_in_misses_the_target_and_is_named() -> None:
    measured = _measured()
    measured.sessions[0].page = _echo_alone(1400.0)
    section = echo_page.table(echo_page.QUICK, measured, "python -m bench.echo_page --quick")
    target = next(x for x in section.splitlines() if "false barge-ins from echo alone" in x)
    assert target.endswith(", MISSED"), target
    assert "Cut by echo with cancellation on" in section and "at 0.40 s" in section


def _verdict(end_ms: int, heard: float, held_by: list[int]) -> dict[str, object]:
    """An echo verdict as bench/load_server.py's `verdicts` sends it."""
    return {
        "chunk_end_ms": end_ms,
        "probability": 0.93,
        "heard": heard,
        "since_played_ms": 0,
        "excess_db": 7.4,
        "microphone_db": -21.0,
        "cleaned_db": -24.5,
        "echo_db": None,
        "trained": True,
        "held_by": held_by,
        "vouched": False,
    }


def test_rule6_a_false_barge_in_is_traced_to_the_chunk_that_started_its_speech() -> None:
    verdicts = [_verdict(4800, 0.49, [7]), _verdict(4832, 0.93, []), _verdict(4864, 0.95, [])]
    assert echo_page.culprit(verdicts) == verdicts[1]
    assert echo_page.culprit(verdicts[:1]) is None, "nothing at the threshold: no culprit"
    measured = _measured()
    measured.sessions[0].page = _echo_alone(1400.0)
    measured.sessions[0].culprit = verdicts[1]
    section = echo_page.table(echo_page.QUICK, measured, "python -m bench.echo_page --quick")
    [line] = [x for x in section.splitlines() if "chunk ending at 4832 ms" in x]
    assert line.startswith(f"- {measured.sessions[0].item.name}: "), line
    assert "VAD 0.93, let through by rules 7, 8 and 10" in line
    assert "excess 7.4 dB (its filter trained)" in line and "-21.0 / -24.5 / - dBFS" in line
    assert line.endswith("never moved by an ACK"), line
    moved = verdicts[1] | {"reference_moved_ms": 40, "reference_moved_by_ms": -12}
    assert echo_page._traced(moved).endswith("last moved -12 ms by an ACK 40 ms before")


def test_a_wrong_level_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        echo_page.main(["--levels", "loud"])
    assert exit_.value.code == 2
    assert "--levels" in capsys.readouterr().err


def test_the_injected_graph_is_javascript_with_the_room_in_it(tmp_path: Path) -> None:
    room = Room(delay_ms=120.0, rt60_s=0.2, level_db=-10.0, seed=1, distance_m=0.5)
    script = echo_page.init_script(room)
    config = json.loads(script.split("const config = ", 1)[1].split(";\n", 1)[0])
    response = room.impulse_response(echo_page.RATE)
    delay = round(120.0 * echo_page.RATE / 1000)
    assert config["delay_s"] == pytest.approx(0.12)
    assert len(config["taps"]) == response.size - delay
    assert config["taps"][:5] == pytest.approx(response[delay : delay + 5].tolist(), rel=1e-5)
    assert echo_page.init_script(None).count('"taps": null') == 1
    node = shutil.which("node")
    assert node, "node is missing: `make test` installs nodejs with apt"
    path = tmp_path / "room.js"
    path.write_text(script, encoding="utf-8")
    checked = subprocess.run([node, "--check", str(path)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr

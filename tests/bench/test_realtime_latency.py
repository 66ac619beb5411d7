"""bench/realtime_latency.py without a server: the split of a turn's time to first audio into
its parts, the modes and the section it writes."""

from __future__ import annotations

import json
import math

import pytest

from bench import realtime_latency as rl


def _turn(transcript: float) -> rl.Turn:
    return rl.Turn(
        speech_end=10.0,
        committed=10.6,
        transcript=transcript,
        first_text=11.5,
        first_audio=11.4,
        transport=0.001,
        answer="Paris.",
    )


def test_the_parts_add_up_to_the_time_to_first_audio() -> None:
    part = rl.split(_turn(transcript=10.9))
    assert part.total == pytest.approx(1.4)
    assert part.decision == pytest.approx(0.6)
    assert part.transcript == pytest.approx(0.3)
    assert part.answer == pytest.approx(0.499)
    assert part.transport == pytest.approx(0.001)
    assert part.first_text == pytest.approx(1.5)
    assert sum(part.part(p) for p in rl.PARTS) == pytest.approx(part.total)


def test_a_transcript_made_before_the_commit_costs_nothing_after_it() -> None:
    # A preemptive response's transcript is made during the pause.
    part = rl.split(_turn(transcript=10.4))
    assert part.transcript == 0.0
    assert part.answer == pytest.approx(0.799)
    assert sum(part.part(p) for p in rl.PARTS) == pytest.approx(part.total)


def test_an_unseen_milestone_is_nan_not_a_number() -> None:
    part = rl.split(rl.Turn(speech_end=1.0, committed=1.5, first_audio=2.5))
    assert part.transcript == 0.0  # no transcript event: nothing waited for after the commit
    assert part.answer == pytest.approx(1.0)  # no transport measured: none taken off
    assert math.isnan(part.transport) and math.isnan(part.first_text)


def test_the_modes_are_both_turn_detections_with_and_without_preemption() -> None:
    labels = [c.label for c in rl.MODES.values()]
    assert labels == [
        "server_vad 500 ms",
        "server_vad 500 ms, preemptive",
        "semantic_vad medium",
        "semantic_vad medium, preemptive",
    ]
    for config in rl.MODES.values():
        session = json.loads(rl.session_update(config))["session"]
        detection = session["audio"]["input"]["turn_detection"]
        assert detection["type"] == config.type
        assert detection.get("preemptive_response", False) is config.preemptive
        # The transcript's milestone is its `completed` event: transcription must be on.
        assert session["audio"]["input"]["transcription"] == {"model": "whisper-1"}


def test_the_section_keeps_the_v1_rows_and_has_a_row_per_mode() -> None:
    results = []
    for config in rl.MODES.values():
        result = rl.ModeResult(config, [_turn(10.9), _turn(10.4)])
        if config == rl.SERVER_VAD:
            result.barge = [0.1, 0.12]
        results.append(result)
    section = rl.table(results, "cascade", "python -m bench.realtime_latency --runs 2")
    lines = section.splitlines()
    assert lines[0] == rl.HEADING
    assert any(line.startswith("| time to first audio (end of question") for line in lines)
    assert any(line.startswith("| same, minus the VAD silence window") for line in lines)
    assert any(line.startswith("| barge-in (speech onset sent") for line in lines)
    rows = {line.split(" | ")[0][2:]: line for line in lines if line.startswith("| ")}
    for config in rl.MODES.values():
        cells = rows[config.label].strip("| ").split(" | ")
        # mode, runs, total, the four parts, first text
        assert len(cells) == 3 + len(rl.PARTS) + 1
        assert cells[1] == "2"
        assert cells[2] == "1400 / 1400"
        # What was said, so a faster answer is seen to be the same answer.
        assert f"- {config.label}: 2x 'Paris.'" in lines

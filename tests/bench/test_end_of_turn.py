"""bench/end_of_turn.py `--quick` against the session's tritonserver on the null pipeline (it
needs `null`, `vad` and `cancel`, and `turn` for semantic_vad, e.g.
TURNTAKER_TEST_MODELS=null,vad,cancel,turn): its decision table renders with a row per mode,
and what the rows count is what the sessions saw: server_vad 500 ms cuts off every held item
(synthetic `paused`, human `held`) whose pause is well over 500 ms (a commit at each such pause)
and no complete one. A mode the server refuses
(semantic_vad before its model is loaded) is a `refused` row, not a failure. Timings are
never asserted beyond what the VAD's own silence window implies.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from bench import end_of_turn
from bench.end_of_turn_corpus import ORIGINS, TurnItem, build_corpus
from bench.end_of_turn_sessions import Config, Outcome
from orchestrator.triton import TritonServer

COLUMNS = (
    "mode",
    "speech",
    "items",
    "held cut",
    "complete cut",
    "commits per held turn",
    "latency complete",
    "latency held not cut",
    "late",
    "waited",
    "server decisions",
)
SHARE = re.compile(r"^(\d+)/(\d+) \((\d+)%\)$")
CLEARLY_OVER_S = 0.7  # a pause this long is cut off by a 500 ms silence window


def _share(cell: str) -> tuple[int, int]:
    match = SHARE.match(cell)
    assert match, f"not a share: {cell!r}"
    part, whole = int(match[1]), int(match[2])
    assert 0 <= part <= whole and whole > 0
    return part, whole


def _latency(cell: str) -> tuple[float, float]:
    median, p90 = (float(v) for v in cell.split(" / "))
    assert math.isfinite(median) and math.isfinite(p90) and 0 <= median <= p90, cell
    return median, p90


def test_configs_are_one_type_with_names_and_wire_objects() -> None:
    assert [c.key for c in end_of_turn.DECISION_CONFIGS] == [
        "server_vad_500",
        "semantic_vad_low",
        "semantic_vad_medium",
        "semantic_vad_high",
    ]
    assert set(end_of_turn.CONFIGS) >= {"server_vad_500_preemptive", "semantic_vad_medium"}
    assert [c.longest_wait_s for c in end_of_turn.DECISION_CONFIGS] == [0.5, 8.0, 4.0, 2.0]
    assert Config("semantic_vad", eagerness="auto").longest_wait_s == 4.0
    plain = Config().turn_detection()
    assert plain == {
        "type": "server_vad",
        "create_response": True,
        "interrupt_response": True,
        "silence_duration_ms": 500,
    }, "a field the server may not know is never sent"
    eager = Config("semantic_vad", eagerness="high", preemptive=True)
    assert eager.turn_detection()["eagerness"] == "high"
    assert eager.turn_detection()["preemptive_response"] is True
    assert eager.label == "semantic_vad high, preemptive"
    echo = {"audio": {"input": {"turn_detection": {"type": "semantic_vad"}}}}
    assert eager.honoured_by(echo) == "preemptive_response not echoed (unknown to the server)"
    assert Config("semantic_vad").honoured_by(echo) is None
    assert Config().honoured_by(echo) == "echoed turn_detection.type 'semantic_vad'"
    with pytest.raises(ValueError):
        Config("semantic_vad", eagerness="eager")  # type: ignore[arg-type]


def _paused_item() -> TurnItem:
    return next(it for it in build_corpus(end_of_turn.QUICK_PLAN) if it.kind == "paused")


def test_an_outcome_counts_a_commit_before_the_end_of_speech_as_premature() -> None:
    item = _paused_item()
    cut = Outcome(item, Config(), onset=10.0, pause_start=11.0, speech_end=13.0)
    cut.committed = [9.0, 11.6, 13.6]  # room tone, the pause, the end
    cut.created = [("early", 11.61), ("answer", 13.61)]
    cut.first_audio = {"early": 11.7, "answer": 13.9}
    cut.done = {"answer": (14.0, "completed")}
    assert cut.premature and cut.commits == 2 and cut.early_commits == 1
    assert cut.final_commit == 13.6 and cut.answer == "answer"
    assert cut.commit_latency == pytest.approx(0.6)
    assert cut.first_audio_latency == pytest.approx(0.9)
    assert cut.settled(14.0)
    whole = Outcome(item, Config(), onset=10.0, pause_start=11.0, speech_end=13.0)
    whole.committed = [13.55]
    assert not whole.premature and whole.commits == 1 and whole.answer is None
    assert not whole.settled(14.0), "waits for the answer"
    never = Outcome(item, Config("semantic_vad", eagerness="high"), onset=10.0, speech_end=13.0)
    assert not never.settled(15.9) and never.settled(16.0), "longest wait (2 s) + 1 s"


def test_quick_run_on_the_null_pipeline_counts_what_the_sessions_saw(
    triton_server: TritonServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[end_of_turn.Measured] = []
    real = end_of_turn.measure

    def spy(run: end_of_turn.Run, url: str | None) -> end_of_turn.Measured:
        seen.append(real(run, url))
        return seen[-1]

    monkeypatch.setattr(end_of_turn, "measure", spy)
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\n## Other bench\n\nkept\n", encoding="utf-8")
    modes = "server_vad_500,semantic_vad_medium"
    argv = ["--quick", "--url", triton_server.grpc_url, "--pipelines", "null", "--modes", modes]
    assert end_of_turn.main([*argv, "--write", "--doc", str(doc)]) == 0
    text = doc.read_text(encoding="utf-8")
    assert "kept" in text, "the bench replaced another bench's section"
    section = text[text.index(end_of_turn.HEADING) :]
    assert f"`python -m bench.end_of_turn --quick --modes {modes} --pipelines null`" in section
    rows: dict[tuple[str, str], dict[str, str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == len(COLUMNS) and cells[0].startswith(("server_vad", "semantic_vad")):
            rows[(cells[0], cells[1])] = dict(zip(COLUMNS, cells, strict=True))
    labels = {label for label, _ in rows}
    assert labels == {"server_vad 500 ms", "semantic_vad medium"}

    (measured,) = seen
    base = measured.decisions[0]
    assert base.config == end_of_turn.SERVER_VAD and base.refused is None
    outcomes = base.outcomes
    assert all(not o.errors and not o.timed_out for o in outcomes), [o.errors for o in outcomes]
    held = [o for o in outcomes if o.item.held]
    complete = [o for o in outcomes if o.item.kind == "complete"]
    assert {o.item.kind for o in held} == {"paused", "held"}
    long = [o for o in held if o.item.pause_s >= CLEARLY_OVER_S]
    assert long, "the quick plan must hold a held item with a pause well over 500 ms"
    for out in long:
        # At least one commit per pause well over 500 ms, and the final one.
        over = sum(b - a >= CLEARLY_OVER_S * out.item.rate for a, b in out.item.pauses)
        assert out.premature and out.commits >= over + 1, f"{out.item.name}: not cut off"
        if out.item.kind == "paused":
            assert out.commits == 2, out.item.name
    for out in complete:
        assert not out.premature and out.commits == 1, out.item.name
        # The server cannot commit before its 500 ms silence window has passed (the end of
        # speech lies within the 20 ms append whose send time is taken).
        assert out.commit_latency is not None and out.commit_latency >= 0.48, out.item.name
        assert out.first_audio_latency is not None, f"{out.item.name}: no answer audio"

    for origin in ORIGINS:
        mine = [o for o in outcomes if o.item.origin == origin]
        mine_held = [o for o in mine if o.item.held]
        mine_complete = [o for o in mine if o.item.kind == "complete"]
        assert mine_held and mine_complete, f"the quick run has no {origin} turns"
        row = rows[("server_vad 500 ms", origin)]
        assert row["items"] == f"{len(mine_complete)} + {len(mine_held)}"
        cut = (sum(o.premature for o in mine_held), len(mine_held))
        assert _share(row["held cut"]) == cut
        assert _share(row["complete cut"]) == (0, len(mine_complete))
        _latency(row["latency complete"])
        assert row["waited"] == "-"
        assert float(row["commits per held turn"]) >= 1.0
        if measured.decisions[1].refused is None:
            semantic = rows[("semantic_vad medium", origin)]
            _share(semantic["held cut"])
            _share(semantic["waited"])
    if measured.decisions[1].refused is not None:
        assert rows[("semantic_vad medium", "-")]["items"] == "refused"
        assert "semantic_vad medium: not run, " in section, "a refusal is explained"
    targets = section[section.index("Targets:") :].splitlines()
    for origin, target in (
        ("synthetic", "semantic_vad (medium)"),
        ("human", "semantic_vad (medium)"),
        ("synthetic", "preemptive responses cut"),  # the first-audio table: synthetic only
    ):
        line = next(x for x in targets if x.startswith(f"- {origin}: ") and target in x)
        assert line.endswith((", met", ", MISSED")) or "not measured (" in line, line
        assert "nan" not in line, line
    assert not any(x.startswith("- human: preemptive") for x in targets), "not run on human"
    assert "- null, server_vad 500 ms: " in section, "no per-voice line"
    assert "human/asterisk cut " in section, "no per-voice figures for the human turns"


def test_unknown_modes_and_pipelines_are_refused() -> None:
    with pytest.raises(SystemExit):
        end_of_turn.main(["--modes", "server_vad_300"])
    with pytest.raises(SystemExit):
        end_of_turn.main(["--pipelines", "gpt"])

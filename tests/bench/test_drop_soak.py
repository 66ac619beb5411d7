"""bench/drop_soak.py, short, against the session's tritonserver (`null` at real time): 30
connections cut under 6 concurrent sessions and resumed, and not one event lost or repeated,
no response without its one `response.done`, no resume refused, and nothing (session, grace,
journal, Triton stream, descriptor) left once every session closed. About 25 s; `make soak`
runs the long one."""

from __future__ import annotations

from pathlib import Path

from bench import drop_checks, drop_clients, drop_soak
from orchestrator.triton import TritonServer

DROPS = 30


def _figures(section: str) -> dict[str, str]:
    rows: dict[str, str] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2:
            rows[cells[0]] = cells[1]
    return rows


def test_a_short_drop_soak_loses_nothing(triton_server: TritonServer, tmp_path: Path) -> None:
    doc = tmp_path / "reliability.md"
    doc.write_text("# Reliability\n\n## Soak\n\nkept\n", encoding="utf-8")
    argv = ["--drops", str(DROPS), "--sessions", "6", "--speed", "1", "--seed", "7"]
    argv += ["--max-seconds", "45", "--triton-url", triton_server.grpc_url]
    argv += ["--write", "--doc", str(doc)]
    assert drop_soak.main(argv) == 0
    text = doc.read_text(encoding="utf-8")
    assert "kept" in text, "the drop soak replaced another section"
    section = text[text.index(drop_soak.HEADING) :]
    assert "`python -m bench.drop_soak --drops 30 --sessions 6 --speed 1 --seed 7" in section
    assert "127.0.0.1" not in section, "a temporary address went into the doc"
    rows = _figures(section)
    for figure in ("resume failures", "losses (seqs skipped)", "duplicates (seq or event_id)"):
        assert rows[figure] == "0", (figure, rows[figure])
    assert rows["terminals missing / extra"] == "0 / 0"
    assert rows["responses of the wrong length / not completed"] == "0 / 0"
    assert rows["other errors, hangs"] == "0, 0"
    drops = rows["drops"]
    assert drops.startswith(f"{DROPS} ("), drops
    listed = drops[drops.index("(") + 1 : -1].split(", ")
    kinds = {k: int(n) for k, n in (part.split() for part in listed)}
    assert set(kinds) == set(drop_clients.KINDS) and sum(kinds.values()) == DROPS
    # Which slot takes the last cuts depends on timing; most kinds show in any run.
    assert sum(1 for n in kinds.values() if n) >= 3, kinds
    assert "- Verdict: held." in section


def _event(seq: int, kind: str = "x", rid: str = "", event_id: str = "") -> drop_checks.Event:
    response = drop_checks._Response(id=rid, status="completed") if "response." in kind else None
    if response is not None and kind == "response.done":
        response.usage = drop_checks._Usage(output_tokens=1)
    return drop_checks.Event(
        type=kind,
        server_event_seq=seq,
        event_id=event_id or f"evt_{seq}",
        response=response,
        response_id=rid or None,
    )


def test_the_checks_see_a_gap_a_repeat_and_a_terminal_too_many_or_missing() -> None:
    # The soak's verdict is only as good as these: each fault must be counted.
    log = drop_checks.Log(asked_tokens=1)
    assert log.take(_event(1))
    assert log.take(_event(3))  # 2 never came
    assert not log.take(_event(3))  # sent again
    assert log.take(_event(4, event_id="evt_1"))  # an event id used twice
    assert log.take(_event(5, "response.created", "r1"))
    assert log.take(_event(6, "response.output_audio.delta", "r1"))
    assert log.take(_event(7, "response.done", "r1"))
    assert log.take(_event(8, "response.done", "r1"))  # a second terminal
    assert log.take(_event(9, "response.created", "r2"))  # and none for this one
    assert log.take(_event(10, "response.done", "r3"))  # a terminal of nothing created
    assert (log.losses, log.duplicates, log.repeated_ids) == (1, 1, 1)
    assert (log.extra_terminals, log.missing_terminals, log.wrong_length) == (2, 1, 0)
    assert log.done("r1") and not log.done("r2")
    tally = drop_checks.Tally(target=0, deadline=0.0)
    tally.fold(log)
    failed = " ".join(tally.failed())
    for name in ("losses", "duplicates", "repeated_ids", "missing_terminals", "extra_terminals"):
        assert f"{name} = " in failed, name


def test_a_completed_response_short_of_its_deltas_counts() -> None:
    log = drop_checks.Log(asked_tokens=2)
    log.take(_event(1, "response.created", "r1"))
    log.take(_event(2, "response.output_audio.delta", "r1"))
    log.take(_event(3, "response.done", "r1"))  # one delta and output_tokens 1, of 2 asked
    assert log.wrong_length == 1 and log.losses == 0


def test_the_restart_checks_keep_items_and_context_and_expect_the_drain_word() -> None:
    # The restart soak's additions: its conversation check reads these, and the drain's
    # `server_restarting` is no fault there (and still one elsewhere).
    log = drop_checks.Log(expected_errors=frozenset({"server_restarting"}))
    item = drop_checks._Item(id="item_1")
    for seq, added in ((1, item), (2, drop_checks._Item(id="item_2"))):
        event = drop_checks.Event(
            type="conversation.item.added", server_event_seq=seq, event_id=f"e{seq}", item=added
        )
        assert log.take(event)
    error = drop_checks._Error(code="server_restarting")
    assert log.take(drop_checks.Event(type="error", server_event_seq=3, event_id="e3", error=error))
    context = drop_checks.Event(
        type="conversation.context", server_event_seq=4, event_id="e4", items=[item]
    )
    assert log.take(context)
    assert log.item_ids == ["item_1", "item_2"] and log.context_ids == ["item_1"]
    assert (log.error_events, log.expected_error_events) == (0, 1)
    strict = drop_checks.Log()
    strict.take(drop_checks.Event(type="error", server_event_seq=1, event_id="e1", error=error))
    assert strict.error_events == 1
    # Every repeated event id is counted, the first one told.
    for seq in (5, 6, 7):
        log.take(_event(seq, event_id="e1"))
    assert log.repeated_ids == 3 and sum("repeated" in e for e in log.errors) == 1
    tally = drop_checks.Tally(target=0, deadline=0.0)
    tally.statuses["cancelled"] += 1
    tally.resumed("moved", 0.02)
    assert tally.resumes["moved"] == 1 and tally.resume_s == {"moved": [0.02]}
    assert tally.failed() and not tally.failed(answers_may_end_early=True)

"""The fuzzer's checks catch what they claim to (fuzzing/checks.py): a fuzzer that cannot fail
proves nothing."""

from __future__ import annotations

import json
from typing import Any

from fuzzing.checks import EventChecker, SessionLog, judge
from fuzzing.inputs import FuzzInput
from fuzzing.results import FuzzStats

CHECKER = EventChecker()


def _log() -> SessionLog:
    return SessionLog(CHECKER, FuzzStats())


def _error(code: str, event_id: str | None = None, **extra: Any) -> dict[str, Any]:
    error = {"type": "invalid_request_error", "code": code, "message": "m", "event_id": event_id}
    return {"type": "error", "event_id": "event_9", "error": {**error, **extra}}


def _response(kind: str, rid: str, status: str = "completed") -> str:
    response = {"object": "realtime.response", "id": rid, "status": status, "output": []}
    return json.dumps({"type": kind, "event_id": f"event_{kind}_{rid}", "response": response})


def test_rule7_an_error_must_name_the_event_id_sent() -> None:
    inp = FuzzInput("x", "{}", "error", echo="exact", event_id="e1")
    assert judge(inp, [_error("invalid_value", "e1")]) is None
    assert "does not name the event_id" in (judge(inp, [_error("invalid_value", None)]) or "")


def test_an_error_must_not_name_an_event_id_never_sent() -> None:
    inp = FuzzInput("x", "{}", "error", echo="none")
    assert "never sent" in (judge(inp, [_error("invalid_json", "nested_decoy")]) or "")


def test_a_refused_message_must_change_nothing() -> None:
    inp = FuzzInput("x", "{}", "error", forbid=frozenset({"session.updated"}))
    answer = [_error("invalid_value"), {"type": "session.updated"}]
    assert "rejected, yet also applied" in (judge(inp, answer) or "")


def test_an_invalid_message_must_get_an_error() -> None:
    assert "no error event" in (judge(FuzzInput("x", "{}", "error"), []) or "")


def test_a_valid_message_must_get_its_reply_and_no_error() -> None:
    inp = FuzzInput("x", "{}", "reply", replies=frozenset({"conversation.context"}))
    assert judge(inp, [{"type": "conversation.context"}]) is None
    assert "no ['conversation.context']" in (judge(inp, []) or "")
    assert "refused" in (judge(inp, [_error("invalid_value")]) or "")


def test_a_tolerated_code_stands_in_for_the_expected_outcome() -> None:
    inp = FuzzInput("x", "{}", "silent", tolerated=frozenset({"rate_limit_exceeded"}))
    assert judge(inp, [_error("rate_limit_exceeded")]) is None
    assert "refused" in (judge(inp, [_error("invalid_value")]) or "")


def test_errors_must_be_well_formed() -> None:
    inp = FuzzInput("x", "{}", "any")
    assert "malformed" in (judge(inp, [_error("", None)]) or "")
    assert "malformed" in (judge(inp, [_error("x", None, type="server_error")]) or "")


def test_vad_unavailable_answers_no_client_message() -> None:
    inp = FuzzInput("x", "{}", "silent")
    assert judge(inp, [_error("vad_unavailable")]) is None


def test_schema_every_server_event_is_a_contract_event_with_an_event_id() -> None:
    log = _log()
    log.see(json.dumps({"type": "input_audio_buffer.cleared", "event_id": "event_1"}))
    assert log.problems == []
    log.see(json.dumps({"type": "input_audio_buffer.cleared"}))
    log.see(json.dumps({"type": "no.such.event", "event_id": "event_2"}))
    log.see("not json")
    assert len(log.problems) == 3, log.problems


def test_no_server_event_id_twice() -> None:
    log = _log()
    for _ in range(2):
        log.see(json.dumps({"type": "input_audio_buffer.cleared", "event_id": "event_1"}))
    assert any("sent twice" in p for p in log.problems)


def test_rule3_one_terminal_per_created_response() -> None:
    log = _log()
    log.see(_response("response.created", "resp_1", "in_progress"))
    log.see(_response("response.done", "resp_1"))
    assert log.problems == [] and log.running == []
    log.see(_response("response.done", "resp_1").replace("event_response", "event_again"))
    log.see(_response("response.done", "resp_2"))
    assert any("got 2 response.done" in p for p in log.problems)
    assert any("never created" in p for p in log.problems)


def test_rule3_refusals_agree_with_what_runs() -> None:
    log = _log()
    log.see(json.dumps(_error("conversation_already_has_active_response")))
    log.see(_response("response.created", "resp_1", "in_progress"))
    log.see(json.dumps({**_error("response_cancel_not_active"), "event_id": "event_10"}))
    assert any("every response it started is done" in p for p in log.problems)
    assert any("has not ended" in p for p in log.problems)


def test_rule2_no_delta_after_response_done() -> None:
    log = _log()
    log.see(_response("response.created", "resp_1", "in_progress"))
    log.see(_response("response.done", "resp_1", "cancelled"))
    delta = {
        "type": "response.output_text.delta",
        "event_id": "event_5",
        "response_id": "resp_1",
        "item_id": "item_1",
        "output_index": 0,
        "content_index": 0,
        "delta": "late",
    }
    log.see(json.dumps(delta))
    assert any("after its response.done (rule 2)" in p for p in log.problems), log.problems

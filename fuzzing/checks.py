"""The invariants every server event, and every answer to a client message, must satisfy.

Rules (each failure names the one it broke):
- Schema: every server event is one JSON object that decodes as the contract's server event
  (`orchestrator.protocol.server`), has a non-empty `event_id`, and, where the openai SDK
  knows its type, validates as the SDK's model too.
- Event ids: no server `event_id` is sent twice in a session.
- Sequence (v2): where events carry `server_event_seq` (the live server; the in-memory runner
  has no session link), each is the last one's plus 1, from 1: no gap, no repeat.
- Rule 3: every `response.done` names a response that was created, at most once each;
  `conversation_already_has_active_response` only while one of them has not ended, and
  `response_cancel_not_active` only when all have.
- Rule 2: no delta of a response after its `response.done`.
- Answers (`judge`): every error is an `invalid_request_error` with a code and a message, and
  carries the `event_id` its input says it must (`echo`); an invalid message gets an error
  and nothing it forbids; a valid one gets no error and one of its replies (or a tolerated
  error code); a `silent` one gets no error. `vad_unavailable` answers no client message.

Events are judged as JSON text, the way a client sees them; runners pass each one through
`SessionLog.see` in the order the server decided, so what the log holds is exactly what the
server knew when it answered.
"""

from __future__ import annotations

import json
import typing
from collections import Counter
from typing import Any

import msgspec
import pydantic
from openai.types.realtime import RealtimeServerEvent

from fuzzing.inputs import ASYNC_ERROR_CODES, FuzzInput, Json, Known, short
from fuzzing.results import FuzzStats
from orchestrator.protocol import server as se


class EventChecker:
    """Every server event against the contract's schema and, where it knows it, the SDK's."""

    def __init__(self) -> None:
        self._ours = msgspec.json.Decoder(se.ServerEvent)
        self._sdk: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(RealtimeServerEvent)
        self._sdk_types = _sdk_event_types()

    def check(self, raw: str) -> tuple[dict[str, Json], str | None]:
        """The event as JSON, and what is wrong with it (None: nothing)."""
        try:
            event: dict[str, Json] = json.loads(raw)
        except ValueError as error:
            return {}, f"server sent invalid JSON: {error}"
        if not isinstance(event, dict):
            return {}, "server sent a non-object"
        try:
            self._ours.decode(raw)
        except msgspec.ValidationError as error:
            return event, f"not a contract server event: {error}"
        if not isinstance(event.get("event_id"), str) or not event["event_id"]:
            return event, "server event without event_id"
        if event.get("type") in self._sdk_types:
            try:
                self._sdk.validate_python(event)
            except pydantic.ValidationError as error:
                return event, f"the openai SDK rejects it: {error}"
        return event, None


def _sdk_event_types() -> frozenset[str]:
    # Annotated[Union[...], PropertyInfo(discriminator="type")]
    union = typing.get_args(RealtimeServerEvent)[0]
    names: set[str] = set()
    for model in typing.get_args(union):
        fields = getattr(model, "model_fields", {})
        annotation = fields["type"].annotation if "type" in fields else None
        names.update(getattr(annotation, "__args__", ()))
    return frozenset(names)


class SessionLog:
    """One session's server events as a client saw them, and the problems found in them."""

    def __init__(self, checker: EventChecker, stats: FuzzStats) -> None:
        self.checker = checker
        self.stats = stats
        self.known = Known()
        self.created: list[str] = []
        self.done: Counter[str] = Counter()
        self.event_ids: set[str] = set()
        self.last_seq = 0
        self.problems: list[str] = []

    @property
    def running(self) -> list[str]:
        """Responses created and not yet done."""
        return [r for r in self.created if not self.done[r]]

    def see(self, raw: str) -> dict[str, Json]:
        """One server event as sent: checked, remembered, and returned as JSON."""
        self.stats.server_events += 1
        event, problem = self.checker.check(raw)
        if problem is not None:
            self.problems.append(f"{problem}: {short(raw, 600)}")
        self._track(event)
        return event

    def _track(self, event: dict[str, Json]) -> None:
        kind = event.get("type")
        self.stats.events_by_type[str(kind)] += 1
        event_id = event.get("event_id")
        if isinstance(event_id, str):
            if event_id in self.event_ids:
                self.problems.append(f"event_id {event_id!r} sent twice")
            self.event_ids.add(event_id)
        seq = event.get("server_event_seq")
        if seq is not None:
            if seq != self.last_seq + 1:
                self.problems.append(f"server_event_seq {seq} after {self.last_seq}")
            self.last_seq = seq if isinstance(seq, int) else self.last_seq
        if kind == "session.created":
            self.known.session_id = str(event.get("session", {}).get("id", self.known.session_id))
        elif kind in ("conversation.item.added", "response.output_item.added"):
            item_id = event.get("item", {}).get("id")
            if isinstance(item_id, str):
                self.known.last_item = item_id
        elif kind == "response.created":
            rid = str(event.get("response", {}).get("id"))
            self.created.append(rid)
            self.known.last_response = rid
            self.stats.responses += 1
        elif kind == "response.done":
            rid = str(event.get("response", {}).get("id"))
            self.done[rid] += 1
            if rid not in self.created:
                self.problems.append(f"response.done for {rid}, which was never created")
            elif self.done[rid] > 1:
                self.problems.append(f"response {rid} got {self.done[rid]} response.done (rule 3)")
        elif kind == "error":
            code = str(event.get("error", {}).get("code"))
            self.stats.errors_by_code[code] += 1
            # Events arrive in the order the server decided, so what this client has seen is
            # exactly what the server knew when it refused.
            running = self.running
            if code == "conversation_already_has_active_response" and not running:
                self.problems.append(f"{code}, but every response it started is done")
            if code == "response_cancel_not_active" and running:
                self.problems.append(f"{code}, but {running} has not ended")
        elif isinstance(kind, str) and kind.startswith("response.") and kind.endswith(".delta"):
            of = event.get("response_id")
            if isinstance(of, str) and self.done[of]:
                self.problems.append(f"{kind} of {of} after its response.done (rule 2)")


def is_error_named(event: dict[str, Json], event_id: str) -> bool:
    return event.get("type") == "error" and event.get("error", {}).get("event_id") == event_id


def judge(inp: FuzzInput, events: list[dict[str, Json]]) -> str | None:
    """What is wrong with `events` as the answer to `inp` (None: nothing)."""
    errors = [
        e["error"]
        for e in events
        if e.get("type") == "error" and e.get("error", {}).get("code") not in ASYNC_ERROR_CODES
    ]
    types = {str(e.get("type")) for e in events}
    for error in errors:
        if (
            error.get("type") != "invalid_request_error"
            or not error.get("code")
            or not error.get("message")
        ):
            return f"malformed error {error}"
        if inp.echo == "exact" and error.get("event_id") != inp.event_id:
            sent = short(inp.event_id or "")
            return f"error does not name the event_id sent ({sent}): {short(str(error))}"
        if inp.echo == "exact_or_none" and error.get("event_id") not in (inp.event_id, None):
            sent = short(inp.event_id or "")
            return f"error names another event_id than the one sent ({sent}): {short(str(error))}"
        if inp.echo == "none" and error.get("event_id") is not None:
            return f"error names an event_id that was never sent: {short(str(error))}"
    codes = {str(e.get("code")) for e in errors}
    if errors and codes <= inp.tolerated:
        return None
    if inp.expect == "error":
        if not errors:
            return "no error event for an invalid message"
        if types & inp.forbid:
            return f"rejected, yet also applied: {sorted(types & inp.forbid)}"
    elif inp.expect == "reply":
        if errors:
            return f"a valid message was refused: {sorted(codes)} {short(str(errors[0]))}"
        if not types & inp.replies:
            return f"no {sorted(inp.replies)} for a valid message"
    elif inp.expect == "reply_or_error":
        if not errors and not types & inp.replies:
            return f"neither an error nor {sorted(inp.replies)}"
    elif inp.expect == "silent" and errors:
        return f"a valid message was refused: {sorted(codes)} {short(str(errors[0]))}"
    return None

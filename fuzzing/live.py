"""The socket runner: scripts sent to a live realtime server over real WebSockets.

Rules (besides `fuzzing.checks`, which judges every event and answer):
- Answers are told apart by a probe: after each input the runner sends a retrieve of an item
  that never exists with a unique `event_id`; its `item_retrieve_invalid_item_id` error marks
  where that input's answers end, so each answer is judged against the input that caused it,
  and a hang shows up as a probe that never comes back (`timeout_s`).
- The connection survives every input (no close, no 1011), except a non-UTF-8 text frame,
  which must end it with 1007 or by dropping TCP (RFC 6455 allows both).
- At the end every response still running is cancelled and must end (rule 3), a plain
  `session.update` must still be answered, and the client's close must be a clean 1000.

The in-memory runner (`fuzzing.in_memory`) runs most inputs; this one keeps the transport,
the actor and the real models honest with fewer.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any, Final

from websockets.exceptions import ConnectionClosed, WebSocketException
from websockets.sync.client import ClientConnection, connect

from fuzzing.checks import EventChecker, SessionLog, is_error_named, judge
from fuzzing.inputs import FuzzInput, Json, Script, substitute
from fuzzing.results import Failure, FuzzStats

PROBE_ITEM: Final = "fuzz_probe_never_created"

_Fail = Callable[[str, str, int | None], None]


class _Closed(Exception):
    """The server ended the socket: its close code, or None when it sent no close frame."""

    def __init__(self, code: int | None, reason: str) -> None:
        super().__init__(code, reason)
        self.code = code
        self.reason = reason

    @classmethod
    def of(cls, closed: ConnectionClosed) -> _Closed:
        if closed.rcvd is None:
            return cls(None, "")
        return cls(closed.rcvd.code, closed.rcvd.reason)


class _Broken(Exception):
    """An invariant broke; the session cannot be judged further."""


class _Socket:
    """One live socket whose every server event goes through the session's log."""

    def __init__(self, ws: ClientConnection, log: SessionLog, timeout_s: float) -> None:
        self.ws = ws
        self.log = log
        self.timeout_s = timeout_s

    def send(self, frame: str | bytes, *, text: bool | None = None) -> None:
        try:
            self.ws.send(frame, text=text)
        except ConnectionClosed as closed:
            raise _Closed.of(closed) from None

    def recv(self, timeout_s: float) -> dict[str, Json]:
        try:
            raw = self.ws.recv(timeout=timeout_s)
        except ConnectionClosed as closed:
            raise _Closed.of(closed) from None
        if not isinstance(raw, str):
            self.log.problems.append("server sent a binary frame")
            raw = raw.decode("utf-8", "replace")
        return self.log.see(raw)

    def until(self, match: Callable[[dict[str, Json]], bool], what: str) -> list[dict[str, Json]]:
        """Events up to and including the first that `match`es; _Broken on a hang."""
        got: list[dict[str, Json]] = []
        deadline = time.monotonic() + self.timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise _Broken(f"no {what} within {self.timeout_s:.0f} s (a hang)")
            try:
                event = self.recv(left)
            except TimeoutError:
                continue
            got.append(event)
            if match(event):
                return got


def _send_json(socket: _Socket, event: dict[str, Any]) -> None:
    socket.send(json.dumps(event))


class LiveRunner:
    """Runs scripts against a live server; every broken invariant becomes a `Failure`."""

    def __init__(self, url: str, *, timeout_s: float = 30.0) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self.stats = FuzzStats(runner="live server")
        self.checker = EventChecker()
        self._probes = 0

    def run(self, script: Script) -> list[Failure]:
        failures: list[Failure] = []
        seen: list[str] = []

        def fail(invariant: str, detail: str, index: int | None) -> None:
            failures.append(Failure(invariant, detail, script, index, list(seen)))

        self.stats.sessions += 1
        index: int | None = None
        try:
            with connect(
                self.url, max_size=None, open_timeout=10, close_timeout=5, compression=None
            ) as ws:
                socket = _Socket(ws, SessionLog(self.checker, self.stats), self.timeout_s)
                first = socket.recv(self.timeout_s)
                if first.get("type") != "session.created":
                    fail(
                        "handshake",
                        f"first event is {first.get('type')}, not session.created",
                        None,
                    )
                for index, inp in enumerate(script.inputs):
                    seen.clear()
                    if not self._send(socket, inp, index, seen, fail):
                        break
                else:
                    index = None
                    self._finish(socket, seen, fail)
                for problem in socket.log.problems:
                    fail("server events", problem, index)
        except _Closed as closed:
            self.stats.closes[str(closed.code)] += 1
            detail = f"the server closed the socket: code {closed.code} {closed.reason!r}"
            fail("connection kept on bad input", detail, index)
        except _Broken as broken:
            fail("no hang", str(broken), index)
        except (OSError, TimeoutError, WebSocketException) as error:
            fail("connection", f"{type(error).__name__}: {error}", index)
        self.stats.failures.extend(failures)
        return failures

    def _send(
        self, socket: _Socket, inp: FuzzInput, index: int, seen: list[str], fail: _Fail
    ) -> bool:
        """Send one input and judge its answer; False when the socket is gone (as it must be)."""
        frame = substitute(inp.frame, inp.step, socket.log.known)
        self.stats.inputs += 1
        self.stats.by_kind[inp.kind] += 1
        socket.send(frame, text=True if inp.text_bytes else None)
        if inp.text_bytes:
            # RFC 6455 8.1: invalid UTF-8 in a text frame fails the connection, with 1007 or
            # by just closing TCP (the RFC allows both); 1011 would be a server bug.
            try:
                socket.until(lambda e: False, "close after a non-UTF-8 text frame")
            except _Closed as closed:
                self.stats.closes[str(closed.code)] += 1
                if closed.code not in (1007, None):
                    fail("close code", f"a non-UTF-8 text frame got close {closed.code}", index)
                return False
            return False  # until() raised _Broken otherwise
        self._probes += 1
        probe = f"probe-{self._probes}"
        retrieve = {"type": "conversation.item.retrieve", "item_id": PROBE_ITEM, "event_id": probe}
        _send_json(socket, retrieve)
        events = socket.until(lambda e: is_error_named(e, probe), f"answer to probe {probe}")
        seen.extend(str(e.get("type")) for e in events)
        problem = judge(inp, events[:-1])
        if problem is not None:
            fail("answer", problem, index)
        if events[-1].get("error", {}).get("code") != "item_retrieve_invalid_item_id":
            fail("session keeps working", f"probe answered with {events[-1]}", index)
        return True

    def _finish(self, socket: _Socket, seen: list[str], fail: _Fail) -> None:
        """Cancel what still runs (every response must end exactly once), then check the
        session still takes a plain `session.update`."""
        seen.clear()
        deadline = time.monotonic() + self.timeout_s
        cancelled: set[str] = set()
        while True:
            running = socket.log.running
            if not running:
                break
            for rid in running:
                if rid not in cancelled:
                    cancelled.add(rid)
                    cancel = {"type": "response.cancel", "response_id": rid, "event_id": "drain"}
                    _send_json(socket, cancel)
            left = deadline - time.monotonic()
            if left <= 0:
                fail("one terminal per response (rule 3)", f"no response.done for {running}", None)
                return
            try:
                seen.append(str(socket.recv(left).get("type")))
            except TimeoutError:
                continue
        final = {
            "type": "session.update",
            "session": {"instructions": "still there?"},
            "event_id": "final",
        }
        _send_json(socket, final)
        events = socket.until(
            lambda e: e.get("type") == "session.updated" or is_error_named(e, "final"),
            "session.updated",
        )
        seen.extend(str(e.get("type")) for e in events)
        if events[-1].get("type") != "session.updated":
            fail("session keeps working", f"the closing session.update got {events[-1]}", None)
        socket.ws.close()
        self.stats.closes[str(socket.ws.close_code)] += 1
        if socket.ws.close_code not in (1000, None):
            fail("clean close", f"closing the session got code {socket.ws.close_code}", None)

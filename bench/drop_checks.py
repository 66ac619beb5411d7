"""The drop soak's checker: one session's sequenced events, judged as they are processed.

Pure: no socket, no file; a session feeds `Log.take` every sequenced event in the order it
read them, over all of its connections, and `Tally.fold` adds its figures up when it ends.

Rules (`Log`), on the log of sequenced events a session processed:
- `server_event_seq` contiguous from 1: a seq past the next one is a loss (counted by the seqs
  skipped, and the event still taken), one at or below the last is a duplicate (counted, and
  not processed: `take` answers False);
- `event_id`s unique: one seen before is a repeated id (each counted, the first one told);
- every `response.created` gets exactly one `response.done`: a second `response.created` or
  `response.done` of one response, or a `response.done` of none created, is an extra terminal;
  one created and never done when the session ends is a missing terminal;
- a `completed` response has exactly T audio deltas and `output_tokens` T, T being the
  `max_output_tokens` of the `response.create` it answers (`Log.asked_tokens`, set before the
  request); otherwise it is of the wrong length (a response counted as an extra terminal is
  not also judged for its length);
- a sequenced `error` is an unexpected error, but for the codes the session expects
  (`Log.expected_errors`: the restart soak's `server_restarting`, the drain's word before its
  close 4001), which are counted apart;
- the conversation's item ids (`conversation.item.added`) are kept in order, and the last
  `conversation.context` answer's item ids, for the restart soak's "conversation kept".
Every fault is also kept as a line of text (the tally keeps the first `MAX_FAILURES_KEPT`,
with the last events of each faulty session).

`Tally` is every session's figures added up, and the run's budget of cuts: a run makes exactly
`target` of them (`may_drop` takes one) unless its deadline passes first. `failed` names every
figure that is not zero, a budget not spent and responses not completed (in the restart soak,
`answers_may_end_early`: an answer a drain cut or a takeover ended is reported, not a fault).
The restart soak's own figures (bench/restart_soak.py) are kept there too: resume times by
kind, turn latencies, conversations kept or not.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

import msgspec

MAX_FAILURES_KEPT = 40


class _Session(msgspec.Struct):
    id: str = ""


class _Usage(msgspec.Struct):
    output_tokens: int | None = None


class _Response(msgspec.Struct):
    id: str = ""
    status: str | None = None
    usage: _Usage | None = None


class _Error(msgspec.Struct):
    code: str | None = None
    message: str = ""


class _Item(msgspec.Struct):
    id: str = ""


class Event(msgspec.Struct):
    """What the soak reads of a server event; audio payloads are skipped by the decoder."""

    type: str
    server_event_seq: int | None = None
    event_id: str = ""
    response: _Response | None = None
    response_id: str | None = None
    session: _Session | None = None
    session_id: str | None = None
    resume_token: str | None = None
    replayed_from_seq: int | None = None
    error: _Error | None = None
    item: _Item | None = None  # conversation.item.added
    items: list[_Item] | None = None  # conversation.context


decode_event = msgspec.json.Decoder(Event).decode


@dataclass
class Log:
    """One session's sequenced events as it processed them, over all its connections."""

    session_id: str = ""
    entries: list[tuple[int, str, str]] = field(default_factory=list)  # (seq, event_id, type)
    last_seq: int = 0
    ids: set[str] = field(default_factory=set)
    losses: int = 0
    duplicates: int = 0
    repeated_ids: int = 0
    created: dict[str, int] = field(default_factory=dict)  # response id -> response.done seen
    deltas: Counter[str] = field(default_factory=Counter)
    tokens: dict[str, int] = field(default_factory=dict)  # response id -> T asked
    extra_terminals: int = 0
    wrong_length: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    error_events: int = 0
    errors: list[str] = field(default_factory=list)
    # The T of the response.create sent last: the next response.created takes it.
    asked_tokens: int = 0
    # Error codes this session expects (not faults), and how many of them came.
    expected_errors: frozenset[str] = frozenset()
    expected_error_events: int = 0
    # The conversation's item ids as `conversation.item.added` named them, in order, and the
    # ids of the last `conversation.context` (None: never asked).
    item_ids: list[str] = field(default_factory=list)
    context_ids: list[str] | None = None

    def take(self, event: Event) -> bool:
        """Checks and logs one sequenced event; False for a duplicate (not processed)."""
        seq = event.server_event_seq
        assert seq is not None
        if seq <= self.last_seq:
            self.duplicates += 1
            self.errors.append(f"duplicate seq {seq} ({event.type}) after {self.last_seq}")
            return False
        if seq != self.last_seq + 1:
            self.losses += seq - self.last_seq - 1
            self.errors.append(
                f"seqs {self.last_seq + 1}..{seq - 1} missing (next came {seq}: {event.type})"
            )
        self.last_seq = seq
        self.entries.append((seq, event.event_id, event.type))
        if event.event_id in self.ids:
            self.repeated_ids += 1
            if self.repeated_ids == 1:  # the first one told; a run of them would crowd the rest
                self.errors.append(f"event_id {event.event_id} repeated at seq {seq} (and later)")
        self.ids.add(event.event_id)
        kind = event.type
        if kind == "response.created" and event.response is not None:
            rid = event.response.id
            if rid in self.created:
                self.extra_terminals += 1
                self.errors.append(f"response.created twice for {rid} (seq {seq})")
            self.created[rid] = 0
            self.tokens[rid] = self.asked_tokens
        elif kind == "response.output_audio.delta":
            self.deltas[event.response_id or ""] += 1
        elif kind == "response.done" and event.response is not None:
            self._done(event.response, seq)
        elif kind == "conversation.item.added" and event.item is not None:
            if event.item.id not in self.item_ids:
                self.item_ids.append(event.item.id)
        elif kind == "conversation.context":
            self.context_ids = [item.id for item in event.items or ()]
        elif kind == "error":
            code = event.error.code if event.error is not None else None
            if code in self.expected_errors:
                self.expected_error_events += 1
            else:
                self.error_events += 1
                self.errors.append(f"error {code} at seq {seq}")
        return True

    def _done(self, response: _Response, seq: int) -> None:
        rid = response.id
        if self.created.get(rid, 1):  # no response.created, or a second response.done
            self.extra_terminals += 1
            self.errors.append(f"response.done for {rid} at seq {seq} not after one created")
            self.created[rid] = self.created.get(rid, 0) + 1
            return  # counted once, as what it is: not also as a response of the wrong length
        self.created[rid] = 1
        status = response.status or "?"
        self.statuses[status] += 1
        tokens = response.usage.output_tokens if response.usage is not None else None
        want = self.tokens.get(rid)
        if status == "completed" and (self.deltas[rid] != want or tokens != want):
            self.wrong_length += 1
            self.errors.append(
                f"{rid}: {self.deltas[rid]} audio deltas, output_tokens {tokens}, asked {want}"
            )

    def done(self, rid: str) -> bool:
        return self.created.get(rid, 0) >= 1

    @property
    def missing_terminals(self) -> int:
        return sum(1 for dones in self.created.values() if dones == 0)


@dataclass
class Tally:
    """Every session's figures, added up."""

    target: int
    deadline: float
    drops: Counter[str] = field(default_factory=Counter)
    # Cuts decided (some still to be made): a run makes exactly `target` of them.
    planned: int = 0
    resumes: Counter[str] = field(default_factory=Counter)  # "running" / "ended"
    after_resume: Counter[str] = field(default_factory=Counter)  # events, by the same key
    replay_cuts_confirmed: int = 0
    resume_failures: int = 0
    sessions: int = 0
    responses: int = 0
    events: int = 0
    losses: int = 0
    duplicates: int = 0
    repeated_ids: int = 0
    missing_terminals: int = 0
    extra_terminals: int = 0
    wrong_length: int = 0
    unexpected: int = 0
    hangs: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    # The restart soak's figures (bench/restart_soak.py):
    # seconds from a close (or a cut) to `session.resumed`, by the resume's kind;
    resume_s: dict[str, list[float]] = field(default_factory=dict)
    # (monotonic time of response.done, seconds from response.create to it), per turn;
    turns: list[tuple[float, float]] = field(default_factory=list)
    # new connections refused or cut before `session.resumed` (tried again), and turns sent
    # again because the connection that carried them was closed before they were answered;
    connect_retries: int = 0
    resent: int = 0
    # sessions whose `conversation.context` held every item they saw, or not (a session that
    # never got to ask counts as not kept), and the items checked.
    kept: int = 0
    not_kept: int = 0
    items_checked: int = 0
    items_before_restart: int = 0
    expected_errors: int = 0

    @property
    def dropped(self) -> int:
        return sum(self.drops.values())

    def stop(self) -> bool:
        return self.planned >= self.target or time.monotonic() > self.deadline

    def may_drop(self) -> bool:
        """Takes one cut from the budget, if any is left."""
        if self.stop():
            return False
        self.planned += 1
        return True

    def fail(self, text: str) -> None:
        if len(self.failures) < MAX_FAILURES_KEPT:
            self.failures.append(text)

    def fold(self, log: Log) -> None:
        self.sessions += 1
        self.events += len(log.entries)
        self.responses += len(log.created)
        self.losses += log.losses
        self.duplicates += log.duplicates
        self.repeated_ids += log.repeated_ids
        self.missing_terminals += log.missing_terminals
        self.extra_terminals += log.extra_terminals
        self.wrong_length += log.wrong_length
        self.unexpected += log.error_events
        self.expected_errors += log.expected_error_events
        self.statuses.update(log.statuses)
        for text in log.errors:
            self.fail(f"{log.session_id}: {text}")
        if log.errors:
            tail = ", ".join(f"{s}:{t}" for s, _, t in log.entries[-12:])
            self.fail(f"{log.session_id}: last events {tail}")

    def resumed(self, kind: str, seconds: float) -> None:
        self.resumes[kind] += 1
        self.resume_s.setdefault(kind, []).append(seconds)

    def failed(self, *, answers_may_end_early: bool = False) -> list[str]:
        found = []
        for name in ("losses", "duplicates", "repeated_ids", "missing_terminals",
                     "extra_terminals", "wrong_length", "resume_failures", "unexpected",
                     "hangs", "not_kept"):  # fmt: skip
            if getattr(self, name):
                found.append(f"{name} = {getattr(self, name)}")
        if self.dropped < self.target:
            found.append(f"only {self.dropped} of {self.target} drops before the deadline")
        bad = {k: v for k, v in self.statuses.items() if k != "completed"}
        if bad and not answers_may_end_early:
            found.append(f"responses not completed: {bad}")
        return found

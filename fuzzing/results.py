"""What a fuzz run found: every broken invariant as a `Failure`, and counts of what was sent.

Rules:
- A failure names the invariant it broke, the input that broke it (None: the session as a
  whole), the server events that answered it and the whole session, so it reproduces by hand.
- Counts are per run, across sessions; a runner adds to them, never resets them.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from fuzzing.inputs import Script, short


@dataclass
class Failure:
    invariant: str
    detail: str
    script: Script
    index: int | None = None  # which input of the script; None: the session as a whole
    seen: list[str] = field(default_factory=list)

    def report(self) -> str:
        lines = [f"INVARIANT BROKEN: {self.invariant}: {self.detail}"]
        if self.index is not None:
            inp = self.script.inputs[self.index]
            lines.append(f"input {self.index} ({inp.kind}, expect {inp.expect}, echo {inp.echo}):")
            lines.append(f"  {short(inp.frame, 4000)}")
        lines.append("server events answering it: " + ", ".join(self.seen[-20:]))
        lines.append(f"the session: {self.script!r}")
        return "\n".join(lines)


@dataclass
class FuzzStats:
    runner: str = "live server"
    inputs: int = 0
    sessions: int = 0
    server_events: int = 0
    responses: int = 0
    # In memory only: what the stand-ins fed the core (by type), and the inputs only a socket
    # can judge (a non-UTF-8 text frame never reaches the session).
    fed: Counter[str] = field(default_factory=Counter)
    transport_only: int = 0
    by_kind: Counter[str] = field(default_factory=Counter)
    errors_by_code: Counter[str] = field(default_factory=Counter)
    events_by_type: Counter[str] = field(default_factory=Counter)
    closes: Counter[str] = field(default_factory=Counter)
    failures: list[Failure] = field(default_factory=list)

    def summary(self) -> str:
        lines = [
            f"{self.runner}: inputs sent: {self.inputs} in {self.sessions} sessions; "
            f"{self.server_events} server events; {self.responses} responses started",
        ]
        if self.fed or self.transport_only:
            lines.append(f"inputs left to the socket runner: {self.transport_only}")
            lines.append("fed to the core by its stand-in I/O:")
            lines.extend(f"  {n:7d}  {k}" for k, n in sorted(self.fed.items()))
        lines += [
            "inputs by kind:",
            *(f"  {n:7d}  {k}" for k, n in sorted(self.by_kind.items())),
            "server events by type:",
            *(f"  {n:7d}  {k}" for k, n in sorted(self.events_by_type.items())),
            "errors by code:",
            *(f"  {n:7d}  {k}" for k, n in sorted(self.errors_by_code.items())),
        ]
        if self.closes:
            lines.append("socket closes by code:")
            lines.extend(f"  {n:7d}  {k}" for k, n in sorted(self.closes.items()))
        lines.append(f"invariant failures: {len(self.failures)}")
        return "\n".join(lines)

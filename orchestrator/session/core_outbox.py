"""What one step of the session core says, and the ids it hands out: one owner for each.

`SessionCore` (orchestrator/session/core.py) is composed of parts that each own their state:
`Turns` (core_turns.py), `History` (core_history.py) and `Tools` (core_tools.py). What more
than one of them needs is owned here, once, and changed only through a method:

1. `Outbox` collects one step's server events, actions and notes, in the order they were
   decided, and hands them over as one `Step` (`flush`); nothing else buffers output.
2. A client error names the client event being handled (rule 7): the core sets `event_id`
   for the length of one client event, and `error` uses it unless told otherwise.
3. `Ids` hands out item and response ids (never one the conversation holds: a client may pick
   ours) and timer tokens (one sequence for every timer, so a stale expiry never matches).
Pure: no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Literal

from orchestrator.protocol import server as se
from orchestrator.protocol.errors import ItemAction, unknown_item
from orchestrator.session.actions import Action
from orchestrator.session.core_types import CoreErrorCode, Note, Step
from orchestrator.session.envelope import Envelope

__all__ = ["Ids", "Outbox"]


class Outbox:
    def __init__(self, env: Envelope) -> None:
        self.env = env
        self._events: list[se.ServerEvent] = []
        self._actions: list[Action] = []
        self._notes: list[Note] = []
        # The client event being handled (rule 7), set by the core for one client event.
        self.event_id: str | None = None

    def send(self, event: se.ServerEvent) -> None:
        self._events.append(event)

    def send_all(self, events: Iterable[se.ServerEvent]) -> None:
        self._events.extend(events)

    def act(self, action: Action | None) -> None:
        if action is not None:
            self._actions.append(action)

    def act_all(self, actions: Iterable[Action]) -> None:
        self._actions.extend(actions)

    def note(self, note: Note) -> None:
        self._notes.append(note)

    def error(
        self,
        code: CoreErrorCode,
        message: str,
        param: str | None = None,
        *,
        event_id: str | Literal["client"] | None = "client",
    ) -> None:
        # By default the error names the client event being handled (rule 7).
        eid = self.event_id if event_id == "client" else event_id
        self._events.append(self.env.error(code, message, param, eid))

    def item_not_found(self, item_id: str, action: ItemAction, param: str = "item_id") -> None:
        code, message = unknown_item(action, item_id)  # OpenAI's code for each event
        self.error(code, message, param)

    def flush(self) -> Step:
        step = Step(tuple(self._events), tuple(self._actions), tuple(self._notes))
        self._events, self._actions, self._notes = [], [], []
        return step


class Ids:
    def __init__(self, session_id: str, taken: Callable[[str], bool]) -> None:
        self._session_id = session_id
        self._taken = taken
        self.count = 0  # ids handed out so far (a takeover goes on from another's count)
        self._tokens = 0

    def new(self, prefix: str) -> str:
        # Clients may pick any item id, ours included (they are easy to predict): skip taken ones.
        while True:
            self.count += 1
            candidate = f"{prefix}_{self._session_id}_{self.count}"
            if not self._taken(candidate):
                return candidate

    def next_token(self) -> int:
        """The timer token the next `token()` will hand out (not taken yet)."""
        return self._tokens + 1

    def token(self) -> int:
        self._tokens += 1
        return self._tokens

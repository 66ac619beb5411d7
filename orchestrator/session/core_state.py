"""The state every part of the session core shares, and its small helpers.

`SessionCore` (orchestrator/session/core.py) is one object assembled from a few parts, each a module
about one concept: turn taking (orchestrator/session/core_turns.py: VAD, end of turn, preemptive
responses, pause mode, timers), items and transcripts (orchestrator/session/core_items.py), and the
responses and the routing of chart effects (core.py itself). This base holds what they all
read and write, the helpers that build the step (events, actions, notes) and the signatures
of the methods one part calls in another; no rule lives here.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from orchestrator.protocol import client as ce
from orchestrator.protocol import items as wire
from orchestrator.protocol import server as se
from orchestrator.protocol.errors import ItemAction, unknown_item
from orchestrator.protocol.session_config import (
    Interruption,
    SessionConfig,
)
from orchestrator.session.actions import (
    Action,
    InferenceRequest,
    StartBackend,
)
from orchestrator.session.audio import OutputAudio
from orchestrator.session.core_types import (
    CoreConfig,
    CoreErrorCode,
    Note,
    Step,
)
from orchestrator.session.envelope import CallOutput, Envelope
from orchestrator.session.history import conversation as conv
from orchestrator.session.history.fencing import ResponseFence
from orchestrator.session.history.playback import PlaybackLedger
from orchestrator.session.inputs import (
    BackendEvent,
    TranscriptReady,
)
from orchestrator.session.transcript_wait import TranscriptWait
from orchestrator.session.turns.end_of_turn import EndOfTurn
from orchestrator.session.turns.overlap import OverlapStep, OverlapTracker
from orchestrator.session.turns.preemption import Preemption
from orchestrator.session.turns.user_input import UserInput
from statecharts.response import ResponseChart
from statecharts.session import SessionChart

__all__ = ["CoreState", "LiveCall", "LiveResponse"]


@dataclass(slots=True)
class LiveCall:
    """The function call a response is making: its output item and its arguments so far."""

    out: CallOutput
    arguments: list[str] = field(default_factory=list)


@dataclass(slots=True)
class LiveResponse:
    """A response the session still tracks: generating, or generated and not yet heard.

    `item_id` is its message item (and its ledger entry's); `message` is False for a reply
    that is a call alone, whose message item is never announced nor opened."""

    chart: ResponseChart
    seq: int
    item_id: str
    audio: bool
    request: InferenceRequest
    message: bool = True
    # False for an out-of-band response (`conversation: "none"`): its items are announced as
    # the response's output only, never as conversation items, and never enter history.
    in_conversation: bool = True
    # The message item as `response.output_item.done` sent it when a call closed it early.
    message_closed: wire.MessageItem | None = None
    call: LiveCall | None = None
    text_parts: list[str] = field(default_factory=list)
    audio_ms: int = 0
    output_tokens: int = 0
    encoder: OutputAudio | None = None
    # Text came without the audio it accompanies (the pipeline cannot align it): heard only
    # with the whole reply, dropped from a cut (docs/protocol.md rule 5).
    unaligned_text: bool = False


class CoreState:
    def __init__(self, session_id: str, config: CoreConfig | None = None) -> None:
        self.config = config or CoreConfig()
        self.session_id = session_id
        self.settings = SessionConfig()
        self.chart = SessionChart()
        self.conversation = conv.Conversation(self.config.limits)
        # OpenAI's basis until the client acknowledges playback (statecharts/session.py).
        self.ledger = PlaybackLedger(self.config.playback_entries, basis="generated")
        self.fence = ResponseFence()
        self.env = Envelope(session_id)
        self.live: OrderedDict[str, LiveResponse] = OrderedDict()
        self.input = UserInput(self.config.max_input_buffer_bytes, self.settings.turn_detection)
        self._ids = 0
        self._pending_item_id: str | None = None
        self._events: list[se.ServerEvent] = []
        self._actions: list[Action] = []
        self._notes: list[Note] = []
        self._event_id: str | None = None
        self._now_ms = 0
        self._timer_tokens = 0
        self._playout_token = 0
        self._wait = TranscriptWait(self.config.transcript_wait_ms)
        self.overlap = OverlapTracker(
            Interruption(), transcribe=self.config.transcriber, grace_ms=self.config.grace_ms
        )
        self.end_of_turn = EndOfTurn(threshold=0.5)
        self._preemption: Preemption | None = None
        self._preempt_tokens = 0
        # An adopted preemptive response's transcript still to come: the committed turn's.
        self._adopted_transcript_token: int | None = None

    if TYPE_CHECKING:
        # Defined by the parts (core.py, core_turns.py, core_items.py); called across them.
        def _run_session(self, event: str, **kwargs: object) -> None: ...
        def _run_response(self, rid: str, event: str, **kwargs: object) -> None: ...
        def _backend(self, event: BackendEvent) -> None: ...
        def _create_response(
            self, params: ce.ResponseParams | None, adopted: Preemption | None = None
        ) -> None: ...
        def _request(
            self, params: ce.ResponseParams | None, items: tuple[conv.Item, ...]
        ) -> InferenceRequest: ...
        def _transcript(self, ready: TranscriptReady) -> None: ...
        def _preempt_transcript(self, ready: TranscriptReady) -> None: ...
        def _turn_heard(self, ready: TranscriptReady) -> None: ...
        def _release(self, start: StartBackend | None) -> None: ...
        def _known_transcripts(self, start: StartBackend) -> dict[str, str]: ...
        def _overlap(self, step: OverlapStep) -> None: ...
        def _overlap_facts(self) -> dict[str, object]: ...
        def _played_out(self, token: int) -> None: ...

    @property
    def buffered_ms(self) -> int:
        return self.input.buffered_ms

    # Helpers --------------------------------------------------------------------------
    def _act(self, action: Action | None) -> None:
        if action is not None:
            self._actions.append(action)

    def _clock(self, now_ms: int | None) -> None:
        if now_ms is not None:
            self._now_ms = max(self._now_ms, now_ms)

    def _previous_id(self, item_id: str) -> str | None:
        """The item before `item_id` in the conversation (None: first, or not in it)."""
        items = self.conversation.items
        index = next((i for i, it in enumerate(items) if it.id == item_id), 0)
        return items[index - 1].id if index > 0 else None

    def _last_item_id(self) -> str | None:
        items = self.conversation.items
        return items[-1].id if items else None

    def _new_id(self, prefix: str) -> str:
        # Clients may pick any item id, ours included (they are easy to predict): skip taken ones.
        while True:
            self._ids += 1
            candidate = f"{prefix}_{self.session_id}_{self._ids}"
            if candidate not in self.conversation:
                return candidate

    def _error(
        self,
        code: CoreErrorCode,
        message: str,
        param: str | None = None,
        *,
        event_id: str | Literal["client"] | None = "client",
        error_type: str = "invalid_request_error",
    ) -> None:
        # By default the error names the client event being handled (rule 7).
        eid = self._event_id if event_id == "client" else event_id
        self._events.append(self.env.error(code, message, param, eid))

    def _item_not_found(self, item_id: str, action: ItemAction, param: str = "item_id") -> None:
        code, message = unknown_item(action, item_id)  # OpenAI's code for each event
        self._error(code, message, param)

    @staticmethod
    def _output_events(live: LiveResponse, events: list[se.ServerEvent]) -> list[se.ServerEvent]:
        """A response's output events as sent: an out-of-band one's without the
        `conversation.item.*` events (its items are in no conversation)."""
        if live.in_conversation:
            return events
        conversation_events = se.ConversationItemAdded | se.ConversationItemDone
        return [e for e in events if not isinstance(e, conversation_events)]

    def _flush(self) -> Step:
        step = Step(tuple(self._events), tuple(self._actions), tuple(self._notes))
        self._events, self._actions, self._notes = [], [], []
        return step

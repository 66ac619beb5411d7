"""Function calling in the session core: the tools a response is given, the call it makes,
and the items a client answers with.

`Tools` is the session core's function-calling part (orchestrator/session/core.py owns it). It
owns nothing that another part writes: it reads the settings it is given, writes the call's
history slot through the conversation's own methods, and says everything through the outbox.
Rules
(docs/protocol.md "Function calling"):
1. Tools in force: `response.create`'s `tools` / `tool_choice` where given, the session's
   otherwise. Whether the choice fits the tools (`required` needs one, a named function must be
   among them) is checked when a response starts, as OpenAI does, not at `session.update`: a
   client may send the choice before its tools (LiveKit Agents does). A response whose choice
   fits no tool in force does not start: `invalid_value` naming where the choice came from
   (`response.tool_choice`, `response.tools` or `session.tool_choice`; `choice_problem`; the
   tools themselves were checked at the edge).
2. Output items: a reply that is a call alone (`required`, or a named function) announces no
   message: its call is output 0. Otherwise the message is output 0 from the start, as without
   tools, and a call the model makes is output 1. The call's first piece closes the message
   (its `.done` events, completed: nothing is spoken after a call starts) and announces the
   call (`response.output_item.added`, `conversation.item.added`); every piece of arguments is
   a `response.function_call_arguments.delta`. Text or audio after a call started, or in a
   reply that is a call alone, is dropped (the pipeline contract allows neither).
3. Fencing and one terminal, unchanged: a call's pieces are its response chart's `output`,
   forwarded only while generating (rule 2), and the one terminal closes the call: complete
   (`response.function_call_arguments.done`, the item `completed`) only by `complete`;
   cancelled, cut or failed, or cut short by the output budget (`incomplete`), its item is
   `incomplete` and no `arguments.done` is sent, since the arguments so far are no call to
   run.
4. History (rule 5 for calls): the call's slot is opened empty (an empty boundary) when the
   call starts, right after the response's message, and is filled with the call at
   `CommitCall`, which the chart emits only at `complete` (a call has no audio: heard once
   complete). A call cut short stays the empty boundary: no prompt ever sees it. Retrieving
   the item while the call streams shows the call so far.
5. The client's `function_call` and `function_call_output` items are history as they come (an
   unknown `call_id` is accepted, as OpenAI does; a `function_call` without one is given one).
   They belong to the turn they follow and are pruned with it
   (orchestrator/session/history/conversation.py).
6. A response that ended with a complete call arms no idle timer: the client is running the
   function; its output and a `response.create` follow. An `incomplete` one arms it: its call,
   if any, was cut.
7. A `call_id` is `call_` and 16 random letters and digits, like OpenAI's.
"""

from __future__ import annotations

import secrets
import string
from collections.abc import Iterable
from typing import Final

from orchestrator.protocol import client as ce
from orchestrator.protocol import items as wire
from orchestrator.protocol import server as se
from orchestrator.protocol.response import ResponseStatus
from orchestrator.protocol.session_config import SessionConfig
from orchestrator.protocol.tools import FunctionTool, ToolChoice, choice_problem
from orchestrator.session.core_live import LiveCall, LiveResponse
from orchestrator.session.core_outbox import Ids, Outbox
from orchestrator.session.envelope import CallOutput
from orchestrator.session.history import conversation as conv
from orchestrator.session.inputs import BackendToolCall

__all__ = ["Tools", "new_call_id", "output_events", "previous_id", "tool_item"]

_CALL_ID_CHARS: Final = string.ascii_letters + string.digits


def new_call_id() -> str:
    return "call_" + "".join(secrets.choice(_CALL_ID_CHARS) for _ in range(16))


def tool_item(item_id: str, item: wire.FunctionCallItem | wire.FunctionCallOutputItem) -> conv.Item:
    """A client's `function_call` or `function_call_output` item, as history holds it."""
    if isinstance(item, wire.FunctionCallItem):
        call = conv.FunctionCall(item.call_id or new_call_id(), item.name, item.arguments)
        return conv.Item(item_id, "assistant", (call,))
    return conv.Item(item_id, "tool", (conv.FunctionCallOutput(item.call_id, item.output),))


class Tools:
    def __init__(self, outbox: Outbox, ids: Ids, conversation: conv.Conversation) -> None:
        self._out = outbox
        self._env = outbox.env
        self._ids = ids
        self._conversation = conversation

    # Tools in force ---------------------------------------------------------------------
    @staticmethod
    def tools_for(
        settings: SessionConfig, params: ce.ResponseParams | None
    ) -> tuple[tuple[FunctionTool, ...], ToolChoice]:
        tools = params.tools if params and params.tools is not None else settings.tools
        choice = (
            params.tool_choice
            if params and params.tool_choice is not None
            else settings.tool_choice
        )
        return tools, choice

    def refuse(self, settings: SessionConfig, params: ce.ResponseParams | None) -> bool:
        """A response (the client's or server VAD's) whose tool choice fits no tool in force:
        an error naming where the choice came from (True), and no response starts."""
        if params is not None and params.tool_choice is not None:
            given = "response.tool_choice"
        elif params is not None and params.tools is not None:
            given = "response.tools"
        else:
            given = "session.tool_choice"
        problem = choice_problem(*self.tools_for(settings, params))
        if problem is not None:
            self._out.error("invalid_value", problem, given)
        return problem is not None

    # A response's call ------------------------------------------------------------------
    @staticmethod
    def speaks(live: LiveResponse) -> bool:
        """Whether the response's text and audio still reach its message item."""
        return live.message and live.call is None

    def forward_call(self, live: LiveResponse, piece: BackendToolCall) -> None:
        rid = live.chart.response_id
        if live.call is None:
            live.call = self._start_call(live, piece.name)
        if piece.arguments_delta:
            live.call.arguments.append(piece.arguments_delta)
            self._out.send(self._env.call_delta(rid, live.call.out, piece.arguments_delta))

    def _start_call(self, live: LiveResponse, name: str) -> LiveCall:
        rid = live.chart.response_id
        if live.message:
            live.message_closed = self._close_message(live, "completed")
        out = CallOutput(self._ids.new("item"), new_call_id(), name, 1 if live.message else 0)
        previous = None
        if live.in_conversation:
            # Right after the response's message slot (a client's items may have come since).
            after = live.item_id if self._owns_slot(live.item_id, rid) else None
            self._conversation.add(conv.Item(out.item_id, "assistant", (), rid), after)
            previous = previous_id(self._conversation, out.item_id)
        self._out.send_all(output_events(live, self._env.call_started(rid, out, previous)))
        return LiveCall(out)

    def _close_message(self, live: LiveResponse, status: ResponseStatus) -> wire.MessageItem:
        """The reply's message item closing events (sent), and the item as they sent it."""
        events, item = self._env.message_done(
            live.chart.response_id,
            live.item_id,
            status,
            transcript="".join(live.text_parts),
            audio=live.audio,
            previous_item_id=previous_id(self._conversation, live.item_id),
        )
        self._out.send_all(output_events(live, events))
        return item

    def _owns_slot(self, item_id: str, rid: str) -> bool:
        conversation = self._conversation
        return item_id in conversation and conversation.get(item_id).response_id == rid

    def commit_call(self, live: LiveResponse) -> None:
        """`CommitCall`: the call is complete, so heard; its slot holds it from now on."""
        call = live.call
        if call is None or not self._owns_slot(call.out.item_id, live.chart.response_id):
            return
        out = call.out
        done = conv.FunctionCall(out.call_id, out.name, "".join(call.arguments))
        self._conversation.fill_reply(out.item_id, (done,))

    def end_output(self, live: LiveResponse, status: ResponseStatus, reason: str | None) -> None:
        """The terminal: every output item still open is closed, then `response.done`."""
        rid = live.chart.response_id
        completed = status == "completed"
        output: list[wire.Item] = []
        if live.message_closed is not None:
            output.append(live.message_closed)
        elif live.message:
            output.append(self._close_message(live, status))
        if live.call is not None:
            arguments = "".join(live.call.arguments)
            previous = previous_id(self._conversation, live.call.out.item_id)
            events, call = self._env.call_done(rid, live.call.out, arguments, completed, previous)
            self._out.send_all(output_events(live, events))
            output.append(call)
        self._out.send(
            self._env.response_done(
                rid,
                status,
                reason,
                output=tuple(output),
                audio=live.audio,
                output_tokens=live.output_tokens,
                metadata=live.request.metadata or None,
                in_conversation=live.in_conversation,
            )
        )

    @staticmethod
    def live_call_item(lives: Iterable[LiveResponse], item_id: str) -> wire.FunctionCallItem | None:
        """The call still streaming into `item_id`, as `conversation.item.retrieve` shows it."""
        for live in lives:
            call = live.call
            if call is not None and call.out.item_id == item_id and live.chart.is_generating:
                return call.out.item("in_progress", "".join(call.arguments))
        return None


def previous_id(conversation: conv.Conversation, item_id: str) -> str | None:
    """The item before `item_id` in the conversation (None: first, or not in it)."""
    items = conversation.items
    index = next((i for i, it in enumerate(items) if it.id == item_id), 0)
    return items[index - 1].id if index > 0 else None


def output_events(live: LiveResponse, events: list[se.ServerEvent]) -> list[se.ServerEvent]:
    """A response's output events as sent: an out-of-band one's without the
    `conversation.item.*` events (its items are in no conversation)."""
    if live.in_conversation:
        return events
    conversation_events = se.ConversationItemAdded | se.ConversationItemDone
    return [e for e in events if not isinstance(e, conversation_events)]

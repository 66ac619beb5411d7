"""Items, history and transcripts in the session core.

Part of `SessionCore` (orchestrator/session/core_state.py says how the core is assembled). Rules
(docs/protocol.md):
- Rule 5/6: the conversation keeps only what was heard (`_write_history` from the playback
  ledger); pruning runs at every new user input. Truncates and ACKs cut or complete a reply.
- Item ids: a client may pick any id but `root`, or one promised to the turn being spoken.
- A client's `function_call` / `function_call_output` items are history as they come
  (orchestrator/session/core_tools.py); only a response's own message item can be truncated.
- Transcription: each committed turn is transcribed once (`Transcribe`) when the session asks
  for input transcripts or the pipeline hears through them (the cascade); there, a response's
  `StartBackend` waits, bounded by `transcript_wait_ms`, for its turns' transcripts. A turn
  whose preemptive response is adopted takes that response's transcript (the same speech).
"""

from __future__ import annotations

from dataclasses import replace as dc_replace

import numpy as np

from orchestrator.protocol import client as ce
from orchestrator.protocol import items as wire
from orchestrator.protocol.errors import duplicate_item
from orchestrator.protocol.session_config import (
    AudioFormat,
)
from orchestrator.session.actions import (
    ArmTimer,
    CancelTimer,
    StartBackend,
    Transcribe,
)
from orchestrator.session.audio import decode_input
from orchestrator.session.core_state import CoreState
from orchestrator.session.core_tools import tool_item
from orchestrator.session.history import conversation as conv
from orchestrator.session.history.playback import PlaybackItemNotFound
from orchestrator.session.inputs import (
    TranscriptReady,
)

__all__ = ["ItemHandling"]


class ItemHandling(CoreState):
    def _commit_input(self) -> None:
        item_id = self._pending_item_id or self._new_id("item")
        self._pending_item_id = None
        item = conv.Item(item_id, "user", self.input.take())
        previous = self._last_item_id()
        self.conversation.add(item)
        self._events.append(self.env.input_committed(item_id, previous))
        self._announce_item(item)
        self.conversation.prune()
        if self._wants_transcript():
            self._transcribe(item)

    def _wants_transcript(self) -> bool:
        return self.config.transcriber and (
            self.settings.transcription is not None or self.config.transcripts_for_pipeline
        )

    def _transcribe(self, item: conv.Item) -> None:
        held = self._preemption
        if held is not None and held.item_id == item.id and held.transcript_token is not None:
            # Its preemptive response (about to be adopted) heard this speech transcribed.
            self._wait.asked(item.id, self.conversation.__contains__)
            if held.transcript is not None:
                ms = sum(
                    len(p.audio) / p.format.bytes_per_ms
                    for p in item.content
                    if isinstance(p, conv.InputAudio)
                )
                self._transcript(TranscriptReady(item.id, held.transcript, None, ms / 1000))
            else:
                self._adopted_transcript_token = held.transcript_token
            return
        parts = [p for p in item.content if isinstance(p, conv.InputAudio)]
        audio = [decode_input(p.audio, p.format) for p in parts]
        if not audio:
            return  # no audio to hear (the chart commits only a buffer that holds some)
        self._wait.asked(item.id, self.conversation.__contains__)
        self._actions.append(Transcribe(item.id, np.concatenate(audio)))

    def _transcript(self, ready: TranscriptReady) -> None:
        if ready.purpose == "overlap":
            self._overlap(self.overlap.transcribed(ready.token, ready.transcript))
            return
        if ready.purpose == "preempt":
            self._preempt_transcript(ready)
            return
        if ready.purpose == "end_of_turn":
            self._turn_heard(ready)
            return
        if ready.transcript is not None:
            self.conversation.set_transcript(ready.item_id, ready.transcript)
        self._release(self._wait.answered(ready.item_id))
        if self.settings.transcription is not None:
            self._events.append(self.env.transcription(ready))

    def _start_backend(self, start: StartBackend) -> None:
        # The cascade hears through ASR: wait for the turn's transcript (it is being made
        # already) rather than have the pipeline transcribe the same audio again.
        token = self._timer_tokens + 1
        if self.config.transcripts_for_pipeline and self._wait.hold(start, token):
            self._timer_tokens = token
            deadline = self._now_ms + self._wait.wait_ms
            self._actions.append(ArmTimer("transcripts", deadline, token))
            return
        self._actions.append(dc_replace(start, transcripts=self._known_transcripts(start)))

    def _release(self, start: StartBackend | None) -> None:
        if start is None:
            return
        self._actions.append(CancelTimer("transcripts"))
        self._actions.append(dc_replace(start, transcripts=self._known_transcripts(start)))

    def _known_transcripts(self, start: StartBackend) -> dict[str, str]:
        known: dict[str, str] = {}
        for item in start.request.items:
            if item.id not in self.conversation:
                continue
            for part in self.conversation.get(item.id).content:
                if isinstance(part, conv.InputAudio) and part.transcript is not None:
                    known[item.id] = part.transcript
        return known

    def _create_item(self, event: ce.ConversationItemCreate) -> None:
        item_id = event.item.id or self._new_id("item")
        if item_id == conv.ROOT:
            self._error(
                "invalid_value",
                "Item id 'root' is reserved: as previous_item_id it means the start.",
                "item.id",
            )
            return
        if item_id == self._pending_item_id:
            # speech_started (or timeout_triggered) already promised this id to the next turn.
            self._error(*duplicate_item(item_id), "item.id")
            return
        item = self._from_wire(item_id, event.item)
        previous = event.previous_item_id
        try:
            self.conversation.add(item, previous)
        except conv.ItemNotFound as err:
            self._item_not_found(err.item_id, "create", param="previous_item_id")
            return
        except conv.DuplicateItemId:
            self._error(*duplicate_item(item_id), "item.id")
            return
        self._announce_item(item)
        if item.role == "user":
            self.conversation.prune()

    def _response_input(self, params: ce.ResponseParams | None) -> tuple[conv.Item, ...] | None:
        """A response's prompt: `response.input` where given (its own items, and conversation
        items by reference), else the conversation's; None when a reference is unknown (the
        client was told)."""
        if params is None or params.input is None:
            return self.conversation.prompt_view().items
        items: list[conv.Item] = []
        for index, entry in enumerate(params.input):
            if isinstance(entry, ce.ItemReference):
                if entry.id not in self.conversation:
                    self._error(
                        "item_not_found",
                        f"Item with id '{entry.id}' not found.",
                        f"response.input[{index}].id",
                    )
                    return None
                items.append(self.conversation.get(entry.id))
            else:
                items.append(self._from_wire(entry.id or self._new_id("item"), entry))
        return tuple(items)

    def _from_wire(self, item_id: str, item: wire.Item) -> conv.Item:
        """A client's item (`conversation.item.create`, `response.input`) as history holds it;
        its audio in the session's input format at the time it was sent."""
        if isinstance(item, wire.MessageItem):
            fmt = self.settings.input_format
            content = tuple(_content_from_wire(part, fmt) for part in item.content)
            return conv.Item(item_id, item.role, content)
        return tool_item(item_id, item)

    def _announce_item(self, item: conv.Item) -> None:
        previous = self._previous_id(item.id)
        self._events.append(self.env.item_added(item, previous))
        self._events.append(self.env.item_done(item, previous))

    def _truncate(self, item_id: str, content_index: int, audio_end_ms: int) -> None:
        if item_id not in self.conversation:
            self._item_not_found(item_id, "truncate")
            return
        item = self.conversation.get(item_id)
        rid = item.response_id
        if (
            item.role != "assistant"
            or rid is None
            or rid not in self.ledger
            or self.ledger.item_id(rid) != item_id  # its call, not its message
        ):
            self._error(
                "invalid_value", "Only assistant audio replies can be truncated.", "item_id"
            )
            return
        generated = self.ledger.generated_ms(rid)
        if audio_end_ms > generated:
            self._error(
                "invalid_value",
                # OpenAI's wording (clients match it)
                f"Audio content of {generated}ms is already shorter than {audio_end_ms}ms.",
                "audio_end_ms",
            )
            return
        live = self.live.get(rid)
        if live is not None and live.chart.is_live:
            self._run_response(rid, "truncate", audio_end_ms=audio_end_ms)
        else:
            self.ledger.cut(rid, audio_end_ms)
            self._write_history(rid)
        self._run_session("truncate", response_id=rid)  # ends a pause of it (pause mode)
        self._events.append(self.env.item_truncated(item_id, content_index, audio_end_ms))

    def _ack(self, event: ce.PlaybackAck) -> None:
        rid = event.response_id
        try:
            owner = self.ledger.item_id(rid)
        except PlaybackItemNotFound:
            self._error(
                "playback_item_not_found",
                f"Response '{rid}' has no playback to acknowledge.",
                "response_id",
            )
            return
        if event.item_id is not None and event.item_id != owner:
            self._error(
                "playback_item_mismatch",
                f"Item '{event.item_id}' is not the audio item of '{rid}'.",
                "item_id",
            )
            return
        # The client acknowledges: rule 5 decides from now on (the chart's heard_by region).
        self._run_session("playback_acked", response_id=rid)
        result = self.ledger.ack(rid, event.played_ms, event.item_id, bool(event.truncate))
        if result.heard is not None:
            live = self.live.get(rid)
            if live is not None and live.chart.is_live and event.truncate:
                self._run_response(rid, "truncate", audio_end_ms=result.played_ms)
                self._run_session("truncate", response_id=rid)
            elif live is not None and live.chart.is_live:
                self._run_response(rid, "played", audio_end_ms=result.played_ms)
            else:
                self._write_history(rid)
        self._events.append(self.env.acknowledged(result))

    def _arm_playout(self, rid: str) -> None:
        """The `generated` basis: settle the reply when the playout clock has played it."""
        ends = self.ledger.playout_ends_at(rid)
        if self.ledger.basis != "generated" or ends is None:
            return
        self._timer_tokens += 1
        self._playout_token = self._timer_tokens
        self._actions.append(ArmTimer("playout", ends, self._playout_token))

    def _played_out(self, token: int) -> None:
        if token != self._playout_token:
            return
        for rid, live in list(self.live.items()):
            if live.chart.is_live and not live.chart.is_generating:
                if self.ledger.played_out(rid, self._now_ms):
                    self._run_response(rid, "played")

    def _write_history(self, rid: str) -> None:
        heard = self.ledger.heard(rid)
        item_id = self.ledger.item_id(rid)
        if item_id not in self.conversation:
            return
        if self.conversation.get(item_id).response_id != rid:
            return  # the reply slot was deleted and its id reused by the client's own item
        if heard is None:
            self.conversation.fill_reply(item_id, ())  # an estimate withdrawn: the boundary
            return
        live = self.live.get(rid)
        is_audio = live.audio if live is not None else heard.audio_ms > 0
        content: tuple[conv.Content, ...]
        if is_audio and heard.audio_ms > 0:
            content = (conv.OutputAudio(heard.transcript or None, heard.audio_ms),)
        elif not is_audio and heard.full and heard.transcript:
            content = (conv.OutputText(heard.transcript),)
        else:
            content = ()  # nothing heard: the empty boundary stays
        self.conversation.fill_reply(item_id, content)


def _content_from_wire(part: wire.ContentPart, fmt: AudioFormat) -> conv.Content:
    if isinstance(part, wire.InputText):
        return conv.InputText(part.text)
    if isinstance(part, wire.InputAudio):
        # A client item's audio is in the session's input format at the time it was sent.
        return conv.InputAudio(part.audio or b"", part.transcript, fmt)
    if isinstance(part, wire.InputImage):
        return conv.InputImage(part.image_url)
    if isinstance(part, wire.OutputText):
        return conv.OutputText(part.text)
    return conv.OutputAudio(part.transcript, 0)

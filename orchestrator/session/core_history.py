"""History in the session core: the conversation's items, what was heard of replies, and
the user's transcripts.

`History` is the session core's history part (orchestrator/session/core.py owns it). It owns
the conversation, the playback ledger and the transcript wait; no other part writes them but
through its methods (the tools part fills a call's slot through the conversation's own).
Where a rule needs a chart, it answers the core (what to truncate, which ACK was valid) and
the core runs the chart. Rules (docs/protocol.md):
1. Rule 5/6: the conversation keeps only what was heard (`write` from the playback ledger);
   pruning runs at every new user input. Truncates and ACKs cut or complete a reply.
2. Item ids: a client may pick any id but `root`, or one promised to the turn being spoken
   (the turn part owns that promise; the core passes it in).
3. A client's `function_call` / `function_call_output` items are history as they come
   (orchestrator/session/core_tools.py); only a response's own message item can be truncated.
4. Transcription: each committed turn is transcribed once (`Transcribe`) when the session asks
   for input transcripts or the pipeline hears through them (the cascade); there, a response's
   `StartBackend` waits, bounded by `transcript_wait_ms`, for its turns' transcripts. A turn
   whose preemptive response is adopted takes that response's transcript (the same speech).
5. The `generated` basis: a reply is settled when the playout clock has played it (one
   playout timer, its token the latest armed).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from dataclasses import replace as dc_replace

import numpy as np

from orchestrator.protocol import client as ce
from orchestrator.protocol import items as wire
from orchestrator.protocol.errors import duplicate_item
from orchestrator.protocol.session_config import (
    AudioFormat,
    RetentionRatio,
    SessionConfig,
    Truncation,
)
from orchestrator.session.actions import ArmTimer, CancelTimer, StartBackend, Transcribe
from orchestrator.session.audio import decode_input
from orchestrator.session.core_outbox import Ids, Outbox
from orchestrator.session.core_tools import previous_id, tool_item
from orchestrator.session.core_types import CoreConfig
from orchestrator.session.history import conversation as conv
from orchestrator.session.history.playback import AckResult, PlaybackItemNotFound, PlaybackLedger
from orchestrator.session.inputs import TranscriptReady
from orchestrator.session.transcript_wait import TranscriptWait

__all__ = ["History", "PreemptedTranscript"]


@dataclass(frozen=True, slots=True)
class PreemptedTranscript:
    """A committed turn that an adopted preemptive response already had transcribed: its
    transcript when it came (None: still to come, under the preemption's token)."""

    transcript: str | None


class History:
    def __init__(
        self,
        config: CoreConfig,
        outbox: Outbox,
        ids: Ids,
        settings: Callable[[], SessionConfig],
    ) -> None:
        self._config = config
        self._out = outbox
        self._env = outbox.env
        self._ids = ids
        self._settings = settings
        self.conversation = conv.Conversation(config.limits)
        # OpenAI's basis until the client acknowledges playback (statecharts/session.py).
        self.ledger = PlaybackLedger(
            config.playback_entries, basis="generated", ack_grace_ms=config.ack_grace_ms
        )
        self._wait = TranscriptWait(config.transcript_wait_ms)
        self._playout_token = 0

    def configure(self, truncation: Truncation) -> None:
        """A `session.update`'s truncation: its retention ratio, or rule 6 as is."""
        self.conversation.retention = (
            truncation.retention_ratio if isinstance(truncation, RetentionRatio) else None
        )

    # Items --------------------------------------------------------------------------------
    def prune(self) -> None:
        self.conversation.prune()

    def open_reply(self, rid: str, item_id: str, slot: bool) -> tuple[list[str], str | None]:
        """A new reply's ledger entry (and its empty history slot when `slot`): the replies
        evicted from the ledger, and the item the reply follows."""
        evicted = list(self.ledger.open(rid, item_id))
        previous = self.last_item_id()
        if slot:
            self.conversation.open_reply(item_id, rid)
        return evicted, previous

    def last_item_id(self) -> str | None:
        items = self.conversation.items
        return items[-1].id if items else None

    def commit_turn(self, item_id: str, parts: tuple[conv.InputAudio, ...]) -> conv.Item:
        """The committed input buffer as the next user item (announced, history pruned)."""
        item = conv.Item(item_id, "user", parts)
        previous = self.last_item_id()
        self.conversation.add(item)
        self._out.send(self._env.input_committed(item_id, previous))
        self._announce(item)
        self.conversation.prune()
        return item

    def create_item(self, event: ce.ConversationItemCreate, promised: str | None) -> None:
        item_id = event.item.id or self._ids.new("item")
        if item_id == conv.ROOT:
            self._out.error(
                "invalid_value",
                "Item id 'root' is reserved: as previous_item_id it means the start.",
                "item.id",
            )
            return
        if item_id == promised:
            # speech_started (or timeout_triggered) already promised this id to the next turn.
            self._out.error(*duplicate_item(item_id), "item.id")
            return
        item = self._from_wire(item_id, event.item)
        previous = event.previous_item_id
        try:
            self.conversation.add(item, previous)
        except conv.ItemNotFound as err:
            self._out.item_not_found(err.item_id, "create", param="previous_item_id")
            return
        except conv.DuplicateItemId:
            self._out.error(*duplicate_item(item_id), "item.id")
            return
        self._announce(item)
        if item.role == "user":
            self.conversation.prune()

    def retrieve(self, item_id: str, streaming: wire.FunctionCallItem | None) -> None:
        self._out.send(self._env.item_retrieved(self.conversation.get(item_id), streaming))

    def delete(self, item_id: str) -> None:
        if item_id not in self.conversation:
            self._out.item_not_found(item_id, "delete")
            return
        self.conversation.delete(item_id)
        self._out.send(self._env.item_deleted(item_id))

    def response_input(self, params: ce.ResponseParams | None) -> tuple[conv.Item, ...] | None:
        """A response's prompt: `response.input` where given (its own items, and conversation
        items by reference), else the conversation's; None when a reference is unknown (the
        client was told)."""
        if params is None or params.input is None:
            return self.conversation.prompt_view().items
        items: list[conv.Item] = []
        for index, entry in enumerate(params.input):
            if isinstance(entry, ce.ItemReference):
                if entry.id not in self.conversation:
                    self._out.error(
                        "item_not_found",
                        f"Item with id '{entry.id}' not found.",
                        f"response.input[{index}].id",
                    )
                    return None
                items.append(self.conversation.get(entry.id))
            else:
                items.append(self._from_wire(entry.id or self._ids.new("item"), entry))
        return tuple(items)

    def _from_wire(self, item_id: str, item: wire.Item) -> conv.Item:
        """A client's item (`conversation.item.create`, `response.input`) as history holds it;
        its audio in the session's input format at the time it was sent."""
        if isinstance(item, wire.MessageItem):
            fmt = self._settings().input_format
            content = tuple(_content_from_wire(part, fmt) for part in item.content)
            return conv.Item(item_id, item.role, content)
        return tool_item(item_id, item)

    def _announce(self, item: conv.Item) -> None:
        previous = previous_id(self.conversation, item.id)
        self._out.send(self._env.item_added(item, previous))
        self._out.send(self._env.item_done(item, previous))

    # Transcripts --------------------------------------------------------------------------
    def wants_transcript(self) -> bool:
        return self._config.transcriber and (
            self._settings().transcription is not None or self._config.transcripts_for_pipeline
        )

    def transcribe(self, item: conv.Item, preempted: PreemptedTranscript | None) -> None:
        if preempted is not None:
            # Its preemptive response (about to be adopted) heard this speech transcribed.
            self._wait.asked(item.id, self.conversation.__contains__)
            if preempted.transcript is not None:
                ms = sum(
                    len(p.audio) / p.format.bytes_per_ms
                    for p in item.content
                    if isinstance(p, conv.InputAudio)
                )
                self.transcript(TranscriptReady(item.id, preempted.transcript, None, ms / 1000))
            return
        parts = [p for p in item.content if isinstance(p, conv.InputAudio)]
        audio = [decode_input(p.audio, p.format) for p in parts]
        if not audio:
            return  # no audio to hear (the chart commits only a buffer that holds some)
        self._wait.asked(item.id, self.conversation.__contains__)
        self._out.act(Transcribe(item.id, np.concatenate(audio)))

    def transcript(self, ready: TranscriptReady) -> None:
        """A committed turn's transcript (`purpose="turn"`)."""
        if ready.transcript is not None:
            self.conversation.set_transcript(ready.item_id, ready.transcript)
        self.release(self._wait.answered(ready.item_id))
        if self._settings().transcription is not None:
            self._out.send(self._env.transcription(ready))

    def start_backend(self, start: StartBackend, now_ms: int) -> None:
        # The cascade hears through ASR: wait for the turn's transcript (it is being made
        # already) rather than have the pipeline transcribe the same audio again.
        token = self._ids.next_token()
        if self._config.transcripts_for_pipeline and self._wait.hold(start, token):
            self._ids.token()
            deadline = now_ms + self._wait.wait_ms
            self._out.act(ArmTimer("transcripts", deadline, token))
            return
        self._out.act(dc_replace(start, transcripts=self.known_transcripts(start)))

    def waited(self, token: int) -> None:
        """The transcripts timer fired: start with the transcripts known."""
        self.release(self._wait.expired(token))

    def release(self, start: StartBackend | None) -> None:
        if start is None:
            return
        self._out.act(CancelTimer("transcripts"))
        self._out.act(dc_replace(start, transcripts=self.known_transcripts(start)))

    def drop_wait(self, response_id: str) -> bool:
        """A response cancelled while it waited for transcripts: True when it never started
        (nothing to cancel but the wait, whose timer is cancelled here)."""
        if self._wait.drop(response_id):
            self._out.act(CancelTimer("transcripts"))
            return True
        return False

    def known_transcripts(self, start: StartBackend) -> dict[str, str]:
        known: dict[str, str] = {}
        for item in start.request.items:
            if item.id not in self.conversation:
                continue
            for part in self.conversation.get(item.id).content:
                if isinstance(part, conv.InputAudio) and part.transcript is not None:
                    known[item.id] = part.transcript
        return known

    # What was heard -------------------------------------------------------------------------
    def truncatable(self, item_id: str, audio_end_ms: int) -> str | None:
        """`conversation.item.truncate`'s checks: the reply's response id, or None (told)."""
        if item_id not in self.conversation:
            self._out.item_not_found(item_id, "truncate")
            return None
        item = self.conversation.get(item_id)
        rid = item.response_id
        if (
            item.role != "assistant"
            or rid is None
            or rid not in self.ledger
            or self.ledger.item_id(rid) != item_id  # its call, not its message
        ):
            self._out.error(
                "invalid_value", "Only assistant audio replies can be truncated.", "item_id"
            )
            return None
        generated = self.ledger.generated_ms(rid)
        # The ledger counts whole ms (688 of 688.5); a client that rounds what it played up
        # (689) means all of it, so only a whole ms past the last partial one is refused.
        if audio_end_ms > generated + 1:
            self._out.error(
                "invalid_value",
                # OpenAI's wording (clients match it)
                f"Audio content of {generated}ms is already shorter than {audio_end_ms}ms.",
                "audio_end_ms",
            )
            return None
        return rid

    def ackable(self, event: ce.PlaybackAck) -> bool:
        """`playback.ack`'s checks: whether it names a reply's audio item (else told)."""
        rid = event.response_id
        try:
            owner = self.ledger.item_id(rid)
        except PlaybackItemNotFound:
            self._out.error(
                "playback_item_not_found",
                f"Response '{rid}' has no playback to acknowledge.",
                "response_id",
            )
            return False
        if event.item_id is not None and event.item_id != owner:
            self._out.error(
                "playback_item_mismatch",
                f"Item '{event.item_id}' is not the audio item of '{rid}'.",
                "item_id",
            )
            return False
        return True

    def ack(self, event: ce.PlaybackAck, now_ms: int) -> AckResult:
        return self.ledger.ack(
            event.response_id, event.played_ms, event.item_id, bool(event.truncate), now_ms
        )

    def append_audio(self, rid: str, ms: int, text: str, now_ms: int) -> None:
        self.ledger.append(rid, ms, text, now_ms)

    def generated(self, rid: str, transcript: str | None, audio: bool, now_ms: int) -> bool:
        """The reply is generated (`transcript`: its text when no audio carries it); the
        `generated` basis hears it now. True when its audio is still to be played."""
        if transcript is not None:
            self.ledger.set_transcript(rid, transcript)
        if self.ledger.finish(rid, now_ms) is not None:
            self.write(rid, audio)  # the `generated` basis: heard once generated
        return self.ledger.pending_audio(rid, now_ms)

    def playout_ends_at(self, rid: str, now_ms: int) -> int:
        """When the reply's audio will have finished playing, by the playout clock (the
        caller's ms; now when nothing is left, or while paused: from now, what is left)."""
        if rid not in self.ledger:
            return now_ms
        ends = self.ledger.playout_ends_at(rid)
        if ends is None:  # paused: what is left plays from a resume, at the earliest now
            return now_ms + self.ledger.unplayed_ms(rid, now_ms)
        return max(now_ms, ends)

    def generated_ms(self, rid: str) -> int:
        return self.ledger.generated_ms(rid) if rid in self.ledger else 0

    def pause(self, rid: str, now_ms: int) -> None:
        self.ledger.pause(rid, now_ms)

    def resume(self, rid: str, now_ms: int) -> None:
        self.ledger.resume(rid, now_ms)

    def played_out(self, rid: str, now_ms: int) -> bool:
        return self.ledger.played_out(rid, now_ms)

    def hear_by_acknowledgement(self, rid: str) -> tuple[str, ...]:
        """From now on ACKs decide (rule 5): the replies to write back to their boundary."""
        return self.ledger.acknowledge(rid)

    def cut(self, rid: str, audio_end_ms: int | None, now_ms: int) -> None:
        """Cut a reply at `audio_end_ms`, or at the playback cursor when None."""
        if audio_end_ms is not None:
            self.ledger.cut(rid, audio_end_ms, now_ms)
        else:
            self.ledger.clear(rid, now_ms)

    def arm_playout(self, playing: Iterable[str]) -> None:
        """The `generated` basis: settle each reply of `playing` when the playout clock has
        played it. One timer, for the earliest end among them: a later reply's never replaces
        an earlier one's, and the core arms it again for the next when it fires."""
        if self.ledger.basis != "generated":
            return
        ends = [
            end
            for rid in playing
            if self.ledger.awaits_playout(rid)
            and (end := self.ledger.playout_ends_at(rid)) is not None
        ]
        if not ends:
            return
        self._playout_token = self._ids.token()
        self._out.act(ArmTimer("playout", min(ends), self._playout_token))

    def is_playout(self, token: int) -> bool:
        return token == self._playout_token

    def write(self, rid: str, audio: bool | None) -> None:
        """Write what was heard of reply `rid` into its slot (`audio`: whether it is an audio
        reply, None when no longer known: decided by what was heard)."""
        heard = self.ledger.heard(rid)
        item_id = self.ledger.item_id(rid)
        if item_id not in self.conversation:
            return
        if self.conversation.get(item_id).response_id != rid:
            return  # the reply slot was deleted and its id reused by the client's own item
        if heard is None:
            self.conversation.fill_reply(item_id, ())  # an estimate withdrawn: the boundary
            return
        is_audio = audio if audio is not None else heard.audio_ms > 0
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

"""SessionCore: the sans-IO realtime session (h11 style: bytes-free events in, events out).

It owns one session's SessionChart, one ResponseChart per live response, the conversation,
the playback ledger and the response fence. The I/O layer feeds it parsed client events,
VAD events and backend output, and carries out what comes back: server events to send and
`StartBackend` / `CancelBackend` actions. No clock, no socket, no task lives here, so every
interleaving can be driven in memory by a test.

Rules enforced here by routing chart effects (the charts decide; this module acts):
- Rule 2: backend output passes the fence (only the open response's number) and then the
  response's chart (only while generating).
- Rule 3: a cancel with no live response is `response_not_active`; one active response at a
  time (`conversation_already_has_active_response`).
- Rule 5/6: the conversation keeps only what was heard; pruning runs at every new user input.
- Rule 7: every client error becomes an `error` event naming the client's `event_id`.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from orchestrator import conversation as conv
from orchestrator.envelope import Envelope, OutEvent
from orchestrator.fencing import ResponseFence
from orchestrator.playback import PlaybackItemMismatch, PlaybackItemNotFound, PlaybackLedger
from orchestrator.protocol import client as ce
from orchestrator.protocol import items as wire
from orchestrator.protocol.errors import ProtocolError
from orchestrator.protocol.session_config import SessionConfig
from orchestrator.signals import (
    Action,
    BackendAudio,
    BackendDone,
    BackendEvent,
    BackendFailed,
    BackendText,
    CancelBackend,
    InferenceRequest,
    StartBackend,
    VadEvent,
    VadSpeechStarted,
)
from statecharts import effects as fx
from statecharts.response import ResponseChart
from statecharts.session import SessionChart

Output = OutEvent | Action
PCM16_24K_BYTES_PER_MS = 48


@dataclass(frozen=True, slots=True)
class CoreConfig:
    limits: conv.HistoryLimits = field(default_factory=conv.HistoryLimits)
    max_input_buffer_bytes: int = 16 * 1024 * 1024
    playback_entries: int = 64
    model: str = "turntaker"


@dataclass(slots=True)
class _Live:
    """A response the session still tracks: generating, or generated and not yet heard."""

    chart: ResponseChart
    seq: int
    item_id: str
    audio: bool
    request: InferenceRequest
    text_parts: list[str] = field(default_factory=list)
    audio_ms: int = 0
    output_tokens: int = 0


class SessionCore:
    def __init__(self, session_id: str, config: CoreConfig | None = None) -> None:
        self.config = config or CoreConfig()
        self.session_id = session_id
        self.settings = SessionConfig()
        self.chart = SessionChart()
        self.conversation = conv.Conversation(self.config.limits)
        self.ledger = PlaybackLedger(self.config.playback_entries)
        self.fence = ResponseFence()
        self.env = Envelope(session_id)
        self.live: OrderedDict[str, _Live] = OrderedDict()
        self._buffer = bytearray()
        self._ids = 0
        self._pending_item_id: str | None = None
        self._out: list[Output] = []
        self._event_id: str | None = None

    # Entry points ---------------------------------------------------------------------
    def open(self) -> list[Output]:
        self._out.append(self.env.session_created(self.settings, self.config.model))
        return self._flush()

    def client(self, event: ce.ClientEvent) -> list[Output]:
        self._event_id = event.event_id
        try:
            self._client(event)
        finally:
            self._event_id = None
        return self._flush()

    def reject(self, err: ProtocolError) -> list[Output]:
        """A client message that failed to parse: an error event, nothing else changes."""
        self._out.append(self.env.error(err.code, err.message, err.param, err.event_id))
        return self._flush()

    def vad(self, event: VadEvent) -> list[Output]:
        if isinstance(event, VadSpeechStarted):
            self._run_session("speech_started", audio_start_ms=event.audio_start_ms)
        else:
            self._run_session(
                "speech_stopped",
                audio_end_ms=event.audio_end_ms,
                buffered_ms=self.buffered_ms,
            )
        return self._flush()

    def backend(self, event: BackendEvent) -> list[Output]:
        live = self.live.get(event.response_id)
        if live is None or live.seq != event.seq or not self.fence.admits(event.seq):
            return []  # rule 2: late output of a closed response is dropped here
        rid = event.response_id
        if isinstance(event, BackendAudio | BackendText):
            for effect in live.chart.forward(event):  # the `output` event's fast path
                self._response_effect(live, effect)
        elif isinstance(event, BackendDone):
            live.output_tokens = event.output_tokens
            if not live.audio or live.audio_ms == 0:
                self.ledger.set_transcript(rid, "".join(live.text_parts))
            heard = self.ledger.finish(rid)
            pending = heard is None and self.ledger.pending_audio(rid)
            self._run_response(rid, "complete", audio_pending=pending)
            self._run_session("response_finished", response_id=rid, audio_pending=pending)
        elif isinstance(event, BackendFailed):
            self._run_response(rid, "fail", reason=event.reason)
            self._run_session("response_finished", response_id=rid, audio_pending=False)
        return self._flush()

    @property
    def buffered_ms(self) -> int:
        return len(self._buffer) // self.settings.input_format.bytes_per_ms

    # Client events --------------------------------------------------------------------
    def _client(self, event: ce.ClientEvent) -> None:
        if isinstance(event, ce.SessionUpdate):
            self.settings = self.settings.apply(event.session)
            vad = self.settings.turn_detection
            self.chart.configure(
                turn_detection="server_vad" if vad is not None else "manual",
                create_response=vad.create_response if vad is not None else False,
                interrupt_response=vad.interrupt_response if vad is not None else False,
            )
            self._out.append(self.env.session_updated(self.settings, self.config.model))
        elif isinstance(event, ce.InputAudioBufferAppend):
            if len(self._buffer) + len(event.audio) > self.config.max_input_buffer_bytes:
                self._error("input_audio_buffer_full", "The input audio buffer is full.")
                return
            self._buffer += event.audio
        elif isinstance(event, ce.InputAudioBufferCommit):
            self._run_session(
                "commit",
                buffered_ms=self.buffered_ms,
                final=event.final,
                create_response=event.create_response,
            )
        elif isinstance(event, ce.InputAudioBufferClear):
            self._buffer.clear()
            self._run_session("clear_input")
            self._out.append(self.env.input_cleared())
        elif isinstance(event, ce.ConversationItemCreate):
            self._create_item(event)
        elif isinstance(event, ce.ConversationItemRetrieve):
            if event.item_id not in self.conversation:
                self._item_not_found(event.item_id)
                return
            self._out.append(self.env.item_retrieved(self.conversation.get(event.item_id)))
        elif isinstance(event, ce.ConversationItemDelete):
            if event.item_id not in self.conversation:
                self._item_not_found(event.item_id)
                return
            self.conversation.delete(event.item_id)
            self._out.append(self.env.item_deleted(event.item_id))
        elif isinstance(event, ce.ConversationItemTruncate):
            self._truncate(event.item_id, event.content_index, event.audio_end_ms)
        elif isinstance(event, ce.ResponseCreate):
            self._create_response(event.response)
        elif isinstance(event, ce.ResponseCancel):
            if not self.chart.is_output_live and event.response_id not in self.live:
                self._error("response_not_active", "There is no active response to cancel.")
                return
            self._run_session("clear", response_id=event.response_id)
        elif isinstance(event, ce.OutputAudioBufferClear):
            # The charts answer a clear of a live latest response or of a named older one;
            # a clear of nothing live is still answered: the client's buffer is empty now.
            targets_latest = event.response_id in (None, self.chart.latest_response_id)
            answered_by_charts = self.chart.is_output_live or not targets_latest
            self._run_session("clear", response_id=event.response_id)
            if not answered_by_charts:
                self._out.append(self.env.cleared(event.response_id or ""))
        elif isinstance(event, ce.PlaybackAck):
            self._ack(event)
        elif isinstance(event, ce.ConversationContextRetrieve):
            self._out.append(self.env.context(self.conversation.prompt_view()))

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
            # speech_started already promised this id to the turn being spoken.
            self._error("item_already_exists", f"Item '{item_id}' already exists.", "item.id")
            return
        content = tuple(_content_from_wire(part) for part in event.item.content)
        item = conv.Item(item_id, event.item.role, content)
        previous = event.previous_item_id
        try:
            self.conversation.add(item, previous)
        except conv.ItemNotFound as err:
            self._item_not_found(err.item_id, param="previous_item_id")
            return
        except conv.DuplicateItemId:
            self._error("item_already_exists", f"Item '{item_id}' already exists.", "item.id")
            return
        self._announce_item(item)
        if item.role == "user":
            self.conversation.prune()

    def _announce_item(self, item: conv.Item) -> None:
        items = self.conversation.items
        index = next(i for i, it in enumerate(items) if it.id == item.id)
        previous = items[index - 1].id if index > 0 else None
        self._out.append(self.env.item_added(item, previous))
        self._out.append(self.env.item_done(item, previous))

    def _truncate(self, item_id: str, content_index: int, audio_end_ms: int) -> None:
        if item_id not in self.conversation:
            self._item_not_found(item_id)
            return
        item = self.conversation.get(item_id)
        rid = item.response_id
        if item.role != "assistant" or rid is None or rid not in self.ledger:
            self._error(
                "invalid_value", "Only assistant audio replies can be truncated.", "item_id"
            )
            return
        generated = self.ledger.generated_ms(rid)
        if audio_end_ms > generated:
            self._error(
                "invalid_value",
                f"audio_end_ms {audio_end_ms} is beyond the item's {generated} ms of audio.",
                "audio_end_ms",
            )
            return
        live = self.live.get(rid)
        if live is not None and live.chart.is_live:
            self._truncate_live(live, audio_end_ms)
        else:
            self.ledger.cut(rid, audio_end_ms)
            self._write_history(rid)
        self._out.append(self.env.item_truncated(item_id, content_index, audio_end_ms))

    def _ack(self, event: ce.PlaybackAck) -> None:
        try:
            result = self.ledger.ack(
                event.response_id, event.played_ms, event.item_id, bool(event.truncate)
            )
        except PlaybackItemNotFound:
            self._error(
                "playback_item_not_found",
                f"Response '{event.response_id}' has no playback to acknowledge.",
                "response_id",
            )
            return
        except PlaybackItemMismatch:
            self._error(
                "playback_item_mismatch",
                f"Item '{event.item_id}' is not the audio item of '{event.response_id}'.",
                "item_id",
            )
            return
        rid = event.response_id
        if result.heard is not None:
            live = self.live.get(rid)
            if live is not None and live.chart.is_live and event.truncate:
                self._truncate_live(live, result.played_ms)
            elif live is not None and live.chart.is_live:
                self._run_response(rid, "played", audio_end_ms=result.played_ms)
            else:
                self._write_history(rid)
        self._out.append(self.env.acknowledged(result))

    def _truncate_live(self, live: _Live, audio_end_ms: int) -> None:
        rid = live.chart.response_id
        generating = live.chart.is_generating
        self._run_response(rid, "truncate", audio_end_ms=audio_end_ms)
        if generating:
            # The reply ends here, not in the backend, and the session chart only hears of an
            # end from the backend path: without this its output side stays `generating`, and
            # every later response.create is refused as concurrent.
            self._run_session("response_finished", response_id=rid, audio_pending=False)

    # Responses ------------------------------------------------------------------------
    def _create_response(self, params: ce.ResponseParams | None) -> None:
        if self.chart.is_generating:
            self._error(
                "conversation_already_has_active_response",
                "Conversation already has an active response in progress.",
            )
            return
        if params is not None and params.conversation == "none":
            self._error(
                "unsupported_conversation",
                "Out-of-band responses (conversation: none) are not supported.",
                "response.conversation",
            )
            return
        settings = self.settings
        modalities = (params.output_modalities if params else None) or settings.output_modalities
        instructions = (
            params.instructions
            if params and params.instructions is not None
            else (settings.instructions)
        )
        max_tokens = (params.max_output_tokens if params else None) or settings.max_output_tokens
        self.conversation.prune()
        request = InferenceRequest(
            instructions=instructions,
            items=self.conversation.prompt_view().items,
            output_modalities=modalities,
            max_output_tokens=None if max_tokens == "inf" else int(max_tokens),
            voice=settings.voice,
            metadata=dict(params.metadata or {}) if params else {},
        )
        rid = self._new_id("resp")
        item_id = self._new_id("item")
        seq = self.fence.issue()
        live = _Live(ResponseChart(rid), seq, item_id, "audio" in modalities, request)
        self.live[rid] = live
        for evicted in self.ledger.open(rid, item_id):
            self._forget(evicted)
        previous = self._last_item_id()
        self.conversation.open_reply(item_id, rid)
        self._out.extend(self.env.response_started(rid, item_id, previous, modalities, request))
        self._run_session("response_started", response_id=rid)
        self._run_response(rid, "start")

    def _forget(self, rid: str) -> None:
        live = self.live.pop(rid, None)
        if live is not None and live.chart.is_generating:
            # An unsettled reply evicted from the ledger: it stays an empty boundary.
            self._out.append(CancelBackend(rid, live.seq))
            self.fence.close(live.seq)

    # Effects --------------------------------------------------------------------------
    def _run_session(self, event: str, **kwargs: object) -> None:
        for effect in self.chart.handle(event, **kwargs):
            self._session_effect(effect)

    def _session_effect(self, effect: fx.Effect) -> None:
        if isinstance(effect, fx.AnnounceSpeechStarted):
            # The id is taken only once the chart has started a turn: it names the item
            # that the matching commit will create.
            self._pending_item_id = self._new_id("item")
            self._out.append(self.env.speech_started(effect.audio_start_ms, self._pending_item_id))
        elif isinstance(effect, fx.AnnounceSpeechStopped):
            item_id = self._pending_item_id or self._new_id("item")
            self._pending_item_id = item_id
            self._out.append(self.env.speech_stopped(effect.audio_end_ms, item_id))
        elif isinstance(effect, fx.CommitInput):
            self._commit_input()
        elif isinstance(effect, fx.CreateResponse):
            self._create_response(None)
        elif isinstance(effect, fx.InterruptResponses):
            event = "barge_in" if effect.reason == "turn_detected" else "cancel"
            for rid in list(self.live):
                self._run_response(rid, event, reason=effect.reason)
        elif isinstance(effect, fx.InterruptResponse):
            if effect.response_id in self.live:
                self._run_response(effect.response_id, "cancel", reason=effect.reason)
            else:
                self._out.append(self.env.cleared(effect.response_id))
        elif isinstance(effect, fx.RejectCommit):
            self._error(effect.code, effect.message)

    def _commit_input(self) -> None:
        item_id = self._pending_item_id or self._new_id("item")
        self._pending_item_id = None
        audio = bytes(self._buffer)
        self._buffer.clear()
        item = conv.Item(item_id, "user", (conv.InputAudio(audio),))
        previous = self._last_item_id()
        self.conversation.add(item)
        self._out.append(self.env.input_committed(item_id, previous))
        self._announce_item(item)
        self.conversation.prune()

    def _run_response(self, rid: str, event: str, **kwargs: object) -> None:
        live = self.live.get(rid)
        if live is None:
            return
        for effect in live.chart.handle(event, **kwargs):
            self._response_effect(live, effect)
        if live.chart.is_terminal:
            self.live.pop(rid, None)

    def _response_effect(self, live: _Live, effect: fx.Effect) -> None:
        rid = live.chart.response_id
        if isinstance(effect, fx.StartInference):
            self._out.append(StartBackend(rid, live.seq, live.request))
        elif isinstance(effect, fx.CancelInference):
            self.fence.close(live.seq)
            self._out.append(CancelBackend(rid, live.seq))
        elif isinstance(effect, fx.ForwardOutput):
            self._forward(live, effect.chunk)
        elif isinstance(effect, fx.SendCleared):
            self._out.append(self.env.cleared(rid))
        elif isinstance(effect, fx.SendResponseDone):
            self.fence.close(live.seq)
            self._out.extend(
                self.env.response_finished(
                    rid,
                    live.item_id,
                    effect.status,
                    effect.reason,
                    transcript="".join(live.text_parts),
                    audio=live.audio,
                    output_tokens=live.output_tokens,
                )
            )
        elif isinstance(effect, fx.CommitHistory):
            if effect.mode == "cut":
                if effect.audio_end_ms is not None:
                    self.ledger.cut(rid, effect.audio_end_ms)
                else:
                    self.ledger.clear(rid)
            self._write_history(rid)
            self._run_session("response_settled", response_id=rid)

    def _forward(self, live: _Live, chunk: object) -> None:
        rid = live.chart.response_id
        if isinstance(chunk, BackendAudio):
            ms = len(chunk.audio) // PCM16_24K_BYTES_PER_MS
            live.audio_ms += ms
            self.ledger.append(rid, ms, chunk.text)
            if chunk.text:
                live.text_parts.append(chunk.text)
            self._out.extend(self.env.audio_delta(rid, live.item_id, chunk.audio, chunk.text))
        elif isinstance(chunk, BackendText):
            live.text_parts.append(chunk.text)
            self._out.append(self.env.text_delta(rid, live.item_id, chunk.text, audio=live.audio))

    def _write_history(self, rid: str) -> None:
        heard = self.ledger.heard(rid)
        item_id = self.ledger.item_id(rid)
        if heard is None or item_id not in self.conversation:
            return
        if self.conversation.get(item_id).response_id != rid:
            return  # the reply slot was deleted and its id reused by the client's own item
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

    # Helpers --------------------------------------------------------------------------
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

    def _error(self, code: str, message: str, param: str | None = None) -> None:
        self._out.append(self.env.error(code, message, param, self._event_id))

    def _item_not_found(self, item_id: str, param: str = "item_id") -> None:
        self._error("item_not_found", f"Item with id '{item_id}' not found.", param)

    def _flush(self) -> list[Output]:
        out, self._out = self._out, []
        return out


def _content_from_wire(part: wire.ContentPart) -> conv.Content:
    if isinstance(part, wire.InputText):
        return conv.InputText(part.text)
    if isinstance(part, wire.InputAudio):
        return conv.InputAudio(part.audio or b"", part.transcript)
    if isinstance(part, wire.InputImage):
        return conv.InputImage(part.image_url)
    if isinstance(part, wire.OutputText):
        return conv.OutputText(part.text)
    return conv.OutputAudio(part.transcript, 0)

"""Server events as OpenAI sends them, built from the core's plain values.

One place knows the envelope of a response (`response.created`, `output_item.added`,
`conversation.item.added`, `content_part.added`, deltas, the `.done` events, `response.done`)
so the core speaks in terms of what happened, not of wire shapes. A response's output items
are its message (output index 0, when it has one) and its function call (after the message,
or 0 for a reply that is a call alone): each is announced, streamed and closed in turn, the
message first.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.protocol import items as wire
from orchestrator.protocol import server as se
from orchestrator.protocol.response import (
    OutputTokenDetails,
    Response,
    ResponseAudio,
    ResponseAudioOutput,
    ResponseStatus,
    StatusDetails,
    StatusError,
    StatusReason,
    Usage,
)
from orchestrator.protocol.session_config import Modality, SessionConfig
from orchestrator.session.actions import InferenceRequest
from orchestrator.session.history import conversation as conv
from orchestrator.session.history.playback import AckResult
from orchestrator.session.inputs import CloseRequested, TranscriptReady

OutEvent = se.ServerEvent

_CANCEL_REASONS = {"turn_detected": "turn_detected", "client_cancelled": "client_cancelled"}
_INCOMPLETE_REASONS: dict[str, StatusReason] = {
    "max_output_tokens": "max_output_tokens",
    "content_filter": "content_filter",
}


def wire_item(item: conv.Item, status: wire.ItemStatus = "completed") -> wire.Item:
    if (call := item.call) is not None:
        return wire.FunctionCallItem(
            id=item.id,
            status=status,
            call_id=call.call_id,
            name=call.name,
            arguments=call.arguments,
        )
    if (answer := item.call_output) is not None:
        return wire.FunctionCallOutputItem(
            id=item.id, status=status, call_id=answer.call_id, output=answer.output
        )
    # A `tool` item is always a call output (above); the fallback only narrows the type.
    role = item.role if item.role != "tool" else "assistant"
    return wire.MessageItem(
        id=item.id,
        status=status,
        role=role,
        content=tuple(_wire_part(part) for part in item.content),
    )


@dataclass(frozen=True, slots=True)
class CallOutput:
    """A response's function call output item, as its events name it."""

    item_id: str
    call_id: str
    name: str
    output_index: int

    def item(self, status: wire.ItemStatus, arguments: str) -> wire.FunctionCallItem:
        return wire.FunctionCallItem(
            id=self.item_id,
            status=status,
            call_id=self.call_id,
            name=self.name,
            arguments=arguments,
        )


def _wire_part(part: conv.Content) -> wire.ContentPart:
    if isinstance(part, conv.InputText):
        return wire.InputText(text=part.text)
    if isinstance(part, conv.InputAudio):
        return wire.InputAudio(transcript=part.transcript)
    if isinstance(part, conv.InputImage):
        return wire.InputImage(image_url=part.image_url)
    if isinstance(part, conv.OutputText):
        return wire.OutputText(text=part.text)
    if isinstance(part, conv.OutputAudio):
        return wire.OutputAudio(transcript=part.transcript)
    raise ValueError(f"{type(part).__name__} is an item of its own, not a message part")


class Envelope:
    """Builds the server events of one session."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.conversation_id = f"conv_{session_id}"
        self._settings = SessionConfig()

    # Session --------------------------------------------------------------------------
    def session_created(self, settings: SessionConfig, model: str) -> OutEvent:
        self._settings = settings
        return se.SessionCreated(
            session=settings.to_session_object(session_id=self.session_id, model=model)
        )

    def session_updated(self, settings: SessionConfig, model: str) -> OutEvent:
        self._settings = settings
        return se.SessionUpdated(
            session=settings.to_session_object(session_id=self.session_id, model=model)
        )

    # Input ----------------------------------------------------------------------------
    def speech_started(self, audio_start_ms: int, item_id: str) -> OutEvent:
        return se.InputAudioBufferSpeechStarted(audio_start_ms=audio_start_ms, item_id=item_id)

    def speech_stopped(self, audio_end_ms: int, item_id: str) -> OutEvent:
        return se.InputAudioBufferSpeechStopped(audio_end_ms=audio_end_ms, item_id=item_id)

    def input_committed(self, item_id: str, previous_item_id: str | None) -> OutEvent:
        return se.InputAudioBufferCommitted(item_id=item_id, previous_item_id=previous_item_id)

    def input_cleared(self) -> OutEvent:
        return se.InputAudioBufferCleared()

    # Conversation ---------------------------------------------------------------------
    def item_added(self, item: conv.Item, previous: str | None) -> OutEvent:
        return se.ConversationItemAdded(item=wire_item(item), previous_item_id=previous)

    def item_done(self, item: conv.Item, previous: str | None) -> OutEvent:
        return se.ConversationItemDone(item=wire_item(item), previous_item_id=previous)

    def item_retrieved(self, item: conv.Item, streaming: wire.Item | None = None) -> OutEvent:
        """`streaming`: the item as its response streams it (a call in progress, whose slot
        is still the empty boundary)."""
        return se.ConversationItemRetrieved(item=streaming or wire_item(item))

    def item_deleted(self, item_id: str) -> OutEvent:
        return se.ConversationItemDeleted(item_id=item_id)

    def drained(self, kept: bool) -> OutEvent:
        """Why a drained session is ending, as the client's last `error` (ending.py rule 2)."""
        if kept:
            return self.error(
                "server_restarting",
                "The server is restarting; this connection is closing. Resume the session "
                "(session.resume) to continue it on another instance: its conversation is kept.",
                None,
                None,
                "server_error",
            )
        return self.closing(CloseRequested("server_shutting_down"))

    def closing(self, request: CloseRequested) -> OutEvent:
        """Why the session is ending, as the client's last `error`."""
        if request.reason == "server_shutting_down":
            return self.error(
                "server_shutting_down",
                "The server is shutting down; this session is closing. Reconnect to continue "
                "(conversation state is not carried over).",
                None,
                None,
                "server_error",
            )
        limit = duration_words(request.max_session_s)
        return self.error(
            "session_expired", f"Your session hit the maximum duration of {limit}.", None, None
        )

    def transcription(self, ready: TranscriptReady) -> OutEvent:
        if ready.transcript is not None:
            return se.ConversationItemInputAudioTranscriptionCompleted(
                item_id=ready.item_id,
                transcript=ready.transcript,
                usage=se.TranscriptionUsageDuration(seconds=round(ready.seconds, 3)),
            )
        return se.ConversationItemInputAudioTranscriptionFailed(
            item_id=ready.item_id,
            error=se.TranscriptionError(
                type="transcription_error", code="transcription_failed", message=ready.error
            ),
        )

    def item_truncated(self, item_id: str, content_index: int, audio_end_ms: int) -> OutEvent:
        return se.ConversationItemTruncated(
            item_id=item_id, content_index=content_index, audio_end_ms=audio_end_ms
        )

    def context(self, view: conv.ContextView) -> OutEvent:
        return se.ConversationContext(
            items=tuple(wire_item(item) for item in view.items),
            audio_inputs=view.audio_inputs,
            images=view.images,
            bytes=view.bytes,
        )

    # Responses ------------------------------------------------------------------------
    def _response(
        self,
        rid: str,
        modalities: tuple[Modality, ...],
        status: ResponseStatus = "in_progress",
        *,
        in_conversation: bool = True,
        **extra: object,
    ) -> Response:
        audio = None
        if "audio" in modalities:
            output = ResponseAudioOutput(
                format=self._settings.output_format, voice=self._settings.voice
            )
            audio = ResponseAudio(output=output)
        return Response(
            id=rid,
            status=status,
            # An out-of-band response (`conversation: "none"`) is in no conversation.
            conversation_id=self.conversation_id if in_conversation else None,
            output_modalities=modalities,
            max_output_tokens=self._settings.max_output_tokens,
            audio=audio,
            **extra,  # type: ignore[arg-type]
        )

    def response_started(
        self,
        rid: str,
        item_id: str | None,
        previous_item_id: str | None,
        modalities: tuple[Modality, ...],
        request: InferenceRequest,
        *,
        in_conversation: bool = True,
    ) -> list[OutEvent]:
        """`response.created` and its message item; `item_id` None: the reply is a call alone,
        whose item is announced with the call (`call_started`)."""
        created = se.ResponseCreated(
            response=self._response(
                rid,
                modalities,
                in_conversation=in_conversation,
                metadata=request.metadata or None,
            )
        )
        if item_id is None:
            return [created]
        item = wire.MessageItem(id=item_id, status="in_progress", role="assistant")
        part = se.response_part(
            wire.OutputAudio(transcript="") if "audio" in modalities else wire.OutputText(text="")
        )
        return [
            created,
            se.ResponseOutputItemAdded(response_id=rid, output_index=0, item=item),
            se.ConversationItemAdded(item=item, previous_item_id=previous_item_id),
            se.ResponseContentPartAdded(
                response_id=rid, item_id=item_id, output_index=0, content_index=0, part=part
            ),
        ]

    def audio_delta(self, rid: str, item_id: str, audio: bytes, text: str) -> list[OutEvent]:
        out: list[OutEvent] = [
            se.ResponseOutputAudioDelta(
                response_id=rid, item_id=item_id, output_index=0, content_index=0, delta=audio
            )
        ]
        if text:
            out.append(
                se.ResponseOutputAudioTranscriptDelta(
                    response_id=rid, item_id=item_id, output_index=0, content_index=0, delta=text
                )
            )
        return out

    def text_delta(self, rid: str, item_id: str, text: str, *, audio: bool) -> OutEvent:
        if audio:
            return se.ResponseOutputAudioTranscriptDelta(
                response_id=rid, item_id=item_id, output_index=0, content_index=0, delta=text
            )
        return se.ResponseOutputTextDelta(
            response_id=rid, item_id=item_id, output_index=0, content_index=0, delta=text
        )

    def message_done(
        self,
        rid: str,
        item_id: str,
        status: ResponseStatus,
        *,
        transcript: str,
        audio: bool,
        previous_item_id: str | None = None,
    ) -> tuple[list[OutEvent], wire.MessageItem]:
        """The message item's closing events, and the item as they sent it: `completed` only
        when its response is; its content's `.done` ones when the reply ended on its own
        (`completed`, or `incomplete`: cut short by the output budget, what it said is all it
        says, and OpenAI closes its content so too), not when it was cancelled or failed."""
        part: wire.ContentPart = (
            wire.OutputAudio(transcript=transcript) if audio else wire.OutputText(text=transcript)
        )
        item_status: wire.ItemStatus = "completed" if status == "completed" else "incomplete"
        item = wire.MessageItem(id=item_id, status=item_status, role="assistant", content=(part,))
        ids = {"response_id": rid, "item_id": item_id, "output_index": 0, "content_index": 0}
        out: list[OutEvent] = []
        if status in ("completed", "incomplete"):
            if audio:
                out.append(se.ResponseOutputAudioDone(**ids))  # type: ignore[arg-type]
                out.append(se.ResponseOutputAudioTranscriptDone(transcript=transcript, **ids))  # type: ignore[arg-type]
            else:
                out.append(se.ResponseOutputTextDone(text=transcript, **ids))  # type: ignore[arg-type]
            out.append(se.ResponseContentPartDone(part=se.response_part(part), **ids))  # type: ignore[arg-type]
        out.append(se.ResponseOutputItemDone(response_id=rid, output_index=0, item=item))
        # As in its `.added`: the JS Agents SDK places the item in its history by this one.
        out.append(se.ConversationItemDone(item=item, previous_item_id=previous_item_id))
        return out, item

    def call_started(self, rid: str, call: CallOutput, previous: str | None) -> list[OutEvent]:
        item = call.item("in_progress", "")
        return [
            se.ResponseOutputItemAdded(response_id=rid, output_index=call.output_index, item=item),
            se.ConversationItemAdded(item=item, previous_item_id=previous),
        ]

    def call_delta(self, rid: str, call: CallOutput, delta: str) -> OutEvent:
        return se.ResponseFunctionCallArgumentsDelta(
            response_id=rid,
            item_id=call.item_id,
            output_index=call.output_index,
            call_id=call.call_id,
            delta=delta,
        )

    def call_done(
        self,
        rid: str,
        call: CallOutput,
        arguments: str,
        completed: bool,
        previous_item_id: str | None = None,
    ) -> tuple[list[OutEvent], wire.FunctionCallItem]:
        """The call's closing events: `arguments.done` only for a complete call (a cut one's
        arguments are no call to run), and the item as they sent it."""
        item = call.item("completed" if completed else "incomplete", arguments)
        out: list[OutEvent] = []
        if completed:
            out.append(
                se.ResponseFunctionCallArgumentsDone(
                    response_id=rid,
                    item_id=call.item_id,
                    output_index=call.output_index,
                    call_id=call.call_id,
                    name=call.name,
                    arguments=arguments,
                )
            )
        out.append(
            se.ResponseOutputItemDone(response_id=rid, output_index=call.output_index, item=item)
        )
        out.append(se.ConversationItemDone(item=item, previous_item_id=previous_item_id))
        return out, item

    def response_done(
        self,
        rid: str,
        status: ResponseStatus,
        reason: str | None,
        *,
        output: tuple[wire.Item, ...],
        audio: bool,
        output_tokens: int,
        metadata: dict[str, str] | None = None,
        in_conversation: bool = True,
    ) -> OutEvent:
        modalities: tuple[Modality, ...] = ("audio",) if audio else ("text",)
        details = None
        if status == "failed":
            details = StatusDetails(
                type="failed", error=StatusError(type="server_error", message=reason)
            )
        elif status == "incomplete":
            details = StatusDetails(
                type="incomplete",
                reason=_INCOMPLETE_REASONS.get(reason or "", "max_output_tokens"),
            )
        elif status != "completed":
            details = StatusDetails(
                type="cancelled",
                reason=_CANCEL_REASONS.get(reason or "", "client_cancelled"),  # type: ignore[arg-type]
            )
        usage = Usage(
            total_tokens=output_tokens,
            output_tokens=output_tokens,
            output_token_details=OutputTokenDetails(
                text_tokens=0 if audio else output_tokens,
                audio_tokens=output_tokens if audio else 0,
            ),
        )
        return se.ResponseDone(
            response=self._response(
                rid,
                modalities,
                status,
                in_conversation=in_conversation,
                status_details=details,
                output=output,
                usage=usage,
                metadata=metadata,
            )
        )

    def cleared(self, rid: str) -> OutEvent:
        return se.OutputAudioBufferCleared(response_id=rid)

    def acknowledged(self, result: AckResult) -> OutEvent:
        return se.PlaybackAcknowledged(
            response_id=result.response_id,
            item_id=result.item_id,
            played_ms=result.played_ms,
            committed_ms=result.committed_ms,
            history_committed=result.history_committed,
        )

    def error(
        self,
        code: str,
        message: str,
        param: str | None,
        event_id: str | None,
        error_type: str = "invalid_request_error",
    ) -> OutEvent:
        return se.ErrorEvent(
            error=se.ErrorInfo(
                type=error_type,
                code=code,
                message=message,
                param=param,
                event_id=event_id,
            )
        )


def duration_words(seconds: float) -> str:
    """OpenAI's wording for its 60-minute limit; short test limits in seconds."""
    minutes = seconds / 60
    if minutes >= 1 and minutes == int(minutes):
        return f"{int(minutes)} minute" + ("s" if minutes != 1 else "")
    return f"{seconds:g} seconds"

"""The session core's responses: the live ones, the fence, and what their charts decide.

`Responses` is the session core's response part (orchestrator/session/core.py owns it, beside
`Turns`, `History` and `Tools`). It owns the live responses (`live`, each with its
`ResponseChart`), the response fence, the request a response is given, and the deltas a
response streams to the client; nobody else writes them. What a response chart decides that
belongs to another part (open or cancel the backend stream, a call, the history, the session
chart's `ResponseFinished`/`ResponseSettled`, `response.done`) comes back from `feed` and
`output` as `(live, effect)` pairs, which the core carries out in order, each before the part
goes on (the methods are generators, as `Turns`'s are: the core's routing of one effect may
feed another chart before the next effect of this one runs). Rules (docs/protocol.md):
1. One live response per id, from `response.created` until its chart is terminal: `open`
   adds it, the end of `feed` (terminal) or `forget` removes it; nothing else does.
2. Rule 2 (the fence): each response gets the next fence number (`issue`); backend output is
   admitted only for a live response with that number while the fence admits it (`admit`);
   the number is closed when the response's `response.done` is decided, when its stream is
   cancelled, and when a held preemptive stream is dropped (`close`).
3. The request a response is given is built once, from the response's parameters over the
   session's settings (`request`); `output_modalities`, instructions and the token limit
   fall back to the session's, `inf` is no limit.
4. What the client is sent of a generating response: audio in the session's output format
   (one streaming encoder per response, dropped at its `response.done`), text as it comes,
   and its ms counted as pcm16 (what the ledger counts); text that came before any audio
   carries it is `unaligned` (heard only with the whole reply, rule 5).
5. A reply evicted from the ledger while still generating is forgotten with its stream
   cancelled (`forget` answers the `CancelBackend`, its fence number closed).
6. Of a `LiveResponse` this part writes the output it streamed (`text_parts`, `audio_ms`,
   `unaligned_text`, `output_tokens`, `encoder`); `Tools` writes the call (`call`,
   `message_closed`); no field is written by both.
Pure: no clock, no I/O.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator

from orchestrator.protocol import client as ce
from orchestrator.protocol.session_config import SessionConfig
from orchestrator.protocol.tools import FunctionTool, ToolChoice
from orchestrator.session.actions import CancelBackend, InferenceRequest
from orchestrator.session.audio import OutputAudio
from orchestrator.session.core_live import LiveResponse
from orchestrator.session.core_outbox import Ids, Outbox
from orchestrator.session.core_tools import output_events
from orchestrator.session.history import conversation as conv
from orchestrator.session.history.fencing import ResponseFence
from orchestrator.session.inputs import BackendAudio, BackendEvent, BackendText
from statecharts import effects as fx
from statecharts import response_events as rev
from statecharts.response import ResponseChart

__all__ = ["PCM16_24K_BYTES_PER_MS", "ResponseAsk", "Responses"]

PCM16_24K_BYTES_PER_MS = 48
# What a response chart decided for another part, with the response it is about.
ResponseAsk = tuple[LiveResponse, fx.Effect]


class Responses:
    def __init__(self, outbox: Outbox, ids: Ids, settings: Callable[[], SessionConfig]) -> None:
        self._out = outbox
        self._ids = ids
        self._settings = settings
        self._live: OrderedDict[str, LiveResponse] = OrderedDict()
        self._fence = ResponseFence()

    @property
    def live(self) -> OrderedDict[str, LiveResponse]:
        """The live responses, oldest first (read them; only this part changes them)."""
        return self._live

    @property
    def fence(self) -> ResponseFence:
        return self._fence

    # Rule 2: the fence ----------------------------------------------------------------
    def issue(self) -> tuple[str, int]:
        """A new response's id and fence number."""
        return self._ids.new("resp"), self._fence.issue()

    def close(self, seq: int) -> None:
        self._fence.close(seq)

    def admit(self, event: BackendEvent) -> LiveResponse | None:
        """The live response this output belongs to, or None: late output is dropped."""
        live = self._live.get(event.response_id)
        if live is None or live.seq != event.seq or not self._fence.admits(event.seq):
            return None
        return live

    # Rule 3: the request --------------------------------------------------------------
    def request(
        self,
        params: ce.ResponseParams | None,
        items: tuple[conv.Item, ...],
        tools: tuple[FunctionTool, ...],
        choice: ToolChoice,
    ) -> InferenceRequest:
        settings = self._settings()
        modalities = (params.output_modalities if params else None) or settings.output_modalities
        instructions = (
            params.instructions
            if params and params.instructions is not None
            else (settings.instructions)
        )
        max_tokens = (params.max_output_tokens if params else None) or settings.max_output_tokens
        return InferenceRequest(
            instructions=instructions,
            items=items,
            output_modalities=modalities,
            max_output_tokens=None if max_tokens == "inf" else int(max_tokens),
            voice=settings.voice,
            metadata=dict(params.metadata or {}) if params else {},
            tools=tools,
            tool_choice=choice,
        )

    # Rule 1: creation and removal -----------------------------------------------------
    def open(
        self, rid: str, seq: int, request: InferenceRequest, in_conversation: bool
    ) -> LiveResponse:
        """A new live response (its message item id taken now); not announced yet."""
        item_id = self._ids.new("item")
        chart = ResponseChart(rid, seq)
        message = not request.call_only  # a call alone: no message item at all
        audio = "audio" in request.output_modalities
        live = LiveResponse(chart, seq, item_id, audio, request, message, in_conversation)
        output_format = self._settings().output_format
        if live.audio and output_format.type != "audio/pcm":
            live.encoder = OutputAudio(output_format)
        self._live[rid] = live
        return live

    def announce(self, live: LiveResponse, previous: str | None) -> None:
        """`response.created` and the output items it opens."""
        rid = live.chart.response_id
        announced = live.item_id if live.message else None
        started = self._out.env.response_started(
            rid,
            announced,
            previous,
            live.request.output_modalities,
            live.request,
            in_conversation=live.in_conversation,
        )
        self._out.send_all(output_events(live, started))

    def forget(self, rid: str) -> CancelBackend | None:
        """Rule 5: drop a response; the stream to cancel when it was still generating."""
        live = self._live.pop(rid, None)
        if live is None or not live.chart.is_generating:
            return None
        self._fence.close(live.seq)
        return CancelBackend(rid, live.seq)

    def playing(self) -> Iterator[str]:
        """Responses generated in full whose audio may still be playing (each looked at when
        reached: the core's handling of one may end another)."""
        for rid, live in list(self._live.items()):
            if live.chart.is_live and not live.chart.is_generating:
                yield rid

    # The charts -----------------------------------------------------------------------
    def feed(self, rid: str, event: rev.ResponseEvent) -> Iterator[ResponseAsk]:
        """Feed a live response's chart; what it decides for others, in order."""
        live = self._live.get(rid)
        if live is None:
            return
        yield from self._effects(live, live.chart.feed(event))
        if live.chart.is_terminal:
            self._live.pop(rid, None)

    def output(self, live: LiveResponse, event: BackendEvent) -> Iterator[ResponseAsk]:
        """A chunk of output (the chart's `output` fast path)."""
        yield from self._effects(live, live.chart.forward(event))

    def done(self, live: LiveResponse, output_tokens: int) -> str | None:
        """The stream finished: the whole reply's transcript when no audio carries its text."""
        live.output_tokens = output_tokens
        text_only = not live.audio or live.audio_ms == 0 or live.unaligned_text
        return "".join(live.text_parts) if text_only else None

    def _effects(self, live: LiveResponse, effects: list[fx.Effect]) -> Iterator[ResponseAsk]:
        for effect in effects:
            if isinstance(effect, fx.SendCleared):
                self._out.send(self._out.env.cleared(live.chart.response_id))
            elif isinstance(effect, fx.CancelBackend):
                self._fence.close(effect.seq)
                yield live, effect
            elif isinstance(effect, fx.SendResponseDone):
                self._fence.close(live.seq)
                yield live, effect
                live.encoder = None
            else:
                yield live, effect

    # Rule 4: what the client is sent --------------------------------------------------
    def speak(self, live: LiveResponse, chunk: BackendAudio | BackendText) -> int:
        """Send a chunk the response speaks; the ms of audio it carried (pcm16)."""
        rid = live.chart.response_id
        env = self._out.env
        if isinstance(chunk, BackendText):
            live.text_parts.append(chunk.text)
            live.unaligned_text = live.unaligned_text or live.audio
            self._out.send(env.text_delta(rid, live.item_id, chunk.text, audio=live.audio))
            return 0
        before = live.audio_bytes // PCM16_24K_BYTES_PER_MS
        live.audio_bytes += len(chunk.audio)
        ms = live.audio_bytes // PCM16_24K_BYTES_PER_MS - before
        live.audio_ms += ms
        if chunk.text:
            live.text_parts.append(chunk.text)
        # The ledger counts pcm16 ms; only the bytes the client gets change (G.711 at 8 kHz,
        # one streaming encoder per response).
        audio = chunk.audio if live.encoder is None else live.encoder.push_pcm16(chunk.audio)
        self._out.send_all(env.audio_delta(rid, live.item_id, audio, chunk.text))
        return ms

"""SessionCore: the sans-IO realtime session (h11 style: typed inputs in, events and actions out).

It owns one session's SessionChart and four parts, each an object with its own state (as h11's
`Connection` owns its `ConnectionState`): `Turns` (orchestrator/session/core_turns.py: the
user's audio, turn detection, end of turn, preemptive responses, pause mode, the idle timer),
`History` (core_history.py: items, what was heard, transcripts), `Tools` (core_tools.py:
function calls) and `Responses` (core_responses.py: the live responses and their charts, the
response fence, the request a response is given, its deltas), and one before them all:
`InputProcessing` (core_echo.py: echo cancellation and noise reduction of the user's audio,
which hears every step's events as the echo's reference). What they all need is owned once
(core_outbox.py: the step's output, ids and timer tokens). The I/O layer feeds it typed inputs
(client events parsed at the edge, VAD probabilities, backend output, transcripts, timer
expiries, a close request) through `handle`, each with the caller's clock (`now_ms`), and
carries out what comes back: a `Step` of server events to send and actions to perform
(`StartBackend`, `CancelBackend`, `DetectSpeech`, `Transcribe`, `PredictTurn`, `ArmTimer`,
`CancelTimer`, `SessionEnd`), kept apart, and notes for metrics. No clock, no socket, no task
lives here, so every interleaving can be driven in memory by a test. The I/O layer reads nothing
else of it but `input_format` (to parse appends at the edge) and `prepare_input` (an append's
DSP, which it runs off its event loop before handing the append in).

Rules (docs/protocol.md) enforced here by routing chart effects (the charts decide; this module
acts):
1. Rule 2: backend output passes the preemption (held until its turn is committed), the fence
   (only the open response's number) and then the response's chart (only while generating).
2. Rule 3: one active response at a time (`conversation_already_has_active_response`); a
   cancel with nothing live is the session chart's rejection (`response_cancel_not_active`).
3. Rule 5/6: the conversation keeps only what was heard; pruning runs at every new user input.
4. Rule 7: every client error becomes an `error` event naming the client's `event_id`.
5. One routing point keeps the charts in step: a response chart's `ResponseFinished` /
   `ResponseSettled` go to the session chart, and nothing else moves its output region.
6. Anything that changes what a preemptive response was given (an item, a setting, the
   client's own response) is a `context_changed` for the session chart.
7. The parts never call each other nor the session chart: each answers what it decided
   (session chart events, a response to start, what a response chart decided for another
   part), and the core carries that out in order. Only `Responses` feeds a response chart.
8. Input processing sees the client's audio before any part does, and every step's events as
   they leave (`_flush`), so its reference is exactly what the client was told to play.
9. Turn boundaries: a step whose events commit a user turn, start or end a response, update
   the session, truncate, add or delete an item, or whose input is a turn's transcript, ends with
   one `Checkpoint` (after its events: orchestrator/session/actions.py). Between two of them
   nothing another process needs has changed but a live response, which a takeover ends.
10. Takeover (`restore`, `end_lost`): a session restored from another process's state ends
   the responses that process was generating (`CoreState.live`: their `response.done` not
   yet sent): each gets `output_audio_buffer.cleared` and `response.done` `failed`, once;
   history holds of them what the state held (their empty boundary).
11. Drain (`DrainRequested`): the session chart's lifetime region decides when the session
   ends (statecharts/session.py): at once, or once the answer it is generating has finished
   (any end of it, a barge-in's included, is a turn boundary), or at the drain's bound (the
   `drain` timer, armed here for `answer_ms` when the chart winds down), which cuts it as
   `close` does. The end (ending.py rule 2) says whether the session is kept for another
   worker (`kept`: 4001, resume it) or over (1001); its `error` event goes out after every
   event of the step, the answer's `response.done` included.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

from orchestrator.protocol import client as ce
from orchestrator.protocol import server as se
from orchestrator.protocol.errors import ProtocolError
from orchestrator.protocol.session_config import (
    AudioFormat,
    Interruption,
    SemanticVad,
    SessionConfig,
)
from orchestrator.session import ending
from orchestrator.session.actions import (
    ArmTimer,
    CancelBackend,
    Checkpoint,
    InferenceRequest,
    StartBackend,
)
from orchestrator.session.core_echo import InputDsp, InputProcessing, check
from orchestrator.session.core_history import History
from orchestrator.session.core_live import LiveResponse
from orchestrator.session.core_outbox import Ids, Outbox
from orchestrator.session.core_responses import ResponseAsk, Responses
from orchestrator.session.core_tools import Tools
from orchestrator.session.core_turns import Respond, TurnAsk, Turns
from orchestrator.session.core_types import (
    CoreConfig,
    CoreErrorCode,
    CoreInput,
    CoreState,
    PreemptNoted,
    Step,
)
from orchestrator.session.envelope import Envelope
from orchestrator.session.history import conversation as conv
from orchestrator.session.history.fencing import ResponseFence
from orchestrator.session.history.playback import PlaybackLedger
from orchestrator.session.inputs import (
    BackendAudio,
    BackendDone,
    BackendEvent,
    BackendFailed,
    BackendText,
    BackendToolCall,
    CloseRequested,
    DrainRequested,
    SpeechProbabilities,
    TimerFired,
    TranscriptReady,
    TurnPrediction,
    VadDown,
    VadEvent,
    VadPaused,
    VadResumed,
    VadSpeechStarted,
    VadSpeechStopped,
)
from orchestrator.session.turns.overlap import OverlapTracker
from orchestrator.session.turns.preemption import Preemption
from orchestrator.session.turns.user_input import UserInput
from statecharts import effects as fx
from statecharts import response_events as rev
from statecharts import session_events as ev
from statecharts.session import SessionChart

__all__ = ["CoreConfig", "CoreErrorCode", "CoreInput", "SessionCore", "Step"]

# Rule 9: server events that mark a turn boundary.
_BOUNDARIES = (
    se.InputAudioBufferCommitted,
    se.ResponseCreated,
    se.ResponseDone,
    se.SessionUpdated,
    se.ConversationItemTruncated,
    se.ConversationItemDone,
    se.ConversationItemDeleted,
)

# Client events that change what a preemptive response was given.
_CONTEXT_EVENTS = (
    ce.SessionUpdate,
    ce.ConversationItemCreate,
    ce.ConversationItemDelete,
    ce.ConversationItemTruncate,
    ce.ResponseCreate,
)


class SessionCore:
    def __init__(self, session_id: str, config: CoreConfig | None = None) -> None:
        self.config = config or CoreConfig()
        self.session_id = session_id
        self.settings = SessionConfig()
        self.chart = SessionChart()
        self.env = Envelope(session_id)
        self._now_ms = 0
        self._out = Outbox(self.env)
        self._ids = Ids(session_id, lambda item_id: item_id in self.conversation)
        self._history = History(self.config, self._out, self._ids, self._current_settings)
        self._turns = Turns(self.config, self._out, self._ids, self._current_settings)
        self._tools = Tools(self._out, self._ids, self._history.conversation)
        self._responses = Responses(self._out, self._ids, self._current_settings)
        self._processing = InputProcessing(self.config.processors)
        self._transcribed = False  # rule 9: this step stored a turn's transcript
        self._drain: DrainRequested | None = None  # rule 11: the drain asked for, if any
        self._drain_token = 0  # rule 11: the drain timer's arming

    def _current_settings(self) -> SessionConfig:
        return self.settings

    def _flush(self) -> Step:
        """Rule 8: the step's events leave, and the echo's reference hears them; rule 9."""
        step = self._out.flush()
        self._processing.heard(step.events, self._now_ms)
        if self._transcribed or any(isinstance(e, _BOUNDARIES) for e in step.events):
            self._transcribed = False
            step = Step(step.events, (*step.actions, Checkpoint()), step.notes)
        return step

    # What tests and metrics read ----------------------------------------------------------
    @property
    def conversation(self) -> conv.Conversation:
        return self._history.conversation

    @property
    def live(self) -> OrderedDict[str, LiveResponse]:
        return self._responses.live

    @property
    def fence(self) -> ResponseFence:
        return self._responses.fence

    @property
    def ledger(self) -> PlaybackLedger:
        return self._history.ledger

    @property
    def input(self) -> UserInput:
        return self._turns.input

    @property
    def overlap(self) -> OverlapTracker:
        return self._turns.overlap

    @property
    def _preemption(self) -> Preemption | None:
        return self._turns.preemption

    @property
    def buffered_ms(self) -> int:
        return self._turns.input.buffered_ms

    # The I/O layer's interface --------------------------------------------------------
    @property
    def input_format(self) -> AudioFormat:
        """The format appends are decoded from at the edge."""
        return self.settings.input_format

    def prepare_input(self, event: CoreInput) -> InputDsp | None:
        """An append's DSP (core_echo.py rule 12), for the I/O layer to run off its event loop
        (`InputDsp.run`, on any one thread) before it hands the same event to `handle`, with
        nothing else between; None for any other event, or with no input processing on."""
        if isinstance(event, ce.InputAudioBufferAppend):
            return self._processing.prepare(event.audio)
        return None

    def open(self, now_ms: int | None = None) -> Step:
        self._clock(now_ms)
        self._out.send(self.env.session_created(self.settings, self.config.model))
        return self._flush()

    # Takeover (orchestrator/session/resume/snapshot.py) ----------------------------------
    def state(self) -> CoreState:
        """What another process needs to go on with this session: settings, conversation,
        the id counter, and the responses still live (which it will have to end)."""
        generating = tuple(rid for rid, live in self.live.items() if live.chart.is_generating)
        return CoreState(self.settings, self.conversation.items, self._ids.count, generating)

    @classmethod
    def restore(
        cls, session_id: str, state: CoreState, config: CoreConfig | None = None
    ) -> SessionCore:
        """A core that goes on from `state` (taken by `state()` in another process): no event
        is sent (the client knows this session), nothing is live, and new ids follow the old
        ones."""
        core = cls(session_id, config)
        core._configure(state.settings)
        for item in state.items:
            core.conversation.add(item)
        core._ids.count = state.next_id
        return core

    def end_lost(self, response_ids: Iterable[str], now_ms: int | None = None) -> Step:
        """Rule 10: the responses another process was generating when it was lost."""
        self._clock(now_ms)
        for rid in response_ids:
            self._out.send(self.env.cleared(rid))
            self._out.send(
                self.env.response_done(
                    rid,
                    "failed",
                    "the server generating this response was lost; the session was taken over",
                    output=(),
                    audio=self.settings.audio_output,
                    output_tokens=0,
                )
            )
        return self._flush()

    def handle(self, event: CoreInput, now_ms: int | None = None) -> Step:
        """One input, with the caller's clock (ms, monotonic) when it has one."""
        self._clock(now_ms)
        if isinstance(event, ProtocolError):
            return self.reject(event)
        if isinstance(event, SpeechProbabilities):
            vad = self.settings.turn_detection
            threshold = vad.threshold if vad is not None else 0.5
            heard, verdicts = self._processing.over_echo(event, threshold)
            for verdict in verdicts:
                self._out.note(verdict)
            self._ask(self._turns.speech_probabilities(heard))
        elif isinstance(event, VadDown):
            self._turns.vad_unavailable(event.reason)
        elif isinstance(event, VadSpeechStarted | VadSpeechStopped | VadPaused | VadResumed):
            return self.vad(event)
        elif isinstance(event, TurnPrediction):
            self._ask(self._turns.turn_predicted(event))
        elif isinstance(
            event, BackendText | BackendAudio | BackendToolCall | BackendDone | BackendFailed
        ):
            return self.backend(event)
        elif isinstance(event, TranscriptReady):
            self._transcript(event)
        elif isinstance(event, TimerFired):
            self._timer(event)
        elif isinstance(event, CloseRequested):
            self._close(event)
        elif isinstance(event, DrainRequested):
            self._drain = event
            self._run_session(ev.Drain())
        else:
            return self.client(event)
        return self._flush()

    def client(self, event: ce.ClientEvent) -> Step:
        self._out.event_id = event.event_id
        try:
            self._client(event)
        finally:
            self._out.event_id = None
        return self._flush()

    def reject(self, err: ProtocolError) -> Step:
        """A client message that failed to parse: an error event, nothing else changes."""
        self._out.send(self.env.error(err.code, err.message, err.param, err.event_id))
        return self._flush()

    def vad(self, event: VadEvent) -> Step:
        """A turn-detection decision (the detector's own output; tests may feed it directly)."""
        self._ask(self._turns.vad_event(event))
        return self._flush()

    def backend(self, event: BackendEvent) -> Step:
        self._backend(event)
        return self._flush()

    def _clock(self, now_ms: int | None) -> None:
        if now_ms is not None:
            self._now_ms = max(self._now_ms, now_ms)
            self._turns.clock(self._now_ms)

    # Routing between the parts ------------------------------------------------------------
    def _ask(self, asks: Iterable[TurnAsk]) -> None:
        """Carry out what the turn part asks, in order."""
        for ask in asks:
            if isinstance(ask, ev.SessionEvent):
                self._run_session(ask)
            elif isinstance(ask, Respond):
                self._create_response(None)

    def _backend(self, event: BackendEvent) -> None:
        held = self._turns.hold(event)
        if held is not None:
            self._ask(held)  # not a response yet: held until its turn is committed, or dropped
            return
        live = self._responses.admit(event)
        if live is None:
            return  # rule 2: late output of a closed response is dropped here
        rid = event.response_id
        if isinstance(event, BackendAudio | BackendText | BackendToolCall):
            self._respond(self._responses.output(live, event))  # the chart's fast path
        elif isinstance(event, BackendDone):
            # Text that no audio carries is heard only as the whole reply's transcript.
            transcript = self._responses.done(live, event.output_tokens)
            pending = self._history.generated(rid, transcript, live.audio, self._now_ms)
            self._run_response(rid, rev.Complete(pending, event.reason))
            if pending:
                self._history.arm_playout(self._responses.playing())
        elif isinstance(event, BackendFailed):
            self._run_response(rid, rev.Fail(event.reason))

    def _transcript(self, ready: TranscriptReady) -> None:
        if ready.purpose == "overlap":
            self._ask(self._turns.overlap_transcribed(ready))
        elif ready.purpose == "preempt":
            heard = self._turns.preempt_transcript(ready)
            self._ask(heard.asks)
            if heard.start:
                self._start_preempted()
            if heard.turn is not None:
                self._transcript(heard.turn)
        elif ready.purpose == "end_of_turn":
            self._ask(self._turns.turn_heard(ready))
        else:
            self._history.transcript(ready)
            self._transcribed = True

    def _timer(self, fired: TimerFired) -> None:
        if fired.kind == "playout":
            self._played_out(fired.token)
        elif fired.kind == "transcripts":
            self._history.waited(fired.token)
        elif fired.kind == "drain":
            if fired.token == self._drain_token:
                self._run_session(ev.DrainOver())
        else:
            self._ask(self._turns.timer(fired))

    # Client events --------------------------------------------------------------------
    def _client(self, event: ce.ClientEvent) -> None:
        if isinstance(event, _CONTEXT_EVENTS):
            self._run_session(ev.ContextChanged())  # a preemptive response heard another context
        if isinstance(event, ce.SessionUpdate):
            self._update(event)
        elif isinstance(event, ce.InputAudioBufferAppend):
            self._turns.append(self._processing.clean(event.audio, self._now_ms))
        elif isinstance(event, ce.InputAudioBufferCommit):
            self._run_session(ev.Commit(self.buffered_ms, event.final, event.create_response))
        elif isinstance(event, ce.InputAudioBufferClear):
            self._turns.clear_input()
            self._run_session(ev.ClearInput())
            self._out.send(self.env.input_cleared())
        elif isinstance(event, ce.ConversationItemCreate):
            self._history.create_item(event, self._turns.promised_item_id)
        elif isinstance(event, ce.ConversationItemRetrieve):
            if event.item_id not in self.conversation:
                self._out.item_not_found(event.item_id, "retrieve")
                return
            streaming = self._tools.live_call_item(self.live.values(), event.item_id)
            self._history.retrieve(event.item_id, streaming)
        elif isinstance(event, ce.ConversationItemDelete):
            self._history.delete(event.item_id)
        elif isinstance(event, ce.ConversationItemTruncate):
            self._truncate(event.item_id, event.content_index, event.audio_end_ms)
        elif isinstance(event, ce.ResponseCreate):
            self._create_response(event.response)
        elif isinstance(event, ce.ResponseCancel):
            rid = event.response_id
            self._run_session(ev.Cancel(rid, target_live=rid in self.live))
        elif isinstance(event, ce.OutputAudioBufferClear):
            self._run_session(ev.Clear(event.response_id))
        elif isinstance(event, ce.PlaybackAck):
            self._ack(event)
        elif isinstance(event, ce.ConversationContextRetrieve):
            self._out.send(self.env.context(self.conversation.prompt_view()))

    def _update(self, event: ce.SessionUpdate) -> None:
        if isinstance(event.session.turn_detection, SemanticVad) and not self.config.turn_model:
            self._out.error(
                "unsupported_turn_detection",
                "semantic_vad needs the `turn` model, which this server does not run; use "
                "'server_vad' or null.",
                "session.audio.input.turn_detection.type",
            )
            return
        # A tool choice is checked against the tools when a response starts (core_tools.py).
        settings = self.settings.apply(event.session)
        problem = check(settings)
        if problem is not None:
            self._out.error("invalid_value", problem.message, problem.param)
            return
        self._configure(settings)
        self._out.send(self.env.session_updated(self.settings, self.config.model))

    def _configure(self, settings: SessionConfig) -> None:
        """Settings checked already (a `session.update`, or a snapshot's) take effect."""
        self.settings = settings
        self._processing.configure(settings, self._turns.input.clock_ms)
        self._history.configure(self.settings.truncation)
        vad = self.settings.turn_detection
        policy = vad.policy if vad is not None else Interruption()
        self.chart.configure(
            turn_detection="manual" if vad is None else vad.type,
            create_response=vad.create_response if vad is not None else False,
            interrupt_response=vad.interrupt_response if vad is not None else False,
            interruption=policy.mode,
            min_speech_ms=policy.min_speech_ms,
            preemptive=vad is not None and vad.preemptive,
        )
        self._turns.configure(vad)

    def _truncate(self, item_id: str, content_index: int, audio_end_ms: int) -> None:
        rid = self._history.truncatable(item_id, audio_end_ms)
        if rid is None:
            return
        if rid in self.live:
            self._run_response(rid, rev.Truncate(audio_end_ms))
        else:
            self._history.cut(rid, audio_end_ms, self._now_ms)
            self._write_history(rid)
        self._run_session(ev.Truncate(rid))  # ends a pause of it (pause mode)
        self._out.send(self.env.item_truncated(item_id, content_index, audio_end_ms))

    def _ack(self, event: ce.PlaybackAck) -> None:
        if not self._history.ackable(event):
            return
        rid = event.response_id
        self._processing.acknowledged(rid, event.played_ms, self._now_ms, event.input_ms)
        # The client acknowledges: rule 5 decides from now on (the chart's heard_by region).
        self._run_session(ev.PlaybackAcked(rid))
        result = self._history.ack(event, self._now_ms)
        if result.heard is not None:
            # A live reply's chart decides what the ACK means; a settled one is rewritten.
            if rid in self.live and event.truncate:
                self._run_response(rid, rev.Truncate(result.played_ms))
                self._run_session(ev.Truncate(rid))
            elif rid in self.live:
                self._run_response(rid, rev.Played(result.played_ms))
            else:
                self._write_history(rid)
        self._out.send(self.env.acknowledged(result))

    def _played_out(self, token: int) -> None:
        if not self._history.is_playout(token):
            return
        for rid in self._responses.playing():
            if self._history.played_out(rid, self._now_ms):
                self._run_response(rid, rev.Played())
        self._history.arm_playout(self._responses.playing())  # the next reply's end

    def _write_history(self, rid: str) -> None:
        live = self.live.get(rid)
        self._history.write(rid, live.audio if live is not None else None)

    # Session end ----------------------------------------------------------------------
    def _close(self, request: CloseRequested) -> None:
        """The generating response gets its terminal (cancelled) and the client the reason."""
        self._run_session(ev.Close())
        self._out.send(self.env.closing(request))
        self._out.act(ending.closing(request))

    def _wind_down(self) -> None:
        """Rule 11: the drain's bound on the answer still generating."""
        assert self._drain is not None
        self._drain_token = self._ids.token()
        deadline = self._now_ms + self._drain.answer_ms
        self._out.act(ArmTimer("drain", deadline, self._drain_token))

    def _end_drained(self) -> None:
        """Rule 11: a reply still generating gets its terminal (as `close`), then the end."""
        assert self._drain is not None
        self._run_session(ev.Close())
        self._out.send(self.env.drained(self._drain.kept))
        self._out.act(ending.drained(self._drain.kept))

    # Responses ------------------------------------------------------------------------
    def _create_response(
        self, params: ce.ResponseParams | None, adopted: Preemption | None = None
    ) -> None:
        refused = self.chart.feed(ev.ResponseRequested())  # rule 3: the chart decides
        if refused:
            for effect in refused:
                self._session_effect(effect)
            return
        if self._tools.refuse(self.settings, params):
            return
        self._history.prune()
        if adopted is not None:
            request, rid, seq = adopted.start.request, adopted.response_id, adopted.seq
        else:
            prompt = self._history.response_input(params)
            if prompt is None:
                return  # an item it references is unknown: told, nothing started
            request = self._request(params, prompt)
            rid, seq = self._responses.issue()
        self._turns.disarm_idle()
        # Out of band (`conversation: "none"`): nothing of it enters the conversation.
        in_conversation = params is None or params.conversation != "none"
        live = self._responses.open(rid, seq, request, in_conversation)
        evicted, previous = self._history.open_reply(
            rid, live.item_id, live.message and in_conversation
        )
        for old in evicted:
            self._cancel(self._responses.forget(old))
        self._responses.announce(live, previous)
        self._run_session(ev.ResponseStarted(rid))
        if adopted is None:
            self._run_response(rid, rev.Start())
            return
        self._run_response(rid, rev.Adopt())
        if not adopted.started:
            # The cascade: still waiting for the transcript.
            self._history.start_backend(adopted.start, self._now_ms)

    def _request(
        self, params: ce.ResponseParams | None, items: tuple[conv.Item, ...]
    ) -> InferenceRequest:
        return self._responses.request(params, items, *self._tools.tools_for(self.settings, params))

    def _cancel(self, cancel: fx.CancelBackend | None) -> None:
        """A stream to cancel (its fence number already closed by the response part)."""
        if cancel is None or self._history.drop_wait(cancel.response_id):
            return  # never started: nothing to cancel but the wait
        self._out.act(cancel)

    # Preemptive responses: the session chart decides, the turn part holds ---------------
    def _preempt(self) -> None:
        """`StartPreemptive`: a response on the turn so far, held by the turn part."""
        item_id = self._turns.promise_item_id()  # the turn's commit creates this item
        turn = conv.Item(item_id, "user", self._turns.input.peek())
        request = self._request(None, (*self.conversation.prompt_view().items, turn))
        start = StartBackend(*self._responses.issue(), request)
        if self._turns.preempt(start, item_id):
            self._start_preempted()

    def _start_preempted(self) -> None:
        held = self._turns.preemption
        if held is not None:
            self._turns.start_preempted(self._history.known_transcripts(held.start))

    def _adopt(self) -> None:
        held = self._turns.take_preemption()
        if held is None:
            self._create_response(None)
            return
        self._create_response(None, adopted=held)
        if held.response_id not in self.live:
            # Refused (its tool choice fits no tool in force): it never becomes a response.
            self._discard(held, "not_answered")
            return
        self._out.note(PreemptNoted("used"))
        for event in held.take_held():
            self._backend(event)

    def _discard(self, held: Preemption, reason: fx.PreemptDropReason) -> None:
        self._out.note(PreemptNoted("dropped", reason))
        self._responses.close(held.seq)
        if held.started:
            self._out.act(CancelBackend(held.response_id, held.seq))

    def _commit_input(self) -> None:
        item = self._history.commit_turn(*self._turns.take_turn())
        if self._history.wants_transcript():
            self._history.transcribe(item, self._turns.preempted_transcript(item.id))

    # Effects: the one routing point ---------------------------------------------------
    def _run_session(self, event: ev.SessionEvent) -> None:
        for effect in self.chart.feed(event):
            self._session_effect(effect)

    def _session_effect(self, effect: fx.Effect) -> None:
        if isinstance(effect, fx.AnnounceSpeechStarted):
            # The id is taken only once the chart has started a turn: it names the item that
            # the matching commit will create (one promised by timeout_triggered is kept).
            item_id = self._turns.promise_item_id()
            self._out.send(self.env.speech_started(effect.audio_start_ms, item_id))
        elif isinstance(effect, fx.AnnounceSpeechStopped):
            item_id = self._turns.promise_item_id()
            self._out.send(self.env.speech_stopped(effect.audio_end_ms, item_id))
        elif isinstance(effect, fx.CommitInput):
            self._commit_input()
        elif isinstance(effect, fx.CreateResponse):
            self._create_response(None)
        elif isinstance(effect, fx.InterruptResponses):
            stop = rev.BargeIn if effect.reason == "turn_detected" else rev.Cancel
            for rid in list(self.live):
                self._run_response(rid, stop(effect.reason))
        elif isinstance(effect, fx.InterruptResponse):
            if effect.response_id in self.live:
                self._run_response(effect.response_id, rev.Cancel(effect.reason))
            else:
                self._out.send(self.env.cleared(effect.response_id))
        elif isinstance(effect, fx.AnswerClear):
            self._out.send(self.env.cleared(effect.response_id or ""))
        elif isinstance(effect, fx.PauseOutput):
            self._history.pause(effect.response_id, self._now_ms)
            self._out.send(se.OutputAudioBufferPaused(response_id=effect.response_id))
        elif isinstance(effect, fx.ResumeOutput):
            self._history.resume(effect.response_id, self._now_ms)
            if effect.response_id in self.live:
                self._history.arm_playout(self._responses.playing())
            self._out.send(se.OutputAudioBufferResumed(response_id=effect.response_id))
        elif isinstance(effect, fx.OverlapSpeechStarted):
            self._ask(self._turns.overlap_started(effect.audio_start_ms))
        elif isinstance(effect, fx.OverlapSpeechStopped):
            self._ask(self._turns.overlap_stopped(effect.audio_end_ms))
        elif isinstance(effect, fx.HearByAcknowledgement):
            for rid in self._history.hear_by_acknowledgement(effect.response_id):
                self._write_history(rid)  # back to the empty boundary until rule 5 settles it
        elif isinstance(effect, fx.OverlapDecided):
            self._turns.overlap_decided(effect)
        elif isinstance(effect, fx.DropInput):
            self._turns.drop_input()
        elif isinstance(effect, fx.StartPreemptive):
            self._preempt()
        elif isinstance(effect, fx.AdoptPreemptive):
            self._adopt()
        elif isinstance(effect, fx.DropPreemptive):
            held = self._turns.take_preemption()
            if held is not None:
                self._discard(held, effect.reason)
        elif isinstance(effect, fx.Reject):
            self._out.error(effect.code, effect.message)
        elif isinstance(effect, fx.WindDown):
            self._wind_down()
        elif isinstance(effect, fx.EndSession):
            self._end_drained()

    def _run_response(self, rid: str, event: rev.ResponseEvent) -> None:
        self._respond(self._responses.feed(rid, event))

    def _respond(self, asks: Iterable[ResponseAsk]) -> None:
        """Carry out what a response chart decided for the other parts, in order."""
        for live, effect in asks:
            rid = live.chart.response_id
            if isinstance(effect, fx.OpenStream):
                start = StartBackend(rid, live.seq, live.request)  # the core holds the prompt
                self._history.start_backend(start, self._now_ms)
            elif isinstance(effect, fx.CancelBackend):
                self._cancel(effect)
            elif isinstance(effect, fx.ForwardOutput):
                self._forward(live, effect.chunk)
            elif isinstance(effect, fx.SendResponseDone):
                self._tools.end_output(live, effect.status, effect.reason)
                # A reply cut short (`incomplete`) has no call to run: its call was cut too.
                if effect.status == "incomplete" or (
                    effect.status == "completed" and live.call is None
                ):
                    self._turns.arm_idle(self._history.playout_ends_at(rid, self._now_ms))
            elif isinstance(effect, fx.CommitCall):
                self._tools.commit_call(live)
            elif isinstance(effect, fx.CommitHistory):
                if effect.mode == "cut":
                    self._history.cut(rid, effect.audio_end_ms, self._now_ms)
                self._write_history(rid)
            elif isinstance(effect, fx.ResponseFinished):
                self._run_session(ev.ResponseFinished(rid, effect.audio_pending))
            elif isinstance(effect, fx.ResponseSettled):
                self._run_session(ev.ResponseSettled(rid))

    def _forward(self, live: LiveResponse, chunk: object) -> None:
        if isinstance(chunk, BackendToolCall):
            self._tools.forward_call(live, chunk)
        elif not self._tools.speaks(live):
            return  # after its call started, or a call alone: nothing is spoken
        elif isinstance(chunk, BackendAudio | BackendText):
            ms = self._responses.speak(live, chunk)
            if isinstance(chunk, BackendAudio):
                self._history.append_audio(live.chart.response_id, ms, chunk.text, self._now_ms)

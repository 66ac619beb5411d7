"""Random interleavings through the charts and the core (hypothesis stateful).

After every step: one terminal per response; no delta of a response after its
interruption or terminal; history holds only heard content; the current input is last;
fencing and playback memory do not grow with the number of interruptions; the session
chart says a response generates exactly while its latest one does
(`rule3_output_region_follows_the_responses`: else `response.create` is refused with nothing
running). Pause mode (docs/protocol.md "Interruption policy") is driven too, through real VAD
answers, partial transcripts and timer expiries: exactly one `overlap.decision` per pause,
every admitted backend chunk delivered exactly once while paused (nothing lost on resume), no
delta after an interrupt.

Semantic end of turn and preemptive responses (docs/protocol.md "Semantic end of turn and
preemptive responses") are driven as well (`CoreConfig(turn_model=True)`): sessions on
server_vad or semantic_vad (any eagerness), with `preemptive_response` on or off, chosen at
the start or by a later `session.update`; speech and silence reach the core as real VAD
answers (probabilities for the `DetectSpeech` chunks), so candidate pauses (160 ms of
silence), resumed speech and commits happen as they would; the turn model's `PredictTurn`s
are answered (complete, incomplete, in between, a NaN, or an error), at once or later and out
of order; a preemptive response's stream sends audio, text, done or failed at any time, also
after it was dropped; in the cascade (`CascadePreemptionMachine`) the turn so far is
transcribed first, and transcripts and the transcript wait's timer come at any time too.
Invariants, after every step, on the server events sent so far (as encoded JSON):
- preempt_dropped_never_on_the_wire: no event names (`response_id`, `response.id`) a
  preemptive response that was not adopted; an adopted one is first named by its
  `response.created`. (A client that names a guessed id itself may have it echoed by its
  `cleared` or `error`.)
- preempt_created_after_its_commit: an adopted preemptive response's `response.created`
  comes after the `input_audio_buffer.committed` of the turn it heard (its provisional user
  item's id), which came after it started; and its held output is replayed first, in order
  (the audio it was held with is its first audio deltas).
- preempt_one_held_and_bounded: at most one preemptive response is held (the core's
  `_preemption`, the one this test saw started and neither adopted nor dropped), every drop
  of a started stream cancels it (`CancelBackend`), its held output stays within
  `preempt_max_events` / `preempt_max_bytes`, and no other response generates while it is
  held (rule 3).
- The invariants above (rule 2, 3, 5, 6, pause mode, memory) hold for adopted responses too,
  the output of a held or dropped preemptive stream produces no event at all, and no backend
  is started twice for one response.

Function calling (docs/protocol.md "Function calling") is driven too: the session's or one
response's tools and tool choice change at any time, a backend streams a call's pieces (also
late, also after text), and the client answers a call with a `function_call_output`:
- rule2 covers `response.function_call_arguments.delta` as any delta;
- calls_heard_only_complete: a call in the history belongs to a response that completed;
- outputs_closed_by_their_terminal: every output item a response announced is closed exactly
  once before its `response.done`, whose `output` lists exactly those items; a reply that is a
  call alone announces no message.

Three machines: `SessionMachine` (everything, any start), `PreemptionMachine` (always started
with preemptive responses or semantic_vad, with more of the user's turns and of the held
stream's output) and `CascadePreemptionMachine` (the same on the cascade).
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Literal

import hypothesis.strategies as st
import msgspec
from hypothesis import HealthCheck, settings
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from orchestrator.protocol import client as ce
from orchestrator.protocol import items as wire
from orchestrator.protocol import server as se
from orchestrator.protocol.codec import ServerEventEncoder
from orchestrator.protocol.session_config import (
    Eagerness,
    Interruption,
    SemanticVad,
    ServerVad,
    SessionPatch,
    TurnDetection,
)
from orchestrator.protocol.tools import FunctionTool, ToolChoice, ToolChoiceFunction
from orchestrator.session.actions import (
    ArmTimer,
    CancelBackend,
    DetectSpeech,
    PredictTurn,
    StartBackend,
    Transcribe,
)
from orchestrator.session.core import CoreConfig, SessionCore, Step
from orchestrator.session.history import conversation as conv
from orchestrator.session.inputs import (
    BackendAudio,
    BackendDone,
    BackendEvent,
    BackendFailed,
    BackendText,
    BackendToolCall,
    SpeechProbabilities,
    TimerFired,
    TranscriptReady,
    TurnPrediction,
    VadSpeechStarted,
    VadSpeechStopped,
)

CHUNK_MS = 40
VAD_CHUNK_MS = 32
PCM16_BYTES_PER_MS = 48
DELTAS = (
    se.ResponseOutputAudioDelta,
    se.ResponseOutputAudioTranscriptDelta,
    se.ResponseOutputTextDelta,
    se.ResponseFunctionCallArgumentsDelta,
)
WEATHER = FunctionTool(
    name="get_weather", parameters={"type": "object", "properties": {"city": {"type": "string"}}}
)
TOOL_CHOICES: tuple[ToolChoice, ...] = (
    "auto",
    "none",
    "required",
    ToolChoiceFunction(name="get_weather"),
)
# Small enough that a preemptive stream overflows within a run (five 40 ms chunks fit).
PREEMPT_MAX_EVENTS = 8
PREEMPT_MAX_BYTES = 10_000
CONFIG = CoreConfig(
    transcriber=True,
    turn_model=True,
    preempt_max_events=PREEMPT_MAX_EVENTS,
    preempt_max_bytes=PREEMPT_MAX_BYTES,
)
# The cascade hears the user through transcripts: a response's StartBackend waits for its
# turns' (bounded by a timer), a preemptive one for the turn so far transcribed first.
CASCADE = dataclasses.replace(CONFIG, transcripts_for_pipeline=True)
MODES = (
    "vad",
    "vad_no_interrupt",
    "vad_no_create",
    "manual",
    "pause",
    "preempt",
    "preempt_no_create",
    "preempt_no_interrupt",
    "semantic",
    "semantic_preempt",
    "semantic_preempt_pause",
)
EAGERNESS: tuple[Eagerness, ...] = ("low", "medium", "high", "auto")


@dataclass
class Resp:
    seq: int
    item_id: str = ""
    generated_ms: int = 0
    heard_bound_ms: int = 0  # the most the client has said it played or truncated at
    finished: bool = False
    fully_acked: bool = False
    cut: bool = False
    # Cut by the server's clear and not yet spoken of by the client: its first ACK or truncate
    # within the grace may still set the cut (docs/protocol.md rule 5's amendment).
    provisional: bool = False
    # Created after the client's first ACK: rule 5 as written holds for it. Before, history
    # is OpenAI's (docs/protocol.md "History without acknowledgements").
    acknowledged: bool = False
    created: int = 0
    dones: int = 0
    closed: bool = False  # response.done or cleared seen: no delta may follow
    deltas_after_close: int = 0
    audio: list[bytes] = field(default_factory=list)  # its audio deltas, in order
    added: list[str] = field(default_factory=list)  # output items announced, in order
    closed_items: list[str] = field(default_factory=list)  # output items closed, in order
    output: list[str] | None = None  # its response.done's output item ids
    message: bool = False  # it announced a message item


@dataclass
class Pre:
    """A preemptive response: started at a candidate pause, for a response the client has not
    seen (its `StartBackend` comes at once, or in the cascade once the turn so far is
    transcribed)."""

    start: StartBackend
    started_at: int  # the wire index it started at (before that step's events)
    stream_started: bool = False  # its StartBackend was emitted
    state: Literal["held", "dropped", "adopted"] = "held"
    created_at: int | None = None
    committed_between: bool = False  # its turn's committed between its start and its created
    held_audio: list[bytes] = field(default_factory=list)  # what it was held with, in order
    ended: bool = False  # its stream said done or failed

    @property
    def item_id(self) -> str:
        return self.start.request.items[-1].id


@dataclass
class Log:
    responses: dict[str, Resp] = field(default_factory=dict)
    user_items: list[str] = field(default_factory=list)
    pauses: int = 0
    decisions: int = 0
    preempts: dict[str, Pre] = field(default_factory=dict)
    started: set[str] = field(default_factory=set)  # every StartBackend's response id
    wire: int = 0  # server events sent so far
    named: dict[str, int] = field(default_factory=dict)  # response id -> first wire index
    commits: list[tuple[int, str]] = field(default_factory=list)  # (wire index, item id)
    call_ids: list[str] = field(default_factory=list)  # every call announced


def _named(event: dict[str, Any]) -> set[str]:
    """The response ids an encoded event names (`response_id` anywhere, `response.id`)."""
    names: set[str] = set()

    def walk(value: object) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                if key == "response_id" and isinstance(inner, str):
                    names.add(inner)
                walk(inner)
        elif isinstance(value, list):
            for inner in value:
                walk(inner)

    walk(event)
    response = event.get("response")
    if isinstance(response, dict) and isinstance(response.get("id"), str):
        names.add(response["id"])
    return names


def _vad(mode: str, eagerness: Eagerness) -> TurnDetection | None:
    pause = Interruption(mode="pause", min_speech_ms=80, resume_after_ms=100)
    return {
        "pause": ServerVad(silence_duration_ms=100, interruption=pause),
        "vad": ServerVad(),
        "vad_no_interrupt": ServerVad(interrupt_response=False),
        "vad_no_create": ServerVad(create_response=False),
        "manual": None,
        "preempt": ServerVad(preemptive_response=True),
        "preempt_no_create": ServerVad(preemptive_response=True, create_response=False),
        "preempt_no_interrupt": ServerVad(preemptive_response=True, interrupt_response=False),
        "semantic": SemanticVad(eagerness=eagerness),
        "semantic_preempt": SemanticVad(eagerness=eagerness, preemptive_response=True),
        "semantic_preempt_pause": SemanticVad(
            eagerness=eagerness, preemptive_response=True, interruption=pause
        ),
    }[mode]


class SessionMachine(RuleBasedStateMachine):
    config = CONFIG

    def __init__(self) -> None:
        super().__init__()
        self.core = SessionCore("s", self.config)
        self.log = Log()
        self.encoder = ServerEventEncoder()
        self.detects: deque[DetectSpeech] = deque(maxlen=4)
        self.asks: list[PredictTurn] = []  # the turn model's asks not yet answered
        self.timers: dict[str, int] = {}
        self.partial: Transcribe | None = None
        self.transcribes: list[Transcribe] = []  # turn and preempt transcripts not yet made
        self.clock_ms = 0
        self.speaking = False
        self.fence_size = sys.getsizeof(self.core.fence)
        # Which responses are preemptive ones (one started and adopted in a single step comes
        # with its response.created): those the core's `_preempt` starts.
        preempt = self.core._preempt

        def spy() -> None:
            preempt()
            held = self.core._preemption
            if held is not None:
                self.log.preempts[held.response_id] = Pre(held.start, self.log.wire)

        self.core._preempt = spy  # type: ignore[method-assign]
        self.feed(self.core.open())

    @initialize(
        mode=st.sampled_from(["default", "pause", *MODES[5:]]),
        eagerness=st.sampled_from(EAGERNESS),
    )
    def start(self, mode: str, eagerness: Eagerness) -> None:
        """Some runs start in pause mode with a reply generating (the overlap's ground), most
        with preemptive responses or semantic_vad."""
        if mode == "pause":
            self.session_update("pause", "auto")
            self.create_response()
        elif mode != "default":
            self.session_update(mode, eagerness)

    # Recording ------------------------------------------------------------------------
    def feed(self, outputs: Step, echo: str | None = None) -> Step:
        """Record what one input produced; `echo` is a response id the client named itself
        (an answer that only repeats it, a `cleared` or an `error`, names nothing new)."""
        cancelled: set[str] = set()
        for action in outputs.actions:
            if isinstance(action, StartBackend):
                rid = action.response_id
                assert rid not in self.log.started, f"the backend of {rid} was started twice"
                self.log.started.add(rid)
                if rid in self.log.preempts:  # a preemptive one's stream
                    self.log.preempts[rid].stream_started = True
                else:
                    self.log.responses.setdefault(rid, Resp(seq=-1)).seq = action.seq
            elif isinstance(action, CancelBackend):
                cancelled.add(action.response_id)
            elif isinstance(action, DetectSpeech):
                self.detects.append(action)
            elif isinstance(action, PredictTurn):
                self.asks.append(action)
            elif isinstance(action, ArmTimer):
                self.timers[action.kind] = action.token
            elif isinstance(action, Transcribe) and action.purpose == "overlap":
                self.partial = action
            elif isinstance(action, Transcribe):
                self.transcribes.append(action)
        for out in outputs.events:
            index = self.log.wire
            self.log.wire += 1
            encoded: dict[str, Any] = msgspec.json.decode(self.encoder.encode(out))
            for rid in _named(encoded):
                if rid != echo or not isinstance(out, se.OutputAudioBufferCleared | se.ErrorEvent):
                    self.log.named.setdefault(rid, index)
            if isinstance(out, se.ResponseCreated):
                rid = out.response.id
                pre = self.log.preempts.get(rid)
                if pre is not None and rid not in self.log.responses:
                    assert pre.state == "held", (rid, pre.state)
                    pre.state = "adopted"
                    pre.created_at = index
                    pre.committed_between = any(
                        pre.started_at <= at < index and item == pre.item_id
                        for at, item in self.log.commits
                    )
                    self.log.responses[rid] = Resp(seq=pre.start.seq)
                resp = self.log.responses.setdefault(rid, Resp(seq=-1))
                resp.created += 1
                resp.acknowledged = self.core.ledger.basis == "acknowledged"
            elif isinstance(out, se.ResponseOutputItemAdded):
                resp = self.log.responses[out.response_id]
                assert resp.dones == 0, (out, "an item announced after the terminal")
                resp.added.append(out.item.id or "")
                if isinstance(out.item, wire.MessageItem):
                    resp.item_id = out.item.id or ""
                    resp.message = True
                elif isinstance(out.item, wire.FunctionCallItem) and out.item.call_id:
                    self.log.call_ids.append(out.item.call_id)
            elif isinstance(out, se.ResponseOutputItemDone):
                resp = self.log.responses[out.response_id]
                assert resp.dones == 0, (out, "an item closed after the terminal")
                resp.closed_items.append(out.item.id or "")
            elif isinstance(out, se.ResponseDone):
                resp = self.log.responses[out.response.id]
                resp.output = [item.id or "" for item in out.response.output]
                resp.dones += 1
                resp.closed = True
                if out.response.status == "completed":
                    # It generated in full (BackendDone while generating).
                    resp.finished = True
                    if resp.generated_ms == 0 or resp.heard_bound_ms >= resp.generated_ms:
                        resp.fully_acked = not resp.cut
            elif isinstance(out, se.OutputAudioBufferCleared):
                if out.response_id in self.log.responses:
                    resp = self.log.responses[out.response_id]
                    resp.closed = True
                    if not resp.cut and not resp.fully_acked:
                        resp.cut = resp.provisional = True
            elif isinstance(out, DELTAS):
                resp = self.log.responses[out.response_id]
                if resp.closed:
                    resp.deltas_after_close += 1
                elif isinstance(out, se.ResponseOutputAudioDelta):
                    resp.generated_ms += len(out.delta) // PCM16_BYTES_PER_MS
                    resp.audio.append(out.delta)
            elif isinstance(out, se.InputAudioBufferCommitted):
                self.log.user_items.append(out.item_id)
                self.log.commits.append((index, out.item_id))
            elif isinstance(out, se.OutputAudioBufferPaused):
                self.log.pauses += 1
            elif isinstance(out, se.OverlapDecision):
                self.log.decisions += 1
            elif isinstance(out, se.InputAudioBufferSpeechStarted):
                self.speaking = True
            elif isinstance(out, se.InputAudioBufferSpeechStopped):
                self.speaking = False
        held = self.core._preemption
        for rid, pre in self.log.preempts.items():
            if pre.state == "held" and (held is None or held.response_id != rid):
                # Dropped: a started stream is cancelled.
                assert rid in cancelled or not pre.stream_started, f"{rid}'s stream left running"
                pre.state = "dropped"
        return outputs

    def latest(self) -> tuple[str, Resp] | None:
        if not self.log.responses:
            return None
        rid = next(reversed(self.log.responses))
        return rid, self.log.responses[rid]

    # Client ---------------------------------------------------------------------------
    @rule(ms=st.sampled_from([20, 100, 400]))
    def append_audio(self, ms: int) -> None:
        self.clock_ms += ms
        self.feed(self.core.client(ce.InputAudioBufferAppend(audio=b"\x01\x00" * 24 * ms)))

    @rule(create=st.sampled_from([None, True, False]), final=st.sampled_from([None, True, False]))
    def commit(self, create: bool | None, final: bool | None) -> None:
        self.feed(self.core.client(ce.InputAudioBufferCommit(create_response=create, final=final)))

    @rule()
    def clear_input(self) -> None:
        self.feed(self.core.client(ce.InputAudioBufferClear()))

    @rule(text=st.text(max_size=20))
    def add_text(self, text: str) -> None:
        out = self.feed(
            self.core.client(
                ce.ConversationItemCreate(
                    item=wire.MessageItem(role="user", content=(wire.InputText(text=text),))
                )
            )
        )
        for event in out.events:
            if isinstance(event, se.ConversationItemAdded) and event.item.id:
                self.log.user_items.append(event.item.id)

    @rule()
    def create_response(self) -> None:
        self.feed(self.core.client(ce.ResponseCreate()))

    @rule(tools=st.booleans(), choice=st.sampled_from(TOOL_CHOICES))
    def set_tools(self, tools: bool, choice: ToolChoice) -> None:
        """The session's tools change (a choice that fits none is refused, changing nothing)."""
        patch = SessionPatch(tools=(WEATHER,) if tools else (), tool_choice=choice)
        self.feed(self.core.client(ce.SessionUpdate(session=patch)))

    @rule(choice=st.sampled_from(TOOL_CHOICES), own=st.booleans())
    def create_response_with_tools(self, choice: ToolChoice, own: bool) -> None:
        """A response with its own tool choice (and its own tools, or the session's)."""
        params = ce.ResponseParams(tools=(WEATHER,) if own else None, tool_choice=choice)
        self.feed(self.core.client(ce.ResponseCreate(response=params)))

    @rule(known=st.booleans())
    def call_output(self, known: bool) -> None:
        """The client answers the latest call (or one it made up)."""
        call_id = self.log.call_ids[-1] if known and self.log.call_ids else "call_unknown"
        item = wire.FunctionCallOutputItem(call_id=call_id, output='{"ok": true}')
        self.feed(self.core.client(ce.ConversationItemCreate(item=item)))

    @rule(which=st.sampled_from(["none", "latest", "older", "unknown", "preempted"]))
    def cancel(self, which: str) -> None:
        rid = self.pick(which)
        self.feed(self.core.client(ce.ResponseCancel(response_id=rid)), echo=rid)

    @rule(which=st.sampled_from(["none", "latest", "older", "unknown", "preempted"]))
    def clear_output(self, which: str) -> None:
        rid = self.pick(which)
        self.feed(self.core.client(ce.OutputAudioBufferClear(response_id=rid)), echo=rid)

    def pick(self, which: str) -> str | None:
        rids = list(self.log.responses)
        if which == "latest" and rids:
            return rids[-1]
        if which == "older" and len(rids) > 1:
            return rids[-2]
        if which == "unknown":
            return "resp_unknown"
        if which == "preempted" and self.log.preempts:
            # A client guessing a preemptive response's id (ours are easy to predict).
            return next(reversed(self.log.preempts))
        return None

    @precondition(lambda self: bool(self.log.responses))
    @rule(
        fraction=st.sampled_from([0.0, 0.5, 1.0, 2.0]),
        truncate=st.booleans(),
        which=st.sampled_from(["latest", "older"]),
    )
    def ack(self, fraction: float, truncate: bool, which: str) -> None:
        rid = self.pick(which)
        if rid is None:
            return
        resp = self.log.responses[rid]
        played = int(resp.generated_ms * fraction)
        self.feed(
            self.core.client(ce.PlaybackAck(response_id=rid, played_ms=played, truncate=truncate))
        )
        if resp.cut and not resp.provisional:
            return
        resp.heard_bound_ms = max(resp.heard_bound_ms, min(played, resp.generated_ms))
        if resp.provisional:
            resp.provisional = False  # the client's first word: the cut is final after it
            return
        if truncate:
            resp.cut = True
        elif resp.finished and played >= resp.generated_ms:
            resp.fully_acked = True

    @precondition(lambda self: bool(self.log.responses))
    @rule(fraction=st.sampled_from([0.0, 0.5, 1.0]))
    def truncate(self, fraction: float) -> None:
        latest = self.latest()
        if latest is None:
            return
        rid, resp = latest
        end = int(resp.generated_ms * fraction)
        self.feed(
            self.core.client(
                ce.ConversationItemTruncate(item_id=resp.item_id, content_index=0, audio_end_ms=end)
            )
        )
        if rid in self.core.ledger and (resp.provisional or not resp.cut):
            resp.heard_bound_ms = max(resp.heard_bound_ms, end)
            resp.cut, resp.provisional = True, False

    @rule()
    def retrieve_context(self) -> None:
        self.feed(self.core.client(ce.ConversationContextRetrieve()))

    @rule(mode=st.sampled_from(MODES), eagerness=st.sampled_from(EAGERNESS))
    def session_update(self, mode: str, eagerness: Eagerness) -> None:
        vad = _vad(mode, eagerness)
        self.feed(self.core.client(ce.SessionUpdate(session=SessionPatch(turn_detection=vad))))

    # VAD ------------------------------------------------------------------------------
    @rule()
    def speech_started(self) -> None:
        self.speaking = True
        self.feed(self.core.vad(VadSpeechStarted(self.clock_ms)))

    @precondition(lambda self: self.speaking)
    @rule()
    def speech_stopped(self) -> None:
        self.speaking = False
        self.feed(self.core.vad(VadSpeechStopped(self.clock_ms)))

    @precondition(lambda self: bool(self.detects))
    @rule(prob=st.sampled_from([0.0, 1.0]))
    def vad_answer(self, prob: float) -> None:
        """The VAD answers the oldest appended audio not yet answered (the real detector)."""
        if self.detects:
            detect = self.detects.popleft()
            answer = SpeechProbabilities((prob,) * len(detect.chunks), detect.chunk_end_ms)
            self.feed(self.core.handle(answer, self.clock_ms))

    @rule(
        speech_ms=st.sampled_from([0, 32, 96, 320]),
        silence_ms=st.sampled_from([0, 96, 160, 320, 640]),
        neutral=st.booleans(),
        model=st.sampled_from(["later", "later", "complete", "incomplete", "error"]),
        stream=st.sampled_from([0, 0, 1, 1, 2]),
        asr=st.sampled_from(["later", "later", "now"]),
    )
    def speak(
        self, speech_ms: int, silence_ms: int, neutral: bool, model: str, stream: int, asr: str
    ) -> None:
        """The user speaks then falls silent, in appends of at most 160 ms, each answered by
        the VAD (what is pending, in order): candidate pauses (160 ms of silence), resumed
        speech and the silence rule's commits come from the real detector. `neutral` hears
        the silence's first chunk in the hysteresis band (neither speech nor silence). The
        turn model answers the asks of these pauses at once (`complete`, `incomplete`,
        `error`) or `later`, and so does the transcriber (`now`: each transcript asked); a
        fast backend streams `stream` audio chunks to a held preemptive response after each
        append."""
        speech_end = self.clock_ms + speech_ms
        left = speech_ms + silence_ms
        while left > 0:
            ms = min(left, 160)
            left -= ms
            self.clock_ms += ms
            self.feed(self.core.client(ce.InputAudioBufferAppend(audio=b"\x01\x00" * 24 * ms)))
            while self.detects:
                detect = self.detects.popleft()
                probs = tuple(
                    1.0
                    if end <= speech_end
                    else 0.4
                    if neutral and end <= speech_end + VAD_CHUNK_MS
                    else 0.0
                    for end in detect.chunk_end_ms
                )
                answer = SpeechProbabilities(probs, detect.chunk_end_ms)
                self.feed(self.core.handle(answer, self.clock_ms))
                while model != "later" and self.asks:
                    probability = {"complete": 1.0, "incomplete": 0.0}.get(model)
                    self.answer_turn(self.asks.pop(), probability)
                while asr == "now" and self.transcribes:
                    self.transcript("Book a table.", "oldest")
            held = self.core._preemption
            if held is not None:
                for _ in range(stream):
                    self.stream(held.response_id, "audio")

    @precondition(lambda self: bool(self.asks))
    @rule(
        probability=st.sampled_from([1.0, 0.6, 0.3, 0.0, math.nan, None]),
        which=st.sampled_from(["latest", "oldest"]),
    )
    def turn_answer(self, probability: float | None, which: str) -> None:
        """The turn model answers one of its asks (out of order too), or fails to."""
        self.answer_turn(self.asks.pop(-1 if which == "latest" else 0), probability)

    def answer_turn(self, ask: PredictTurn, probability: float | None) -> None:
        error = "turn model down" if probability is None else None
        self.feed(self.core.handle(TurnPrediction(ask.token, probability, error), self.clock_ms))

    @precondition(lambda self: self.partial is not None)
    @rule(text=st.sampled_from([None, "", "Yeah.", "Stop, wait."]))
    def partial_transcript(self, text: str | None) -> None:
        ask = self.partial
        if ask is not None:
            error = None if text is not None else "asr down"
            ready = TranscriptReady(ask.item_id, text, error, 0.1, "overlap", ask.token)
            self.feed(self.core.handle(ready, self.clock_ms))

    @precondition(lambda self: bool(self.transcribes))
    @rule(
        text=st.sampled_from([None, "Book a table."]), which=st.sampled_from(["oldest", "latest"])
    )
    def transcript(self, text: str | None, which: str) -> None:
        """The transcriber answers a turn's (or a preemptive response's turn so far), in any
        order, or fails."""
        ask = self.transcribes.pop(0 if which == "oldest" else -1)
        error = None if text is not None else "asr down"
        ready = TranscriptReady(ask.item_id, text, error, 0.5, ask.purpose, ask.token)
        self.feed(self.core.handle(ready, self.clock_ms))

    @precondition(lambda self: bool(self.timers))
    @rule(
        kind=st.sampled_from(["overlap_grace", "overlap_resume", "transcripts"]),
        stale=st.booleans(),
    )
    def timer_fires(self, kind: str, stale: bool) -> None:
        token = self.timers.get(kind)
        if token is not None:
            fired = TimerFired(kind, token - 1 if stale else token)  # type: ignore[arg-type]
            self.feed(self.core.handle(fired, self.clock_ms))

    # Backend --------------------------------------------------------------------------
    @precondition(lambda self: bool(self.log.responses))
    @rule(stale=st.booleans(), text=st.sampled_from(["", "Hi. "]))
    def backend_audio(self, stale: bool, text: str) -> None:
        self.backend_chunk(
            stale, lambda rid, seq: BackendAudio(rid, seq, b"\0\0" * 24 * CHUNK_MS, text)
        )

    @precondition(lambda self: bool(self.log.responses))
    @rule(stale=st.booleans())
    def backend_text(self, stale: bool) -> None:
        self.backend_chunk(stale, lambda rid, seq: BackendText(rid, seq, "word "))

    @precondition(lambda self: bool(self.log.responses))
    @rule(stale=st.booleans(), first=st.booleans(), piece=st.sampled_from(["", '{"city": ']))
    def backend_tool_call(self, stale: bool, first: bool, piece: str) -> None:
        name = "get_weather" if first else ""
        self.backend_chunk(
            stale, lambda rid, seq: BackendToolCall(rid, seq, name, piece), spoken=False
        )

    def backend_chunk(self, stale: bool, make: object, spoken: bool = True) -> None:
        target = self.target(stale)
        if target is None:
            return
        rid, resp = target
        live = self.core.live.get(rid)
        admitted = live is not None and live.chart.is_generating
        if spoken:  # after a call started, or in a call alone, nothing is spoken
            admitted = admitted and live is not None and live.message and live.call is None
        else:
            admitted = admitted and bool(make(rid, resp.seq).arguments_delta)  # type: ignore[operator]
        out = self.feed(self.core.backend(make(rid, resp.seq)))  # type: ignore[operator]
        deltas = [o for o in out.events if isinstance(o, DELTAS)]
        # Rule 2, second half: output of the open response is delivered, not dropped.
        assert bool(deltas) == admitted, (admitted, out)

    def target(self, stale: bool) -> tuple[str, Resp] | None:
        # A backend speaks once asked (the cascade's waits for its transcripts first).
        rids = [rid for rid in self.log.responses if rid in self.log.started]
        if not rids:
            return None
        rid = rids[-2] if stale and len(rids) > 1 else rids[-1]
        return rid, self.log.responses[rid]

    @precondition(lambda self: bool(self.log.responses))
    @rule(stale=st.booleans())
    def backend_done(self, stale: bool) -> None:
        target = self.target(stale)
        if target is None:
            return
        rid, resp = target
        self.feed(self.core.backend(BackendDone(rid, resp.seq, 3)))

    @precondition(lambda self: bool(self.log.responses))
    @rule(stale=st.booleans())
    def backend_failed(self, stale: bool) -> None:
        target = self.target(stale)
        if target is not None:
            rid, resp = target
            self.feed(self.core.backend(BackendFailed(rid, resp.seq, "boom")))

    @precondition(lambda self: bool(self.log.preempts))
    @rule(
        kind=st.sampled_from(["audio", "audio", "text", "done", "failed"]),
        which=st.sampled_from(["latest", "oldest"]),
    )
    def preempt_output(self, kind: str, which: str) -> None:
        """A preemptive response's stream says something: held, dropped, or adopted by now
        (a dropped one's output was in flight when it was cancelled)."""
        rids = list(self.log.preempts)
        self.stream(rids[-1] if which == "latest" else rids[0], kind)

    def stream(self, rid: str, kind: str) -> None:
        pre = self.log.preempts[rid]
        if not pre.stream_started or (pre.ended and pre.state != "dropped"):
            return  # a stream says nothing before its start or after its end (a dropped
            # one's is in flight)
        seq = pre.start.seq
        events: dict[str, BackendEvent] = {
            # Each chunk its own bytes: the replay's order shows.
            "audio": BackendAudio(rid, seq, bytes([len(pre.held_audio) % 256, 0]) * 24 * 40),
            "text": BackendText(rid, seq, "word "),
            "done": BackendDone(rid, seq, 3),
            "failed": BackendFailed(rid, seq, "boom"),
        }
        event = events[kind]
        pre.ended = pre.ended or kind in ("done", "failed")
        state = pre.state
        out = self.feed(self.core.backend(event))
        if state != "adopted":
            # Not a response (yet, or ever): nothing of it reaches the client.
            assert not out.events, (state, out.events)
        held = self.core._preemption
        if state == "held" and held is not None and held.response_id == rid:
            if isinstance(event, BackendAudio):
                pre.held_audio.append(event.audio)

    # Invariants -----------------------------------------------------------------------
    @invariant()
    def rule3_one_terminal_per_response(self) -> None:
        for rid, resp in self.log.responses.items():
            assert resp.created == 1
            assert resp.dones <= 1, rid
            live = self.core.live.get(rid)
            if live is None or not live.chart.is_generating:
                assert resp.dones == 1, rid

    @invariant()
    def rule2_no_delta_after_interruption_or_terminal(self) -> None:
        for rid, resp in self.log.responses.items():
            assert resp.deltas_after_close == 0, rid

    @invariant()
    def rule5_history_holds_only_heard_content(self) -> None:
        for item in self.core.conversation.items:
            if item.role != "assistant" or item.response_id is None:
                continue
            resp = self.log.responses[item.response_id]
            for part in item.content:
                if isinstance(part, conv.OutputAudio) and not resp.acknowledged:
                    assert part.audio_ms <= resp.generated_ms, (item, resp)  # never unsent
                elif isinstance(part, conv.OutputAudio):
                    assert part.audio_ms <= resp.heard_bound_ms or resp.fully_acked, (item, resp)
                    if not resp.fully_acked:
                        assert part.audio_ms <= resp.heard_bound_ms
                elif isinstance(part, conv.OutputText):
                    assert resp.finished and resp.generated_ms == 0, (item, resp)

    @invariant()
    def calls_heard_only_complete(self) -> None:
        for item in self.core.conversation.items:
            if item.call is not None and item.response_id is not None:
                assert self.log.responses[item.response_id].finished, item

    @invariant()
    def outputs_closed_by_their_terminal(self) -> None:
        for rid, resp in self.log.responses.items():
            assert len(set(resp.added)) == len(resp.added), (rid, resp.added)
            assert len(set(resp.closed_items)) == len(resp.closed_items), rid
            if resp.output is not None:
                assert resp.added == resp.closed_items == resp.output, (rid, resp)
            request = self.core.live[rid].request if rid in self.core.live else None
            if request is not None and request.call_only:
                assert not resp.message, rid

    @invariant()
    def rule6_current_input_is_last(self) -> None:
        view = self.core.conversation.prompt_view().items
        users = [i.id for i in view if i.role == "user"]
        existing = [i for i in self.log.user_items if i in self.core.conversation]
        if existing:
            assert users and users[-1] == existing[-1]

    @invariant()
    def pause_exactly_one_decision_per_overlap(self) -> None:
        open_overlaps = 1 if self.core.chart.is_paused else 0
        assert self.log.decisions == self.log.pauses - open_overlaps, self.log
        assert self.core.overlap.is_open == self.core.chart.is_paused

    @invariant()
    def rule2_fence_memory_bounded(self) -> None:
        assert sys.getsizeof(self.core.fence) == self.fence_size
        assert len(self.core.ledger) <= self.core.config.playback_entries
        # Replies not yet heard in full stay live (a late ACK still commits them) as far as the
        # ledger tracks them (the last `playback_entries`), and only one of them generates.
        assert len(self.core.live) <= self.core.config.playback_entries
        generating = [rid for rid, live in self.core.live.items() if live.chart.is_generating]
        assert len(generating) <= 1, generating

    @invariant()
    def rule3_output_region_follows_the_responses(self) -> None:
        """The session chart says a response generates (rule 3 refuses another) exactly while
        one does: its latest."""
        generating = [rid for rid, live in self.core.live.items() if live.chart.is_generating]
        latest = self.core.chart.latest_response_id
        if self.core.chart.is_generating:
            assert generating == [latest], (sorted(self.core.chart.active), generating, latest)
        else:
            assert not generating, (sorted(self.core.chart.active), generating)

    @invariant()
    def preempt_dropped_never_on_the_wire(self) -> None:
        for rid, pre in self.log.preempts.items():
            if pre.state == "adopted":
                assert self.log.named.get(rid) == pre.created_at, (rid, pre)
            else:
                assert rid not in self.log.named, (rid, pre.state, self.log.named[rid])

    @invariant()
    def preempt_created_after_its_commit(self) -> None:
        for rid, pre in self.log.preempts.items():
            if pre.state != "adopted":
                continue
            assert pre.committed_between, (rid, pre, self.log.commits)
            audio = self.log.responses[rid].audio
            if pre.start.request.call_only:
                assert not audio, rid  # a call alone speaks nothing, what it held included
            else:
                assert audio[: len(pre.held_audio)] == pre.held_audio, rid

    @invariant()
    def preempt_one_held_and_bounded(self) -> None:
        held = [rid for rid, pre in self.log.preempts.items() if pre.state == "held"]
        assert len(held) <= 1, held
        preemption = self.core._preemption
        # Every drop cancels its stream: the core holds exactly the one this test saw start.
        assert held == ([preemption.response_id] if preemption is not None else []), held
        if preemption is not None:
            assert len(preemption.held) <= PREEMPT_MAX_EVENTS, len(preemption.held)
            assert preemption.held_bytes <= PREEMPT_MAX_BYTES, preemption.held_bytes
            # Rule 3: it is not a response yet, and no other one runs beside it.
            generating = [r for r, live in self.core.live.items() if live.chart.is_generating]
            assert not generating, (preemption.response_id, generating)


class PreemptionMachine(SessionMachine):
    """The same session, always started with preemptive responses or semantic_vad, and more
    of the user's turns and of the held stream's output among its steps."""

    @initialize(
        mode=st.sampled_from(["preempt", "preempt_no_interrupt", *MODES[8:]]),
        eagerness=st.sampled_from(EAGERNESS),
    )
    def start(self, mode: str, eagerness: Eagerness) -> None:
        self.session_update(mode, eagerness)

    @rule(
        speech_ms=st.sampled_from([96, 320, 640]),
        pause_ms=st.sampled_from([160, 192, 320]),
        stream=st.sampled_from([0, 1, 2]),
        asr=st.sampled_from(["later", "now"]),
    )
    def user_turn(self, speech_ms: int, pause_ms: int, stream: int, asr: str) -> None:
        """Speech, then silence to a candidate pause (or a little past it)."""
        self.speak(speech_ms, pause_ms, False, "later", stream, asr)

    @rule(
        silence_ms=st.sampled_from([160, 320, 640]),
        model=st.sampled_from(["later", "complete", "incomplete", "error"]),
        stream=st.sampled_from([0, 1]),
        asr=st.sampled_from(["later", "now"]),
    )
    def more_silence(self, silence_ms: int, model: str, stream: int, asr: str) -> None:
        self.speak(0, silence_ms, False, model, stream, asr)

    @precondition(lambda self: self.core._preemption is not None and self.core._preemption.started)
    @rule(kind=st.sampled_from(["audio", "audio", "text", "done", "failed"]))
    def held_output(self, kind: str) -> None:
        held = self.core._preemption
        assert held is not None
        self.stream(held.response_id, kind)


def _machine_settings(examples: int, steps: int) -> settings:
    """A state machine's run: `examples` sessions of up to `steps` steps each, without
    hypothesis's deadline and too-slow check."""
    return settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )


TestSession = SessionMachine.TestCase
TestSession.settings = _machine_settings(1000, steps=25)
TestPreemption = PreemptionMachine.TestCase
TestPreemption.settings = _machine_settings(500, steps=30)


class ToolMachine(SessionMachine):
    """The same session with tools from the start (any choice, any turn detection), and more
    of its backends' calls among its steps: whole calls, ended, failed or left open."""

    @initialize(
        choice=st.sampled_from(TOOL_CHOICES),
        mode=st.sampled_from(["default", "manual", "pause", "preempt", "semantic"]),
    )
    def start(self, choice: ToolChoice, mode: str) -> None:  # type: ignore[override]
        self.set_tools(True, choice)
        if mode != "default":
            self.session_update(mode, "auto")
        self.create_response()  # something to call with from the first step

    @precondition(lambda self: bool(self.log.responses))
    @rule(stale=st.booleans(), end=st.sampled_from(["done", "done", "failed", "open"]))
    def model_calls(self, stale: bool, end: str) -> None:
        self.backend_tool_call(stale, True, '{"city": ')
        self.backend_tool_call(stale, False, '"Paris"}')
        if end == "done":
            self.backend_done(stale)
        elif end == "failed":
            self.backend_failed(stale)


TestTools = ToolMachine.TestCase
TestTools.settings = _machine_settings(300, steps=25)


class CascadePreemptionMachine(PreemptionMachine):
    """The cascade: every committed turn is transcribed and a response's backend waits for
    them; a preemptive response transcribes the turn so far first."""

    config = CASCADE


TestCascadePreemption = CascadePreemptionMachine.TestCase
TestCascadePreemption.settings = _machine_settings(300, steps=30)


def test_shrunk_a_cancel_naming_another_response_leaves_a_paused_reply_as_it_was() -> None:
    """Found by SessionMachine (start(mode='pause'), speech_started, backend_done,
    cancel(which='unknown')). Rule 4: a cancel (or clear) naming another response than the
    latest does not move the output region; here the paused reply had finished generating
    (`paused_draining`), and it must not be taken for generating again: rule 3 would refuse
    every `response.create` while nothing generates."""
    core = SessionCore("s", CONFIG)
    core.open(0)
    vad = ServerVad(create_response=False, interruption=Interruption(mode="pause"))
    core.client(ce.SessionUpdate(session=SessionPatch(turn_detection=vad)))
    [start] = [a for a in core.client(ce.ResponseCreate()).actions if isinstance(a, StartBackend)]
    core.vad(VadSpeechStarted(0))
    core.backend(BackendDone(start.response_id, start.seq, 3))
    assert not core.chart.is_generating
    core.client(ce.ResponseCancel(response_id="resp_unknown"))
    assert not core.chart.is_generating, sorted(core.chart.active)
    core.client(ce.InputAudioBufferClear())  # the client ends the pause: resumed
    out = core.client(ce.ResponseCreate())
    assert [e for e in out.events if isinstance(e, se.ResponseCreated)], out.events

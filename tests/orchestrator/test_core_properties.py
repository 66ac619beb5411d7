"""Random interleavings through the charts and the core (hypothesis stateful).

After every step: one terminal per response; no delta of a response after its
interruption or terminal; history holds only heard content; the current input is last;
fencing and playback memory do not grow with the number of interruptions. Pause mode
(docs/protocol.md "Interruption policy") is driven too, through real VAD answers, partial
transcripts and timer expiries: exactly one `overlap.decision` per pause, every admitted backend
chunk delivered exactly once while paused (nothing lost on resume), no delta after an interrupt.
"""

from __future__ import annotations

import sys
from collections import deque
from dataclasses import dataclass, field

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from orchestrator import conversation as conv
from orchestrator.actions import ArmTimer, DetectSpeech, StartBackend, Transcribe
from orchestrator.core import CoreConfig, SessionCore, Step
from orchestrator.inputs import (
    BackendAudio,
    BackendDone,
    BackendFailed,
    BackendText,
    SpeechProbabilities,
    TimerFired,
    TranscriptReady,
    VadSpeechStarted,
    VadSpeechStopped,
)
from orchestrator.protocol import client as ce
from orchestrator.protocol import items as wire
from orchestrator.protocol import server as se
from orchestrator.protocol.session_config import Interruption, ServerVad, SessionPatch

CHUNK_MS = 40
DELTAS = (
    se.ResponseOutputAudioDelta,
    se.ResponseOutputAudioTranscriptDelta,
    se.ResponseOutputTextDelta,
)


@dataclass
class Resp:
    seq: int
    item_id: str = ""
    generated_ms: int = 0
    heard_bound_ms: int = 0  # the most the client has said it played or truncated at
    finished: bool = False
    fully_acked: bool = False
    cut: bool = False
    created: int = 0
    dones: int = 0
    closed: bool = False  # response.done or cleared seen: no delta may follow
    deltas_after_close: int = 0


@dataclass
class Log:
    responses: dict[str, Resp] = field(default_factory=dict)
    user_items: list[str] = field(default_factory=list)
    pauses: int = 0
    decisions: int = 0


class SessionMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.core = SessionCore("s", CoreConfig(transcriber=True))
        self.log = Log()
        self.detects: deque[DetectSpeech] = deque(maxlen=4)
        self.timers: dict[str, int] = {}
        self.partial: Transcribe | None = None
        self.clock_ms = 0
        self.speaking = False
        self.fence_size = sys.getsizeof(self.core.fence)
        self.feed(self.core.open())

    @initialize(pause=st.booleans())
    def start(self, pause: bool) -> None:
        """Half the runs start in pause mode with a reply generating (the overlap's ground)."""
        if pause:
            self.session_update("pause")
            self.create_response()

    # Recording ------------------------------------------------------------------------
    def feed(self, outputs: Step) -> Step:
        for out in [*outputs.actions, *outputs.events]:
            if isinstance(out, StartBackend):
                self.log.responses.setdefault(out.response_id, Resp(seq=-1)).seq = out.seq
            elif isinstance(out, se.ResponseCreated):
                rid = out.response.id
                self.log.responses.setdefault(rid, Resp(seq=-1)).created += 1
            elif isinstance(out, se.ResponseOutputItemAdded):
                self.log.responses[out.response_id].item_id = out.item.id or ""
            elif isinstance(out, se.ResponseDone):
                resp = self.log.responses[out.response.id]
                resp.dones += 1
                resp.closed = True
            elif isinstance(out, se.OutputAudioBufferCleared):
                if out.response_id in self.log.responses:
                    resp = self.log.responses[out.response_id]
                    resp.closed = True
                    resp.cut = resp.cut or not resp.fully_acked
            elif isinstance(out, DELTAS):
                resp = self.log.responses[out.response_id]
                if resp.closed:
                    resp.deltas_after_close += 1
            elif isinstance(out, se.InputAudioBufferCommitted):
                self.log.user_items.append(out.item_id)
            elif isinstance(out, se.OutputAudioBufferPaused):
                self.log.pauses += 1
            elif isinstance(out, se.OverlapDecision):
                self.log.decisions += 1
            elif isinstance(out, DetectSpeech):
                self.detects.append(out)
            elif isinstance(out, ArmTimer):
                self.timers[out.kind] = out.token
            elif isinstance(out, Transcribe) and out.purpose == "overlap":
                self.partial = out
            elif isinstance(out, se.InputAudioBufferSpeechStarted):
                self.speaking = True
            elif isinstance(out, se.InputAudioBufferSpeechStopped):
                self.speaking = False
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

    @rule(which=st.sampled_from(["none", "latest", "older", "unknown"]))
    def cancel(self, which: str) -> None:
        self.feed(self.core.client(ce.ResponseCancel(response_id=self.pick(which))))

    @rule(which=st.sampled_from(["none", "latest", "older", "unknown"]))
    def clear_output(self, which: str) -> None:
        self.feed(self.core.client(ce.OutputAudioBufferClear(response_id=self.pick(which))))

    def pick(self, which: str) -> str | None:
        rids = list(self.log.responses)
        if which == "latest" and rids:
            return rids[-1]
        if which == "older" and len(rids) > 1:
            return rids[-2]
        if which == "unknown":
            return "resp_unknown"
        return None

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
        if resp.cut:
            return
        resp.heard_bound_ms = max(resp.heard_bound_ms, min(played, resp.generated_ms))
        if truncate:
            resp.cut = True
        elif resp.finished and played >= resp.generated_ms:
            resp.fully_acked = True

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
        if rid in self.core.ledger and not resp.cut:
            resp.heard_bound_ms = max(resp.heard_bound_ms, end)
            resp.cut = True

    @rule()
    def retrieve_context(self) -> None:
        self.feed(self.core.client(ce.ConversationContextRetrieve()))

    @rule(mode=st.sampled_from(["vad", "vad_no_interrupt", "vad_no_create", "manual", "pause"]))
    def session_update(self, mode: str) -> None:
        pause = Interruption(mode="pause", min_speech_ms=80, resume_after_ms=100)
        vad = {
            "pause": ServerVad(silence_duration_ms=100, interruption=pause),
            "vad": ServerVad(),
            "vad_no_interrupt": ServerVad(interrupt_response=False),
            "vad_no_create": ServerVad(create_response=False),
            "manual": None,
        }[mode]
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

    @rule(prob=st.sampled_from([0.0, 1.0]))
    def vad_answer(self, prob: float) -> None:
        """The VAD answers the oldest appended audio not yet answered (the real detector)."""
        if self.detects:
            detect = self.detects.popleft()
            answer = SpeechProbabilities((prob,) * len(detect.chunks), detect.chunk_end_ms)
            self.feed(self.core.handle(answer, self.clock_ms))

    @rule(text=st.sampled_from([None, "", "Yeah.", "Stop, wait."]))
    def partial_transcript(self, text: str | None) -> None:
        ask = self.partial
        if ask is not None:
            error = None if text is not None else "asr down"
            ready = TranscriptReady(ask.item_id, text, error, 0.1, "overlap", ask.token)
            self.feed(self.core.handle(ready, self.clock_ms))

    @rule(kind=st.sampled_from(["overlap_grace", "overlap_resume"]), stale=st.booleans())
    def timer_fires(self, kind: str, stale: bool) -> None:
        token = self.timers.get(kind)
        if token is not None:
            fired = TimerFired(kind, token - 1 if stale else token)  # type: ignore[arg-type]
            self.feed(self.core.handle(fired, self.clock_ms))

    # Backend --------------------------------------------------------------------------
    @rule(stale=st.booleans(), text=st.sampled_from(["", "Hi. "]))
    def backend_audio(self, stale: bool, text: str) -> None:
        self.backend_chunk(
            stale, lambda rid, seq: BackendAudio(rid, seq, b"\0\0" * 24 * CHUNK_MS, text)
        )

    @rule(stale=st.booleans())
    def backend_text(self, stale: bool) -> None:
        self.backend_chunk(stale, lambda rid, seq: BackendText(rid, seq, "word "))

    def backend_chunk(self, stale: bool, make: object) -> None:
        target = self.target(stale)
        if target is None:
            return
        rid, resp = target
        live = self.core.live.get(rid)
        admitted = live is not None and live.chart.is_generating
        out = self.feed(self.core.backend(make(rid, resp.seq)))  # type: ignore[operator]
        deltas = [o for o in out.events if isinstance(o, DELTAS)]
        # Rule 2, second half: output of the open response is delivered, not dropped.
        assert bool(deltas) == admitted, (admitted, out)
        if admitted and isinstance(make(rid, resp.seq), BackendAudio):  # type: ignore[operator]
            resp.generated_ms += CHUNK_MS

    def target(self, stale: bool) -> tuple[str, Resp] | None:
        rids = list(self.log.responses)
        if not rids:
            return None
        rid = rids[-2] if stale and len(rids) > 1 else rids[-1]
        return rid, self.log.responses[rid]

    @rule(stale=st.booleans())
    def backend_done(self, stale: bool) -> None:
        target = self.target(stale)
        if target is None:
            return
        rid, resp = target
        live = self.core.live.get(rid)
        was_generating = live is not None and live.chart.is_generating
        self.feed(self.core.backend(BackendDone(rid, resp.seq, 3)))
        if was_generating:
            resp.finished = True
            if resp.generated_ms == 0 or resp.heard_bound_ms >= resp.generated_ms:
                resp.fully_acked = not resp.cut

    @rule(stale=st.booleans())
    def backend_failed(self, stale: bool) -> None:
        target = self.target(stale)
        if target is not None:
            rid, resp = target
            self.feed(self.core.backend(BackendFailed(rid, resp.seq, "boom")))

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
                if isinstance(part, conv.OutputAudio):
                    assert part.audio_ms <= resp.heard_bound_ms or resp.fully_acked, (item, resp)
                    if not resp.fully_acked:
                        assert part.audio_ms <= resp.heard_bound_ms
                elif isinstance(part, conv.OutputText):
                    assert resp.finished and resp.generated_ms == 0, (item, resp)

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


TestSession = SessionMachine.TestCase
TestSession.settings = settings(
    max_examples=1000,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

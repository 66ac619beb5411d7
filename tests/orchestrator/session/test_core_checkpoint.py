"""Core rule 9: a step that ends at a turn boundary asks for a checkpoint, after its events;
a step inside a turn (speech, a delta) does not."""

from __future__ import annotations

from orchestrator.protocol import client as ce
from orchestrator.protocol import items as wire
from orchestrator.protocol.session_config import SessionPatch, Transcription
from orchestrator.session.actions import Checkpoint, StartBackend, Transcribe
from orchestrator.session.core import CoreConfig, SessionCore, Step
from orchestrator.session.inputs import (
    BackendAudio,
    BackendDone,
    TranscriptReady,
    VadSpeechStarted,
    VadSpeechStopped,
)


def checkpoints(step: Step) -> int:
    return sum(isinstance(a, Checkpoint) for a in step.actions)


def spoken_turn(core: SessionCore) -> tuple[Step, Step, Step]:
    appended = core.client(ce.InputAudioBufferAppend(audio=b"\x01\x00" * 24 * 500))
    started = core.vad(VadSpeechStarted(0))
    stopped = core.vad(VadSpeechStopped(500))  # commits the turn and starts its response
    return appended, started, stopped


def test_rule9_a_turn_asks_for_a_checkpoint_at_its_boundaries_only() -> None:
    core = SessionCore("t", CoreConfig())
    core.open()
    appended, started, stopped = spoken_turn(core)
    assert (checkpoints(appended), checkpoints(started), checkpoints(stopped)) == (0, 0, 1)
    [start] = [a for a in stopped.actions if isinstance(a, StartBackend)]
    delta = core.backend(BackendAudio(start.response_id, start.seq, b"\0\0" * 2400, "Hi. "))
    done = core.backend(BackendDone(start.response_id, start.seq))
    assert (checkpoints(delta), checkpoints(done)) == (0, 1)
    assert isinstance(done.actions[-1], Checkpoint)  # after everything else the step asks


def test_rule9_a_setting_or_an_item_asks_for_one() -> None:
    core = SessionCore("t", CoreConfig())
    core.open()
    updated = core.client(ce.SessionUpdate(session=SessionPatch(instructions="Be brief.")))
    item = core.client(
        ce.ConversationItemCreate(
            item=wire.MessageItem(role="user", content=(wire.InputText(text="Paris?"),))
        )
    )
    assert (checkpoints(updated), checkpoints(item)) == (1, 1)


def test_rule9_a_turns_transcript_asks_for_one() -> None:
    core = SessionCore("t", CoreConfig(transcriber=True))
    core.open()
    core.client(ce.SessionUpdate(session=SessionPatch(transcription=Transcription())))
    _, _, stopped = spoken_turn(core)
    [ask] = [a for a in stopped.actions if isinstance(a, Transcribe)]
    heard = core.handle(TranscriptReady(ask.item_id, "Hello there.", None, 0.5))
    assert checkpoints(heard) == 1


def test_rule10_a_takeover_ends_what_the_lost_process_was_generating_once() -> None:
    from orchestrator.protocol import server as se

    core = SessionCore("t", CoreConfig())
    core.open()
    _, _, stopped = spoken_turn(core)
    [start] = [a for a in stopped.actions if isinstance(a, StartBackend)]
    state = core.state()
    assert state.live == (start.response_id,)  # generating: its response.done not yet sent
    taken = SessionCore.restore("t", state, CoreConfig())
    ended = taken.end_lost(state.live)
    kinds = [type(e) for e in ended.events]
    assert kinds == [se.OutputAudioBufferCleared, se.ResponseDone]
    [done] = [e for e in ended.events if isinstance(e, se.ResponseDone)]
    assert done.response.id == start.response_id and done.response.status == "failed"
    assert checkpoints(ended) == 1
    assert taken.conversation.items == core.conversation.items

    finished = core.backend(BackendDone(start.response_id, start.seq))
    assert checkpoints(finished) == 1 and core.state().live == ()  # done: nothing to end

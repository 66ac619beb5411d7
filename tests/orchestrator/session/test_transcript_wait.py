"""TranscriptWait: the cascade's start waits for its own turns' transcripts, released once."""

from __future__ import annotations

from orchestrator.session.actions import InferenceRequest, StartBackend
from orchestrator.session.history import conversation as conv
from orchestrator.session.transcript_wait import TranscriptWait


def _start(*item_ids: str) -> StartBackend:
    items = tuple(conv.Item(i, "user", (conv.InputAudio(b"\0\0"),)) for i in item_ids)
    return StartBackend("r", 1, InferenceRequest("", items, ("audio",), None))


def test_nothing_being_transcribed_holds_nothing() -> None:
    assert not TranscriptWait(1000).hold(_start("a"), token=1)


def test_released_once_when_the_last_awaited_transcript_is_in() -> None:
    wait = TranscriptWait(1000)
    wait.asked("a", lambda _: True)
    wait.asked("b", lambda _: True)
    start = _start("a", "b")
    assert wait.hold(start, token=1)
    assert wait.answered("a") is None
    assert wait.answered("b") is start
    assert wait.answered("b") is None and wait.expired(1) is None


def test_expiry_releases_and_a_stale_token_or_a_drop_does_not() -> None:
    wait = TranscriptWait(1000)
    wait.asked("a", lambda _: True)
    start = _start("a")
    wait.hold(start, token=5)
    assert wait.expired(4) is None
    assert wait.expired(5) is start
    wait.asked("a", lambda _: True)
    wait.hold(start, token=6)
    assert wait.drop("r") and wait.answered("a") is None


def test_turns_gone_from_the_conversation_are_forgotten() -> None:
    wait = TranscriptWait(1000)
    wait.asked("old", lambda _: True)
    wait.asked("new", lambda item_id: item_id != "old")
    assert not wait.hold(_start("old"), token=1)

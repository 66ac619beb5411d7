"""StreamWorkers: in-order handling per stream, every request ended, no state left behind."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy.typing as npt

from turntaker_models.omni.streams import Message, StreamHandler, StreamLimits, StreamWorkers


@dataclass
class Reply:
    closed: bool = False
    error: str | None = None

    def send(self, outputs: Mapping[str, npt.NDArray[Any]]) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def fail(self, message: str) -> None:
        self.error = message
        self.closed = True

    def is_cancelled(self) -> bool:
        return False


@dataclass
class Recorder:
    seen: list[tuple[str, int]] = field(default_factory=list)
    abandoned: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def factory(self, request_id: str) -> StreamHandler:
        recorder = self

        class Handler:
            def handle(self, message: Message) -> bool:
                with recorder.lock:
                    recorder.seen.append((message.request_id, message.seq))
                if message.kind == 99:
                    raise RuntimeError("boom")
                message.reply.close()
                return message.kind == 2

            def abandon(self, reason: str) -> None:
                with recorder.lock:
                    recorder.abandoned.append(f"{request_id}: {reason}")

        return Handler()


def _wait(workers: StreamWorkers, replies: list[Reply]) -> None:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if workers.active() == 0 and all(r.closed for r in replies):
            return
        time.sleep(0.005)
    raise AssertionError("streams still live or requests still open")


def _message(request_id: str, seq: int, kind: int = 1) -> tuple[Message, Reply]:
    reply = Reply()
    return Message(request_id, seq, kind, {}, reply), reply


def test_out_of_order_messages_are_handled_in_order() -> None:
    recorder = Recorder()
    workers = StreamWorkers("test", recorder.factory, StreamLimits())
    replies = []
    for request_id in ("a", "b"):
        for seq, kind in [(2, 2), (0, 1), (1, 1)]:
            message, reply = _message(request_id, seq, kind)
            replies.append(reply)
            workers.submit(message)
    _wait(workers, replies)
    for request_id in ("a", "b"):
        assert [s for r, s in recorder.seen if r == request_id] == [0, 1, 2]
    assert all(r.error is None for r in replies)


def test_errors_duplicates_and_idle_streams_still_end_every_request() -> None:
    recorder = Recorder()
    workers = StreamWorkers("test", recorder.factory, StreamLimits(idle_timeout_s=0.2))
    replies = []
    for request_id, seq, kind in [("err", 0, 99), ("dup", 0, 1), ("dup", 0, 1), ("idle", 1, 1)]:
        message, reply = _message(request_id, seq, kind)
        replies.append(reply)
        workers.submit(message)
    _wait(workers, replies)
    assert replies[0].error == "test: boom"
    assert replies[2].error is not None and "repeated" in replies[2].error
    # "idle" waited for message 0 forever: dropped after the timeout, its request closed.
    assert replies[3].closed
    assert any(a.startswith("idle: idle") for a in recorder.abandoned)


def test_stream_limit() -> None:
    recorder = Recorder()
    workers = StreamWorkers("test", recorder.factory, StreamLimits(max_streams=1))
    first, first_reply = _message("one", 0)
    second, second_reply = _message("two", 1)
    workers.submit(_message("one", 1)[0])  # waits for 0: keeps "one" live
    workers.submit(second)
    assert second_reply.error == "test: more than 1 streams"
    workers.submit(first)
    workers.submit(_message("one", 2, kind=2)[0])
    _wait(workers, [first_reply])
    workers.stop()

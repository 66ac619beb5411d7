"""Per-stream worker threads: in-order processing of one REQUEST_ID's messages, bounded state.

`execute()` must return at once (one model instance serves every stream), yet the messages of
one stream must be handled in order and its model state kept between them. So each stream gets
a thread fed by a bounded queue; messages are reordered by SEQ; the thread and its state go away
when the handler says the stream is over, on a cancel or error, or after `idle_timeout_s`
without a message (an upstream stage that died can never leak a stream).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy.typing as npt

from turntaker_models.omni.wire import Reply

log = logging.getLogger("turntaker.omni")


@dataclass(frozen=True)
class Message:
    request_id: str
    seq: int
    kind: int
    tensors: dict[str, npt.NDArray[Any]]
    reply: Reply


class StreamHandler(Protocol):
    def handle(self, message: Message) -> bool:
        """Process one message and close its reply; True when the stream is over."""
        ...

    def abandon(self, reason: str) -> None:
        """Free everything; the stream ends without its remaining messages."""
        ...


@dataclass(frozen=True)
class StreamLimits:
    max_streams: int = 64
    # Messages waiting per stream: a whole answer's tokens when the talker lags the thinker.
    max_pending: int = 8192
    idle_timeout_s: float = 120.0


class StreamWorkers:
    def __init__(
        self, stage: str, factory: Callable[[str], StreamHandler], limits: StreamLimits
    ) -> None:
        self.stage = stage
        self.factory = factory
        self.limits = limits
        self._lock = threading.Lock()
        self._queues: dict[str, queue.Queue[Message | None]] = {}
        self._threads: dict[str, threading.Thread] = {}

    def active(self) -> int:
        with self._lock:
            return len(self._queues)

    def submit(self, message: Message) -> None:
        with self._lock:
            inbox = self._queues.get(message.request_id)
            if inbox is None:
                if len(self._queues) >= self.limits.max_streams:
                    message.reply.fail(f"{self.stage}: more than {self.limits.max_streams} streams")
                    return
                inbox = queue.Queue(self.limits.max_pending)
                thread = threading.Thread(
                    target=self._run,
                    args=(message.request_id, inbox),
                    name=f"{self.stage}-{message.request_id[:24]}",
                    daemon=True,
                )
                self._queues[message.request_id] = inbox
                self._threads[message.request_id] = thread
                thread.start()
            try:
                inbox.put_nowait(message)
            except queue.Full:
                message.reply.fail(f"{self.stage}: stream {message.request_id} is too far behind")

    def stop(self) -> None:
        with self._lock:
            inboxes = list(self._queues.values())
            threads = list(self._threads.values())
        for inbox in inboxes:
            try:
                inbox.put_nowait(None)
            except queue.Full:
                pass
        for thread in threads:
            thread.join(timeout=5.0)

    def _run(self, request_id: str, inbox: queue.Queue[Message | None]) -> None:
        handler: StreamHandler | None = None
        pending: dict[int, Message] = {}
        expected = 0
        over = False
        try:
            handler = self.factory(request_id)
            while not over:
                try:
                    item = inbox.get(timeout=self.limits.idle_timeout_s)
                except queue.Empty:
                    log.warning("%s: stream %s idle, dropped", self.stage, request_id)
                    handler.abandon("idle")
                    break
                if item is None:
                    handler.abandon("shutdown")
                    break
                if item.seq < expected or item.seq in pending:
                    item.reply.fail(f"{self.stage}: {request_id} message {item.seq} repeated")
                    continue
                if len(pending) >= self.limits.max_pending:
                    raise RuntimeError(f"message {expected} of {request_id} never came")
                pending[item.seq] = item
                while expected in pending and not over:
                    message = pending.pop(expected)
                    expected += 1
                    try:
                        over = handler.handle(message)
                    except Exception as error:
                        # A handler bug must still end this request, or the ensemble hangs.
                        log.exception("%s: stream %s failed", self.stage, request_id)
                        message.reply.fail(f"{self.stage}: {error}")
                        handler.abandon(f"error: {error}")
                        over = True
        except Exception as error:
            log.exception("%s: stream %s failed", self.stage, request_id)
            if handler is not None:
                handler.abandon(f"error: {error}")
            for message in pending.values():
                message.reply.fail(f"{self.stage}: {error}")
            pending.clear()
        finally:
            with self._lock:
                self._queues.pop(request_id, None)
                self._threads.pop(request_id, None)
            # Whatever is left (messages after the end, or out of order forever) still needs its
            # final flag, or the ensemble would never finish the request.
            item_list = list(pending.values())
            while True:
                try:
                    extra = inbox.get_nowait()
                except queue.Empty:
                    break
                if extra is not None:
                    item_list.append(extra)
            for message in item_list:
                message.reply.close()

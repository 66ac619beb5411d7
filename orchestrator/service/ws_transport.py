"""The WebSocket transport under the app: hypercorn's stream with our message limit and the
client's close code.

Rules (docs/protocol.md rule 7 and "Session resume"):
- Two message limits: `max_message_bytes` (15 MiB) is the codec's; a bigger message still
  reaches the session and is answered with an `error` `message_too_large`. The transport
  limit, `transport_max_message_bytes()` (twice that plus a margin), is hypercorn's own: only a
  message beyond it closes the socket, with 1009 and a reason, and it is never held in memory
  whole (`_BoundedBuffer`). Between the two, every message is answered.
- The app hears the close code the client sent, so that only a 1000 ends a session at once;
  after our own 1009 it hears 1009 (the session stays resumable).
- hypercorn has no hook for any of this: `install_transport_limit()` swaps its stream class,
  and checks first that the methods it relies on are still there.
"""

from __future__ import annotations

import logging
from io import BytesIO, StringIO
from typing import Any, Final

import hypercorn.protocol.events as hyper_events
import hypercorn.protocol.h2
import hypercorn.protocol.h11
import hypercorn.protocol.ws_stream as hyper_ws
from wsproto.connection import ConnectionState
from wsproto.events import CloseConnection, Message, Ping
from wsproto.frame_protocol import CloseReason

from orchestrator.service.config import ServiceConfig

log = logging.getLogger("turntaker.session")

# Above the codec's limit by at least that limit again, so that every message up to twice it is
# answered (`message_too_large`) rather than cut; the margin keeps "exactly twice" well inside.
TRANSPORT_MARGIN_BYTES: Final = 1024 * 1024


def transport_max_message_bytes(config: ServiceConfig) -> int:
    """hypercorn's WebSocket message limit (UTF-8 bytes of a text message, or bytes)."""
    return 2 * config.max_message_bytes + TRANSPORT_MARGIN_BYTES


def _wire_size(data: str | bytes) -> int:
    # wsproto hands text over decoded; count it as the UTF-8 it arrived as, so that the limit
    # bounds memory and means the same for text and binary messages. Chunks are at most one
    # socket read, so encoding a non-ASCII one costs what copying it does.
    if isinstance(data, bytes) or data.isascii():
        return len(data)
    return len(data.encode("utf-8", "surrogatepass"))


class _BoundedBuffer(hyper_ws.WebsocketBuffer):
    """hypercorn's message buffer, counting bytes and keeping nothing past the limit.

    hypercorn's own counts characters of text and, after its 1009, goes on appending whatever
    the client still sends of that message; this one drops it, so a client streaming a huge
    message costs the server at most the limit.
    """

    def extend(self, event: Message[Any]) -> None:
        data: str | bytes = event.data
        self.length += _wire_size(data)
        if self.length > self.max_length:
            self.value = None  # free what was buffered; length stays over: the rest is dropped
            raise hyper_ws.FrameTooLargeError()
        # A message is all text or all bytes (wsproto's TextMessage / BytesMessage).
        if isinstance(data, str):
            if not isinstance(self.value, StringIO):
                self.value = StringIO()
            self.value.write(data)
        else:
            if not isinstance(self.value, BytesIO):
                self.value = BytesIO()
            self.value.write(data)


class _LimitedWSStream(hyper_ws.WSStream):
    """hypercorn's WebSocket stream (0.17/0.18) with three fixes at its message limit, and
    the client's close code.

    - The buffer is `_BoundedBuffer`: bytes counted, nothing kept past the limit.
    - The 1009 close says why (hypercorn's has no reason; a client should be told).
    - After the 1009 the rest of that read is still handled: hypercorn stops there, so a close
      reply that arrived in the same read as the end of the oversize message was never seen,
      and the connection hung until the client gave up.
    - The app hears the close code the client sent (hypercorn reports 1006 for every close
      the client starts): only a 1000 ends a session at once (docs/protocol.md "Session
      resume"). After our own 1009 the app hears 1009 when the client answers it: that
      session stays resumable.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.buffer = _BoundedBuffer(self.config.websocket_max_message_size)
        self._refused = False
        self._told = False

    async def _handle_events(self) -> None:
        # hypercorn's loop, but `continue` after a too-big message instead of `break`.
        for event in self.connection.events():
            if isinstance(event, Message):
                try:
                    self.buffer.extend(event)
                except hyper_ws.FrameTooLargeError:
                    if not self._refused:  # once: the connection is closing from then on
                        self._refused = True
                        limit = self.config.websocket_max_message_size
                        await self._send_wsproto_event(
                            CloseConnection(
                                code=CloseReason.MESSAGE_TOO_BIG,
                                reason=f"message too big: over the transport limit of "
                                f"{limit} bytes",
                            )
                        )
                    continue
                if event.message_finished and self.app_put is not None:
                    await self.app_put(self.buffer.to_message())
                    self.buffer.clear()
            elif isinstance(event, Ping):
                await self._send_wsproto_event(event.response())
            elif isinstance(event, CloseConnection):
                if self.connection.state == ConnectionState.REMOTE_CLOSING:
                    await self._send_wsproto_event(event.response())
                # After our 1009 the client's reply echoes whatever it likes; the session stays
                # resumable either way. (The app is told only now: ending the connection at
                # once would reset it under the unread close frame.)
                await self._tell_close(CloseReason.MESSAGE_TOO_BIG if self._refused else event.code)
                await self.send(hyper_events.StreamClosed(stream_id=self.stream_id))

    async def _tell_close(self, code: int) -> None:
        # Before hypercorn's own (1006) disconnect, which the app then never reads.
        if self.app_put is not None and not self._told:
            self._told = True
            await self.app_put({"type": "websocket.disconnect", "code": int(code)})


def install_transport_limit() -> bool:
    """Make hypercorn's HTTP/1.1 and HTTP/2 WebSocket streams `_LimitedWSStream`s.

    hypercorn has no hook for this, so the protocol modules' `WSStream` name is replaced
    (idempotent, process-wide; other hypercorn servers in the process gain the same fixes).
    Returns False, changing nothing, when this hypercorn lacks what the subclass relies on:
    then an oversize message still gets hypercorn's own 1009, and `test_input_limits_e2e`
    fails loudly.
    """
    # mypy checks the attributes against the installed hypercorn; this catches a later one
    # whose stream no longer has the methods the subclass replaces or calls.
    methods = ("_handle_events", "_send_wsproto_event", "_accept", "handle")
    if not all(callable(getattr(hyper_ws.WSStream, name, None)) for name in methods):
        log.warning("hypercorn's WSStream changed: the transport limit is hypercorn's own")
        return False
    for module in (hypercorn.protocol.h11, hypercorn.protocol.h2):
        setattr(module, "WSStream", _LimitedWSStream)  # noqa: B010 (not re-exported there)
    return True

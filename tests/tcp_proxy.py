"""A loopback TCP proxy whose connections a test can cut abruptly, as a network drop would.

`cut()` resets every current connection (SO_LINGER 0, then close: an RST, no FIN and no
WebSocket close frame, so a browser sees 1006 and the server a lost socket) while the proxy goes
on accepting new ones; `refuse(True)` resets each new connection at once, as a server that
cannot be reached for a while. All sockets belong to one selector thread: a socket closed from
another thread while one is blocked in recv on it would only be reset once that recv returned.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

T = TypeVar("T")

# Reading from one side pauses while this much waits to be written to the other (backpressure,
# as a plain TCP path has, instead of buffering a whole answer here).
_HIGH_WATER = 1 << 20
_CHUNK = 1 << 16


@dataclass(eq=False)
class _Leg:
    """One socket of a proxied connection; `out` waits to be written to it."""

    sock: socket.socket
    peer: _Leg | None = None
    out: bytearray = field(default_factory=bytearray)
    eof: bool = False  # its far end sent FIN: nothing more to read from it
    write_shut: bool = False  # the FIN was passed on to it
    events: int = 0  # what the selector watches it for (0: unregistered)


def _reset(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.close()


class TcpProxy:
    """127.0.0.1:<free port> -> `target_host`:`target_port`, with `cut()` and `refuse()`."""

    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self.accepted = 0  # connections accepted (refused ones included)
        self.cuts = 0  # connections reset by cut()
        self._refusing = False
        self._selector = selectors.DefaultSelector()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.setblocking(False)
        self.port: int = self._listener.getsockname()[1]
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._calls: list[Callable[[], None]] = []
        self._lock = threading.Lock()
        self._legs: set[_Leg] = set()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="tcp-proxy", daemon=True)

    def __enter__(self) -> TcpProxy:
        self._selector.register(self._listener, selectors.EVENT_READ, "accept")
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def connections(self) -> int:
        """Connections proxied now."""
        return len(self._legs) // 2

    def cut(self) -> int:
        """Reset every current connection, both ways; returns how many. New ones still come."""
        return self._call(self._cut_all)

    def refuse(self, refusing: bool) -> None:
        """While refusing, each new connection is reset as soon as it is accepted."""
        self._refusing = refusing

    def close(self) -> None:
        if not self._thread.is_alive():
            return
        self._call(self._cut_all)
        self._stopping = True
        self._wake_w.send(b"x")
        self._thread.join(timeout=5)
        for sock in (self._listener, self._wake_r, self._wake_w):
            sock.close()
        self._selector.close()

    # --- the selector thread -------------------------------------------------------------------

    def _call(self, fn: Callable[[], T]) -> T:
        """Run `fn` on the selector thread (which owns every socket) and wait for its result."""
        done = threading.Event()
        result: list[T] = []

        def call() -> None:
            try:
                result.append(fn())
            finally:
                done.set()

        with self._lock:
            self._calls.append(call)
        self._wake_w.send(b"x")
        if not done.wait(timeout=5) or not result:
            raise RuntimeError("the proxy's thread did not run the call")
        return result[0]

    def _run(self) -> None:
        while not self._stopping:
            for key, mask in self._selector.select():
                if key.data == "accept":
                    self._accept()
                elif key.data == "wake":
                    self._wake()
                elif isinstance(key.data, _Leg) and key.data in self._legs:
                    self._service(key.data, mask)

    def _wake(self) -> None:
        with contextlib.suppress(BlockingIOError):
            self._wake_r.recv(4096)
        with self._lock:
            calls, self._calls = self._calls, []
        for call in calls:
            call()

    def _accept(self) -> None:
        try:
            client, _ = self._listener.accept()
        except BlockingIOError:
            return
        self.accepted += 1
        if self._refusing:
            _reset(client)
            return
        try:
            # Loopback: the connect is immediate (or refused at once).
            upstream = socket.create_connection(self.target, timeout=2)
        except OSError:
            _reset(client)
            return
        a, b = _Leg(client), _Leg(upstream)
        a.peer, b.peer = b, a
        for leg in (a, b):
            leg.sock.setblocking(False)
            leg.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._legs.add(leg)
            self._interest(leg)

    def _service(self, leg: _Leg, mask: int) -> None:
        peer = leg.peer
        assert peer is not None
        try:
            if mask & selectors.EVENT_READ:
                data = leg.sock.recv(_CHUNK)
                if data:
                    peer.out += data
                else:
                    leg.eof = True
            for side, other in ((leg, peer), (peer, leg)):
                if side.out:
                    sent = side.sock.send(side.out)
                    del side.out[:sent]
                if other.eof and not side.out and not side.write_shut:
                    side.sock.shutdown(socket.SHUT_WR)
                    side.write_shut = True
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            # One side reset or failed: so does the other, as a broken path would.
            self._drop(leg, abort=True)
            return
        if leg.write_shut and peer.write_shut:
            self._drop(leg, abort=False)  # both ways ended in order
            return
        self._interest(leg)
        self._interest(peer)

    def _interest(self, leg: _Leg) -> None:
        assert leg.peer is not None
        events = 0
        if not leg.eof and len(leg.peer.out) < _HIGH_WATER:
            events |= selectors.EVENT_READ
        if leg.out:
            events |= selectors.EVENT_WRITE
        if events == leg.events:
            return
        # A selector takes no empty interest: a leg with nothing to do is unregistered.
        if not events:
            self._selector.unregister(leg.sock)
        elif not leg.events:
            self._selector.register(leg.sock, events, leg)
        else:
            self._selector.modify(leg.sock, events, leg)
        leg.events = events

    def _drop(self, leg: _Leg, *, abort: bool) -> None:
        for side in (leg, leg.peer):
            if side is None or side not in self._legs:
                continue
            self._legs.discard(side)
            if side.events:
                self._selector.unregister(side.sock)
                side.events = 0
            if abort:
                _reset(side.sock)
            else:
                side.sock.close()

    def _cut_all(self) -> int:
        n = len(self._legs) // 2
        for leg in list(self._legs):
            self._drop(leg, abort=True)
        self.cuts += n
        return n

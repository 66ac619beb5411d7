"""The test helper `tests.tcp_proxy`: it forwards faithfully, and its cut is a real reset."""

from __future__ import annotations

import os
import socket
import socketserver
import threading
import time
from collections.abc import Iterator

import pytest

from tests.tcp_proxy import TcpProxy


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        sock: socket.socket = self.request
        try:
            while data := sock.recv(65536):
                sock.sendall(data)
        except OSError:
            pass  # the proxy reset us: the point of the test that did it


@pytest.fixture
def proxy() -> Iterator[TcpProxy]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with TcpProxy(server.server_address[1]) as p:
            yield p
    finally:
        server.shutdown()
        server.server_close()


def _dial(proxy: TcpProxy) -> socket.socket:
    return socket.create_connection(("127.0.0.1", proxy.port), timeout=5)


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            break
        data += chunk
    return bytes(data)


def test_it_forwards_both_ways_byte_for_byte(proxy: TcpProxy) -> None:
    # More than its high-water mark, sent while the echo comes back: backpressure, no loss.
    payload = os.urandom(3 << 20)
    with _dial(proxy) as sock:
        sender = threading.Thread(target=sock.sendall, args=(payload,))
        sender.start()
        echoed = _recv_exactly(sock, len(payload))
        sender.join()
    assert echoed == payload


def test_a_half_close_is_passed_on_in_order(proxy: TcpProxy) -> None:
    with _dial(proxy) as sock:
        sock.sendall(b"last words")
        sock.shutdown(socket.SHUT_WR)
        assert _recv_exactly(sock, 10) == b"last words"
        assert sock.recv(10) == b""  # the echo's FIN, passed on after the data


def test_cut_resets_current_connections_and_new_ones_still_come(proxy: TcpProxy) -> None:
    with _dial(proxy) as a, _dial(proxy) as b:
        for sock in (a, b):
            sock.sendall(b"ping")
            assert _recv_exactly(sock, 4) == b"ping"
        assert proxy.connections == 2
        assert proxy.cut() == 2
        for sock in (a, b):
            # An RST, not an orderly end: what a browser reports as 1006.
            with pytest.raises(ConnectionResetError):
                sock.recv(10)
    assert proxy.connections == 0
    with _dial(proxy) as c:
        c.sendall(b"again")
        assert _recv_exactly(c, 5) == b"again"
    assert proxy.cuts == 2


def test_refuse_resets_each_new_connection_until_lifted(proxy: TcpProxy) -> None:
    proxy.refuse(True)
    # The reset can come before connect() returns or after: either way the client sees it.
    with pytest.raises(ConnectionResetError), _dial(proxy) as sock:
        sock.sendall(b"x")
        time.sleep(0.1)
        sock.recv(10)
    proxy.refuse(False)
    with _dial(proxy) as sock:
        sock.sendall(b"ok")
        assert _recv_exactly(sock, 2) == b"ok"
    assert proxy.accepted == 2

"""A real redis-server (Debian's binary) on 127.0.0.1 and a free port, for the tests of the
session store and of takeover (tests/orchestrator/service/store/, tests/e2e/test_takeover_e2e.py).
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import redis

from tests.conftest import free_port


class RedisServer:
    """`redis-server` in a folder of its own, nothing saved to disk; `kill()` and `start()`
    again on the same port (an empty Redis, as after a restart without persistence)."""

    def __init__(self, folder: Path) -> None:
        binary = shutil.which("redis-server")
        assert binary, "redis-server is missing: apt-get install redis-server (make apt)"
        self.binary = binary
        self.folder = folder
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        # Settings as arguments, no file: loopback only, no RDB snapshots, no AOF.
        command = [self.binary, "--bind", "127.0.0.1", "--port", str(self.port)]
        command += ["--save", "", "--appendonly", "no", "--dir", str(self.folder)]
        command += ["--daemonize", "no", "--logfile", str(self.folder / "redis.log")]
        self.process = subprocess.Popen(command, cwd=self.folder, stdin=subprocess.DEVNULL)
        client = redis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=0.2)
        deadline = time.monotonic() + 10
        try:
            while True:
                try:
                    client.ping()
                    return
                except redis.ConnectionError:
                    if self.process.poll() is not None or time.monotonic() > deadline:
                        log = (self.folder / "redis.log").read_text(errors="replace")
                        raise RuntimeError(f"redis-server did not start:\n{log}") from None
                    time.sleep(0.01)
        finally:
            client.close()

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

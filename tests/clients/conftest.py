"""The realtime client libraries voice-agent developers use, driven against the real server.

Each library runs as its own process, in its own environment: the Python ones in
`.venv-clients` (tests/clients/requirements.txt; `make test` builds it), the JavaScript one
under node from tests/clients/js (`npm ci`). Not in the server's venv: together they would
move its pins (openai-agents wants websockets<17, pipecat soxr~=1.0 where the server runs soxr
1.1) and add some sixty packages to it. Each script holds the same conversation
(tests/clients/kit.py, js/kit.mjs) through its library's own API against the session's
realtime server, and writes a JSON report of what the library told it; the tests check that.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bench.speech import flite, pcm16
from orchestrator.service.serve import BackgroundServer
from tests.conftest import REPO_ROOT

HERE = Path(__file__).resolve().parent
CLIENTS_PYTHON = REPO_ROOT / ".venv-clients" / "bin" / "python"
# What the user says (flite's slt voice, 24 kHz pcm16), by kit.converse's names.
UTTERANCES = {
    "question": "What is the capital of France?",
    "story": "Tell me a story about a dragon.",
    "weather": "What is the weather in Paris?",
}
# Each client's own limit (kit.run) and, past it, the process's: killed with its group.
CLIENT_TIMEOUT_S = 100
KILL_AFTER_S = CLIENT_TIMEOUT_S + 20


@dataclass(frozen=True)
class Client:
    name: str
    command: tuple[str, ...]
    needs: Path


CLIENTS = {
    "openai-agents": Client(
        "openai-agents", (str(CLIENTS_PYTHON), "openai_agents_client.py"), CLIENTS_PYTHON
    ),
    "agents-realtime-js": Client(
        "agents-realtime-js",
        ("node", "js/agents_realtime_client.mjs"),
        HERE / "js" / "node_modules" / "@openai" / "agents-realtime",
    ),
    "pipecat": Client("pipecat", (str(CLIENTS_PYTHON), "pipecat_client.py"), CLIENTS_PYTHON),
    "livekit": Client("livekit", (str(CLIENTS_PYTHON), "livekit_client.py"), CLIENTS_PYTHON),
}


@dataclass
class Run:
    """One client's conversation: its report, its exit status and what it printed."""

    client: str
    report: dict[str, Any]
    returncode: int | None
    seconds: float
    output: str

    def explain(self) -> str:
        """What to read when a check fails: the client's log and its last output."""
        log = "\n".join(self.report.get("log", []))
        return (
            f"\n--- {self.client}: exit {self.returncode} after {self.seconds:.1f} s; its log:\n"
            f"{log}\n--- errors: {self.report.get('errors')}\n"
            f"--- server errors: {self.report.get('server_errors')}\n"
            f"--- output (tail):\n{self.output[-4000:]}"
        )


@pytest.fixture(scope="session")
def client_speech(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("client-speech")
    for name, text in UTTERANCES.items():
        (folder / f"{name}.pcm").write_bytes(pcm16(flite(text)))
    return folder


def _run(client: Client, url: str, speech: Path, folder: Path) -> Run:
    """Runs the client to its end (or kills it) and reads its report. A client that could
    not run at all gets a report saying why, so that every test of it fails with that."""
    missing = [str(client.needs)] if not client.needs.exists() else []
    missing += [] if shutil.which(client.command[0]) else [client.command[0]]
    if missing:
        why = f"{missing[0]} is missing: `make test` installs the client libraries"
        return Run(client.name, {"errors": [why]}, None, 0.0, "")
    report = folder / f"{client.name}.json"
    output = folder / f"{client.name}.log"
    began = time.monotonic()
    with output.open("w") as sink:
        process = subprocess.Popen(
            [
                *client.command,
                *("--url", url, "--speech", str(speech), "--report", str(report)),
                *("--timeout", str(CLIENT_TIMEOUT_S)),
            ],
            cwd=HERE,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        try:
            returncode: int | None = process.wait(timeout=KILL_AFTER_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            returncode = None
    seconds = time.monotonic() - began
    text = output.read_text(errors="replace")
    print(f"{client.name}: {seconds:.1f} s", file=sys.stderr)
    if not report.exists():
        why = f"no report (exit {returncode}, killed after {KILL_AFTER_S} s if None)"
        return Run(client.name, {"errors": [why]}, returncode, seconds, text)
    return Run(client.name, json.loads(report.read_text()), returncode, seconds, text)


class Runs(dict[str, Run]):
    """Each client's conversation, run once, on first use, for all the tests that read it."""

    def __init__(self, url: str, speech: Path, folder: Path) -> None:
        super().__init__()
        self._args = (url, speech, folder)

    def __missing__(self, name: str) -> Run:
        run = self[name] = _run(CLIENTS[name], *self._args)
        return run


@pytest.fixture(scope="session")
def client_runs(
    realtime_server: BackgroundServer,
    client_speech: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Runs:
    return Runs(realtime_server.url, client_speech, tmp_path_factory.mktemp("client-runs"))

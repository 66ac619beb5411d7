"""Time to first audio and barge-in latency of the whole service, as a client measures them.

A real tritonserver (the cascade by default), the realtime server, and one WebSocket client
that streams flite speech in real time (20 ms appends, paced by the wall clock):
- time to first audio: from the last sample of the question sent to the first
  `response.output_audio.delta` received (it includes the VAD's silence window,
  `silence_duration_ms`, which the table also shows subtracted);
- barge-in latency: from the speech onset in the interrupting audio (the moment the chunk
  holding its first speech sample was sent) to `output_audio_buffer.cleared` received.

Run: `python -m bench.realtime_latency --runs 20 --write` (writes "## Realtime latency" in
docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import time

import numpy as np
import numpy.typing as npt
from websockets.sync.client import ClientConnection, connect

from bench import cli, report, servers, stats
from bench.speech import flite_from_onset as flite_speech

HEADING = "## Realtime latency"
RATE = 24000
CHUNK = 480  # 20 ms
SILENCE_MS = 500
Audio = npt.NDArray[np.float32]


class Client:
    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.pending: list[tuple[float, dict[str, object]]] = []

    def send_audio_realtime(self, audio: Audio) -> float:
        """Send 20 ms appends at real-time pace; returns when the last one was sent."""
        pcm = (np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes()
        began = time.monotonic()
        sent = began
        for n, start in enumerate(range(0, len(pcm), CHUNK * 2)):
            due = began + n * CHUNK / RATE
            while time.monotonic() < due:
                self._poll(max(0.0, due - time.monotonic()))
            chunk = base64.b64encode(pcm[start : start + CHUNK * 2]).decode()
            self.ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": chunk}))
            sent = time.monotonic()
        return sent

    def silence_until(
        self, kind: str, timeout_s: float = 60, response_id: str | None = None
    ) -> tuple[float, dict[str, object]]:
        """Keep streaming silence in real time (a live microphone) until `kind` arrives."""
        silence = base64.b64encode(bytes(CHUNK * 2)).decode()
        deadline = time.monotonic() + timeout_s
        next_send = time.monotonic()
        while time.monotonic() < deadline:
            for i, (at, event) in enumerate(self.pending):
                response = event.get("response")
                rid = response.get("id") if isinstance(response, dict) else None
                if event["type"] == kind and response_id in (None, rid):
                    del self.pending[: i + 1]
                    return at, event
            if time.monotonic() >= next_send:
                self.ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": silence}))
                next_send += CHUNK / RATE
            self._poll(max(0.0, next_send - time.monotonic()))
        raise TimeoutError(kind)

    def _poll(self, timeout: float) -> None:
        try:
            raw = self.ws.recv(timeout=timeout)
        except TimeoutError:
            return
        self.pending.append((time.monotonic(), json.loads(raw)))

    def until(self, kind: str, timeout_s: float = 60) -> tuple[float, dict[str, object]]:
        deadline = time.monotonic() + timeout_s
        while True:
            for i, (at, event) in enumerate(self.pending):
                if event["type"] == kind:
                    del self.pending[: i + 1]
                    return at, event
            self.pending.clear()
            if time.monotonic() > deadline:
                raise TimeoutError(kind)
            self._poll(0.05)


def run(runs: int, pipeline: str, command: str) -> str:
    question = flite_speech("What is the capital of France?", "slt")
    interruption = flite_speech("Stop, wait a moment.", "kal")
    lead = np.zeros(int(0.3 * RATE), np.float32)
    ttfa: list[float] = []
    barge: list[float] = []
    with servers.realtime(pipeline) as server, connect(server.url, max_size=None) as ws:
        client = Client(ws)
        client.until("session.created")
        ws.send(
            json.dumps(
                {
                    "type": "session.update",
                    "session": {
                        "type": "realtime",
                        "max_output_tokens": 64,
                        "audio": {
                            "input": {
                                "turn_detection": {
                                    "type": "server_vad",
                                    "silence_duration_ms": SILENCE_MS,
                                }
                            }
                        },
                    },
                }
            )
        )
        client.until("session.updated")
        for _ in range(runs):
            client.send_audio_realtime(lead)
            speech_end = client.send_audio_realtime(question)
            first_audio, _ = client.silence_until("response.output_audio.delta")
            ttfa.append(first_audio - speech_end)
            onset = client.send_audio_realtime(interruption[:CHUNK])
            client.send_audio_realtime(interruption[CHUNK:])
            cleared, _ = client.silence_until("output_audio_buffer.cleared")
            barge.append(cleared - onset)
            # The interruption is the next user turn: let it start, then cancel it.
            _, created = client.silence_until("response.created")
            response = created["response"]
            assert isinstance(response, dict)
            client.ws.send(json.dumps({"type": "response.cancel"}))
            client.silence_until("response.done", response_id=str(response["id"]))
            client.pending.clear()
    return _table(runs, pipeline, ttfa, barge, command)


def _table(runs: int, pipeline: str, ttfa: list[float], barge: list[float], command: str) -> str:
    ms = stats.ms
    med_ttfa = stats.median(ttfa) * 1000
    med_barge = stats.median(barge) * 1000
    lines = [
        HEADING,
        "",
        f"Command: `{command}` ({os.cpu_count()} cores, "
        f"CPU; Python {sys.version.split()[0]}; pipeline `{pipeline}`; one client streaming "
        "flite speech in real time, 20 ms appends; server VAD with "
        f"silence_duration_ms {SILENCE_MS}).",
        "",
        "| figure | runs | median ms | p90 ms | max ms |",
        "|---|---:|---:|---:|---:|",
        f"| time to first audio (end of question -> first audio delta) | {len(ttfa)} | "
        f"{med_ttfa:.0f} | {ms(ttfa, 0.9):.0f} | {ms(ttfa, 1.0):.0f} |",
        f"| same, minus the VAD silence window ({SILENCE_MS} ms) | {len(ttfa)} | "
        f"{med_ttfa - SILENCE_MS:.0f} | {ms(ttfa, 0.9) - SILENCE_MS:.0f} | "
        f"{ms(ttfa, 1.0) - SILENCE_MS:.0f} |",
        f"| barge-in (speech onset sent -> output_audio_buffer.cleared received) | "
        f"{len(barge)} | {med_barge:.0f} | {ms(barge, 0.9):.0f} | {ms(barge, 1.0):.0f} |",
        "",
    ]
    return "\n".join(lines)


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--pipeline", default="cascade", choices=["cascade", "qwen3_omni"])


def _run(args: argparse.Namespace, command: str) -> cli.Outcome:
    return cli.Outcome(run(args.runs, args.pipeline, command))


BENCH = cli.Bench("bench.realtime_latency", __doc__, report.DOC, _arguments, _run)


def main(argv: list[str] | None = None) -> int:
    return cli.main(BENCH, argv)


if __name__ == "__main__":
    raise SystemExit(main())

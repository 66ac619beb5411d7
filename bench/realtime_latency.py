"""Time to first audio, split into its parts, and barge-in latency of the whole service, as a
client measures them.

A real tritonserver (the cascade by default), the realtime server, and one WebSocket client
per mode that streams flite speech in real time (20 ms appends, paced by the wall clock) and
silence between the questions (a live microphone). Modes are the turn detections of
bench/end_of_turn_sessions.py (`Config`): server_vad 500 ms and semantic_vad medium, each with
and without preemptive responses; each mode has a session of its own, asked the same question
`--runs` times.

Figures (client monotonic times; "end of speech" is the send time of the question's last
append):
- time to first audio: end of speech -> the first `response.output_audio.delta` received;
- its parts (`split`), which add up to it:
  - turn decision: end of speech -> `input_audio_buffer.committed` received (the VAD's
    silence window or the turn model, and the server's own VAD chunking);
  - transcript: committed -> `conversation.item.input_audio_transcription.completed`
    received, what the cascade waits for after the commit before its llm starts (0 when it
    came first: a preemptive response's transcript was made during the pause);
  - answer: the later of those two -> the first audio delta, less transport: the llm's first
    sentence, tts's first chunk and the Triton hops (held output of a preemptive response is
    released at the commit, so there this is what was left of its work);
  - transport: the server-to-client delivery of an event, taken as half a WebSocket ping's
    round trip measured after each answer (same socket, same server loop);
- first text: end of speech -> the first `response.output_audio_transcript.delta` (the
  cascade's tts sends each word with the chunk its audio ends in, so never before the audio);
- barge-in (server_vad 500 ms, no preemption): from the speech onset in the interrupting audio
  (the moment the chunk holding its first speech sample was sent) to
  `output_audio_buffer.cleared` received; that mode's next question follows the barge-in.
  The other modes let each answer play out (its audio's length from the first delta, and
  `PLAYOUT_MARGIN_S`) before the next question, so the history holds whole answers.

Speech (`--speech`): `flite` asks flite slt's "What is the capital of France?" every time;
`human` asks the human questions of asterisk's prompts (`HUMAN_QUESTIONS`, one US woman on a
phone line, bench/human_speech.py) in turn, each cut to its spoken part and levelled to
-20 dBFS active speech. Barge-ins are flite kal's "Stop, wait a moment." either way.

Run: `python -m bench.realtime_latency --runs 10 [--speech human] --write` (writes
"## Realtime latency" in docs/benchmarks.md; `--speech human`: "## Realtime latency (human
questions)").
"""

from __future__ import annotations

import argparse
import base64
import json
import math
import os
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
from websockets.sync.client import ClientConnection, connect

from bench import cli, human_speech, machine_load, report, servers, stats
from bench.end_of_turn_sessions import Config
from bench.speech import flite_from_onset as flite_speech

HEADING = "## Realtime latency"
HUMAN_HEADING = "## Realtime latency (human questions)"
# asterisk's prompts that are questions (core-sounds-en.txt: the ones ending in "?").
HUMAN_QUESTIONS = ("vm-savefolder", "vm-changeto", "vm-login", "vm-incorrect-mailbox")
ACTIVE_RMS = 0.1  # -20 dBFS over the spoken part
RATE = 24000
CHUNK = 480  # 20 ms
SILENCE_MS = 500
QUESTION = "What is the capital of France?"
PLAYOUT_MARGIN_S = 0.3
MAX_OUTPUT_TOKENS = 64
Audio = npt.NDArray[np.float32]
NAN = float("nan")

SERVER_VAD = Config("server_vad", silence_duration_ms=SILENCE_MS)
MODES: dict[str, Config] = {
    c.key: c
    for c in (
        SERVER_VAD,
        Config("server_vad", silence_duration_ms=SILENCE_MS, preemptive=True),
        Config("semantic_vad", eagerness="medium"),
        Config("semantic_vad", eagerness="medium", preemptive=True),
    )
}
PARTS = ("decision", "transcript", "answer", "transport")
PART_LABELS = {
    "decision": "turn decision",
    "transcript": "transcript after commit",
    "answer": "answer (llm + tts + Triton)",
    "transport": "transport",
}


@dataclass
class Turn:
    """One question's milestones (client monotonic seconds; nan: never seen)."""

    speech_end: float
    committed: float = NAN
    transcript: float = NAN
    first_text: float = NAN
    first_audio: float = NAN
    transport: float = NAN  # one-way, seconds
    answer: str = ""  # the transcript of the audio received (cut short by a barge-in)


@dataclass(frozen=True)
class Split:
    """A turn's time to first audio and its parts (seconds), which add up to `total`."""

    total: float
    decision: float
    transcript: float
    answer: float
    transport: float
    first_text: float

    def part(self, name: str) -> float:
        value: float = getattr(self, name)
        return value


def split(turn: Turn) -> Split:
    """The parts of `turn`'s time to first audio (module docstring); nan where a milestone
    was not seen. The transcript counts only past the commit: before it, it was ready in time."""
    total = turn.first_audio - turn.speech_end
    decision = turn.committed - turn.speech_end
    heard = turn.committed if math.isnan(turn.transcript) else max(turn.committed, turn.transcript)
    transcript = heard - turn.committed
    transport = turn.transport if math.isfinite(turn.transport) else 0.0
    answer = turn.first_audio - heard - transport
    return Split(
        total=total,
        decision=decision,
        transcript=transcript,
        answer=answer,
        transport=turn.transport,
        first_text=turn.first_text - turn.speech_end,
    )


@dataclass
class ModeResult:
    config: Config
    turns: list[Turn] = field(default_factory=list)
    barge: list[float] = field(default_factory=list)

    @property
    def splits(self) -> list[Split]:
        return [split(t) for t in self.turns]


class Client:
    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.pending: list[tuple[float, dict[str, object]]] = []
        # Every event and its arrival since the last `forget`, for the milestones.
        self.log: list[tuple[float, dict[str, object]]] = []

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

    def forget(self) -> None:
        self.pending.clear()
        self.log.clear()

    def seen(self, kind: str, item_id: object = None) -> tuple[float, dict[str, object]]:
        """The first event of `kind` (about `item_id`, if given) since `forget`, and when it
        arrived (nan and {}: none yet)."""
        for at, event in self.log:
            if event["type"] == kind and item_id in (None, event.get("item_id")):
                return at, event
        return NAN, {}

    def audio_s(self) -> float:
        """Seconds of answer audio received since `forget` (pcm16 at 24 kHz)."""
        return sum(
            len(base64.b64decode(str(event.get("delta", "")))) / 2 / RATE
            for _, event in self.log
            if event["type"] == "response.output_audio.delta"
        )

    def silence_for(self, seconds: float) -> None:
        """Keep streaming silence in real time for `seconds` (a live microphone)."""
        silence = base64.b64encode(bytes(CHUNK * 2)).decode()
        end = time.monotonic() + seconds
        next_send = time.monotonic()
        while time.monotonic() < end:
            if time.monotonic() >= next_send:
                self.ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": silence}))
                next_send += CHUNK / RATE
            self._poll(max(0.0, min(next_send, end) - time.monotonic()))

    def said(self) -> str:
        """The answer's transcript deltas since `forget`, joined."""
        return "".join(
            str(event.get("delta", ""))
            for _, event in self.log
            if event["type"] == "response.output_audio_transcript.delta"
        ).strip()

    def one_way_s(self) -> float:
        """Half a ping's round trip on this socket: the server loop's delivery of an event."""
        began = time.monotonic()
        if not self.ws.ping().wait(5):
            return NAN
        return (time.monotonic() - began) / 2

    def _poll(self, timeout: float) -> None:
        try:
            raw = self.ws.recv(timeout=timeout)
        except TimeoutError:
            return
        at, event = time.monotonic(), json.loads(raw)
        self.pending.append((at, event))
        self.log.append((at, event))

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


def session_update(config: Config) -> str:
    """The mode's turn detection (bench/end_of_turn_sessions.py), a short answer, and input
    transcription on: its `completed` event is the transcript's milestone."""
    session = json.loads(config.session_update(MAX_OUTPUT_TOKENS))["session"]
    session["output_modalities"] = ["audio"]
    session["audio"]["input"]["transcription"] = {"model": "whisper-1"}
    return json.dumps({"type": "session.update", "session": session})


def _response_id(event: dict[str, object]) -> str:
    response = event["response"]
    assert isinstance(response, dict)
    return str(response["id"])


def human_questions(rate: int = RATE) -> list[tuple[str, Audio]]:
    """asterisk's question prompts (`HUMAN_QUESTIONS`): transcript and audio at `rate`, each
    from its first spoken frame to its last, at -20 dBFS active speech."""
    out = []
    for name in HUMAN_QUESTIONS:
        recording = human_speech.asterisk(name, rate)
        audio = human_speech.spoken(recording.audio, rate)
        audio = audio * (ACTIVE_RMS / human_speech.active_rms(audio, rate))
        out.append((recording.transcript or name, np.clip(audio, -1, 1).astype(np.float32)))
    return out


def measure(
    config: Config, runs: int, url: str, questions: Sequence[Audio], interruption: Audio
) -> ModeResult:
    """One session of `runs` questions (`questions` in turn) in `config`'s turn detection."""
    lead = np.zeros(int(0.3 * RATE), np.float32)
    result = ModeResult(config)
    barge_in = config == SERVER_VAD
    with connect(url, max_size=None) as ws:
        client = Client(ws)
        client.until("session.created")
        ws.send(session_update(config))
        _, updated = client.until("session.updated")
        session = updated.get("session")
        refused = config.honoured_by(session if isinstance(session, dict) else {})
        if refused is not None:
            raise RuntimeError(f"{config.label}: {refused}")
        for i in range(runs):
            client.send_audio_realtime(lead)
            client.forget()
            turn = Turn(client.send_audio_realtime(questions[i % len(questions)]))
            turn.first_audio, _ = client.silence_until("response.output_audio.delta")
            if math.isnan(client.seen("response.output_audio_transcript.delta")[0]):
                client.silence_until("response.output_audio_transcript.delta")
            turn.first_text, _ = client.seen("response.output_audio_transcript.delta")
            turn.committed, committed = client.seen("input_audio_buffer.committed")
            # This turn's own: an earlier turn's (the interruption's) may come late.
            completed = "conversation.item.input_audio_transcription.completed"
            while math.isnan(client.seen(completed, committed.get("item_id"))[0]):
                client.silence_until(completed)
            turn.transcript, _ = client.seen(completed, committed.get("item_id"))
            if barge_in:
                onset = client.send_audio_realtime(interruption[:CHUNK])
                client.send_audio_realtime(interruption[CHUNK:])
                cleared, _ = client.silence_until("output_audio_buffer.cleared")
                result.barge.append(cleared - onset)
                # The interruption is the next user turn: let it start, then cancel it.
                _, created = client.silence_until("response.created")
                client.ws.send(json.dumps({"type": "response.cancel"}))
                client.silence_until("response.done", response_id=_response_id(created))
            else:
                client.silence_until("response.done")
                # Let the answer play out before the next question: spoken over, it would be
                # cut in the history to what was heard ("The"), and a model shown a history of
                # one-word answers answers in one word, which is quick to a first audio.
                played = turn.first_audio + client.audio_s() + PLAYOUT_MARGIN_S
                client.silence_for(played - time.monotonic())
            turn.transport = client.one_way_s()
            turn.answer = client.said()
            result.turns.append(turn)
    return result


def run(
    runs: int,
    pipeline: str,
    modes: Sequence[str],
    model_threads: int,
    command: str,
    speech: str = "flite",
) -> str:
    if speech == "human":
        asked = human_questions()
        questions = [audio for _, audio in asked]
        said = "asterisk's human questions " + ", ".join(repr(text) for text, _ in asked)
    else:
        questions, said = [flite_speech(QUESTION, "slt")], f"flite speech of {QUESTION!r}"
    interruption = flite_speech("Stop, wait a moment.", "kal")
    before = machine_load.mark()
    results: list[ModeResult] = []
    with servers.realtime(pipeline, model_threads=model_threads) as server:
        for key in modes:
            results.append(measure(MODES[key], runs, server.url, questions, interruption))
    # After the servers have exited: their CPU time counts as the bench's own.
    load = machine_load.Load(before, machine_load.mark())
    heading = HUMAN_HEADING if speech == "human" else HEADING
    return table(results, pipeline, command, said, heading, machine_load.lines(load))


def _cell(values: Sequence[float], digits: int = 0) -> str:
    return report.median_p90(values, digits)


def table(
    results: Sequence[ModeResult],
    pipeline: str,
    command: str,
    said: str = f"flite speech of {QUESTION!r}",
    heading: str = HEADING,
    load: Sequence[str] = (),
) -> str:
    """The section: the v1 figures of server_vad 500 ms (kept from the first version of this
    bench), then one row per mode with its time to first audio and every part of it."""
    ms = stats.ms
    lines = [
        heading,
        "",
        f"Command: `{command}` ({os.cpu_count()} cores, CPU; Python {sys.version.split()[0]}; "
        f"pipeline `{pipeline}`; one client per mode streaming {said} "
        f"in real time, 20 ms appends; max_output_tokens {MAX_OUTPUT_TOKENS}).",
        "",
        *load,
    ]
    plain = next((r for r in results if r.config == SERVER_VAD), None)
    if plain is not None:
        ttfa = [s.total for s in plain.splits]
        med = stats.median(ttfa) * 1000
        lines += [
            f"server_vad, silence_duration_ms {SILENCE_MS}:",
            "",
            "| figure | runs | median ms | p90 ms | max ms |",
            "|---|---:|---:|---:|---:|",
            f"| time to first audio (end of question -> first audio delta) | {len(ttfa)} | "
            f"{med:.0f} | {ms(ttfa, 0.9):.0f} | {ms(ttfa, 1.0):.0f} |",
            f"| same, minus the VAD silence window ({SILENCE_MS} ms) | {len(ttfa)} | "
            f"{med - SILENCE_MS:.0f} | {ms(ttfa, 0.9) - SILENCE_MS:.0f} | "
            f"{ms(ttfa, 1.0) - SILENCE_MS:.0f} |",
            f"| barge-in (speech onset sent -> output_audio_buffer.cleared received) | "
            f"{len(plain.barge)} | {stats.median_ms(plain.barge):.0f} | "
            f"{ms(plain.barge, 0.9):.0f} | {ms(plain.barge, 1.0):.0f} |",
            "",
        ]
    header = " | ".join(PART_LABELS[p] for p in PARTS)
    lines += [
        "Time to first audio by its parts (bench/realtime_latency.py `split`), ms, median / p90:",
        "",
        f"| mode | runs | end of speech -> first audio | {header} | first text |",
        "|---|---:|---|" + "---|" * (len(PARTS) + 1),
    ]
    for result in results:
        splits = result.splits
        # Transport is a fraction of a millisecond on loopback: whole ms would show 0.
        cells = [_cell([s.part(p) for s in splits], int(p == "transport")) for p in PARTS]
        lines.append(
            f"| {result.config.label} | {len(splits)} | {_cell([s.total for s in splits])} | "
            + " | ".join(cells)
            + f" | {_cell([s.first_text for s in splits])} |"
        )
    lines += ["", "Answers heard (how many turns each; a barge-in cuts server_vad's short):", ""]
    for result in results:
        counted = Counter(t.answer for t in result.turns)
        heard = "; ".join(f"{n}x {text!r}" for text, n in counted.most_common())
        lines.append(f"- {result.config.label}: {heard}")
    lines.append("")
    return "\n".join(lines)


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--pipeline", default="cascade", choices=["cascade", "qwen3_omni"])
    parser.add_argument(
        "--modes", nargs="+", default=list(MODES), choices=list(MODES), help="%(default)s"
    )
    parser.add_argument(
        "--model-threads", type=int, default=1, help="threads of each Triton model process"
    )
    parser.add_argument("--speech", default="flite", choices=["flite", "human"])


def _run(args: argparse.Namespace, command: str) -> cli.Outcome:
    text = run(args.runs, args.pipeline, args.modes, args.model_threads, command, args.speech)
    return cli.Outcome(text)


BENCH = cli.Bench("bench.realtime_latency", __doc__, report.DOC, _arguments, _run)


def main(argv: list[str] | None = None) -> int:
    return cli.main(BENCH, argv)


if __name__ == "__main__":
    raise SystemExit(main())

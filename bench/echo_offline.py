"""The echo bench's sessions replayed in memory: the real session core (`SessionCore`, its
WebRTC canceller and every echo rule), the real silero VAD (the ONNX file the Triton `vad`
model runs, bench/inprocess_vad.py), the same speakerphone player, rooms and corpus as
bench/echo.py, on a simulated clock.

Why: a live run costs real time (an answer is 7 s) and 2 cores hold four sessions at once, so
hundreds of answers per echo level take an hour; here an answer costs what its DSP and VAD
cost (about a tenth of a second), and the result does not depend on the machine's load. It is
the instrument the echo rules are chosen with; bench/echo.py's live sessions are the check.

Rules:
1. One `replay` is one session of bench/echo.py's `run_session`: the same `session.update`,
   question and `response.create`, decoded from the same JSON the client sends; the null
   pipeline's pacing (the first chunk 234 ms after the request, then an 80 ms chunk every
   80 ms); the speakerphone's player with its jitter and stalls, its room, its room tone,
   the user's speech at the item's offset after the answer's first audio, and playback ACKs
   every 100 ms with `input_ms`.
2. One clock, in ms, for both sides (the server's `now_ms`, the client's ticks). Every tick
   (20 ms) the client plays 20 ms and sends what its microphone heard meanwhile as one
   append. What the live bench's loopback client and server add between them (thread
   scheduling, the event loop, JSON) is drawn per message (`Network`): a client message
   reaches the core 2-30 ms after it was sent, a server event the client 2-30 ms after the
   core's step, a VAD answer comes 3-15 ms after its request; each stream stays in order.
   Timers fire at their deadlines; the backend's chunks come at their times.
3. What is counted is bench/echo.py's (`Outcome`): a cut (`output_audio_buffer.cleared`, a
   cancelled `response.done`, an interrupt `overlap.decision`), `speech_started`, the onset
   (the tick the user's first sample is sent in); times in seconds on the simulated clock.
4. Every item with a room runs with cancellation on (and off with `--off`); the echo-free items
   (no room: a headset) run as the plain server, cancellation off, the reference the latency target
   is measured against (the same user sounds at the same offsets as the interruptions over echo:
   echo_corpus.Plan.echo_free), and again with cancellation on (a user who turned it on and wears a
   headset: what the echo rules cost where no echo comes). The targets are issue 34's: false
   barge-ins from echo alone <= 2% at every level on >= 50 answers per level, interruptions over
   echo missed <= 2%, onset -> interrupt over echo within 80 ms of the echo-free median, and every
   interruption 0.5 s into an answer working (no blind window).
Run: `python -m bench.echo_offline --write` (its own section, "## Echo (in memory)").
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnxruntime as ort

from bench import cli, machine_load, report
from bench.echo import (
    ACK_EVERY_S,
    ASK,
    CHUNK_S,
    Mode,
    Outcome,
    Run,
    notes,
    session_update,
    targets,
)
from bench.echo_corpus import KINDS, LEVELS_DB, EchoItem, Plan, Voice, answer, build
from bench.inprocess_vad import CHUNK, CONTEXT, silero_onnx_path
from bench.overlap_corpus import room_tone
from bench.rooms import EchoPath
from bench.speakerphone import TICK, TICK_MS, Player, Playout
from bench.speech import RATE, pcm16
from orchestrator.protocol.codec import ServerEventEncoder, decode_client_event
from orchestrator.protocol.errors import ProtocolError
from orchestrator.session.actions import (
    ArmTimer,
    CancelBackend,
    CancelTimer,
    DetectSpeech,
    StartBackend,
)
from orchestrator.session.core import SessionCore, Step
from orchestrator.session.inputs import (
    BackendAudio,
    BackendDone,
    SpeechProbabilities,
    TimerFired,
)

FIRST_CHUNK_MS = 234
CHUNK_MS = round(CHUNK_S * 1000)
ACK_MS = round(ACK_EVERY_S * 1000)
TAIL_S = 3.0  # bench/echo.py runs this long past the answer


@dataclass(frozen=True)
class Network:
    """Rule 2's delays, ms, each drawn uniformly per message from (least, most)."""

    uplink_ms: tuple[int, int] = (2, 30)
    downlink_ms: tuple[int, int] = (2, 30)
    vad_ms: tuple[int, int] = (3, 15)


class _Silero:
    """One session's silero stream, answered on this thread (bench/inprocess_vad.py's)."""

    def __init__(self) -> None:
        options = ort.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = 1
        self._model = ort.InferenceSession(
            str(silero_onnx_path()), options, providers=["CPUExecutionProvider"]
        )
        self._state = np.zeros((2, 1, 128), np.float32)
        self._context = np.zeros((1, CONTEXT), np.float32)
        self._rate = np.array(16000, np.int64)

    def __call__(self, chunk: Any) -> float:
        x = np.concatenate([self._context, np.asarray(chunk, np.float32).reshape(1, CHUNK)], 1)
        out, self._state = self._model.run(
            None, {"input": x, "state": self._state, "sr": self._rate}
        )
        self._context = x[:, -CONTEXT:]
        return float(np.asarray(out).reshape(-1)[0])


class _Session:
    """Rule 2: one core, its backend, its timers and its client, on one clock (ms)."""

    def __init__(
        self, run: Run, item: EchoItem, cancellation: bool, mode: Mode, network: Network
    ) -> None:
        self.core = SessionCore("bench")
        self.now_ms = 0
        self.out = Outcome(item, cancellation, mode)
        self.vad = _Silero()
        self.encoder = ServerEventEncoder()
        self.network = network
        self.timers: dict[str, tuple[int, int]] = {}
        self.backend: dict[str, tuple[int, int]] = {}  # response -> (seq, next chunk index)
        self.next_chunk_ms: dict[str, int] = {}
        seed = item.room.seed if item.room is not None else 0
        self.rng = np.random.default_rng([seed, 0x5E55])
        # Rule 2's three delays, each queue in order (a later message never overtakes).
        self.up: deque[tuple[int, dict[str, Any]]] = deque()
        self.down: deque[tuple[int, dict[str, Any]]] = deque()
        self.answers: deque[tuple[int, SpeechProbabilities]] = deque()
        self.player = Player(Playout(item.jitter_ms, seed=seed))
        self.path = EchoPath(item.room, RATE) if item.room is not None else None
        self.tone = room_tone(10.0, seed)
        self.tone_at = 0
        self.voice = answer(item.voice)
        self.captured = 0
        self.last_ack = -ACK_MS
        self.user = np.zeros(0, np.float32)
        self.onset_pending = False
        self._carry(self.core.open(0))
        self.send(session_update(run, item, cancellation, mode))

    def _later(self, queue: deque[tuple[int, Any]], spread: tuple[int, int]) -> int:
        at = self.now_ms + int(self.rng.integers(spread[0], spread[1] + 1))
        return max(at, queue[-1][0]) if queue else at

    def send(self, message: dict[str, Any]) -> None:
        """The client sends `message` now; the server has it after the uplink's delay."""
        self.up.append((self._later(self.up, self.network.uplink_ms), message))

    def _handle(self, event: Any) -> None:
        self._carry(self.core.handle(event, self.now_ms))

    def _carry(self, step: Step) -> None:
        for action in step.actions:
            if isinstance(action, DetectSpeech):
                # Asked in order, answered in order: the stream's state follows the requests.
                answers = tuple(self.vad(chunk) for chunk in action.chunks)
                at = self._later(self.answers, self.network.vad_ms)
                self.answers.append((at, SpeechProbabilities(answers, action.chunk_end_ms)))
            elif isinstance(action, StartBackend):
                self.backend[action.response_id] = (action.seq, 0)
                self.next_chunk_ms[action.response_id] = self.now_ms + FIRST_CHUNK_MS
            elif isinstance(action, CancelBackend):
                self.backend.pop(action.response_id, None)
            elif isinstance(action, ArmTimer):
                self.timers[action.kind] = (action.deadline_ms, action.token)
            elif isinstance(action, CancelTimer):
                self.timers.pop(action.kind, None)
        for event in step.events:
            wire = json.loads(self.encoder.encode(event))
            self.down.append((self._later(self.down, self.network.downlink_ms), wire))

    def _server(self) -> None:
        while self.up and self.up[0][0] <= self.now_ms:
            event = decode_client_event(json.dumps(self.up.popleft()[1]))
            if isinstance(event, ProtocolError):
                raise RuntimeError(f"the bench sent a bad event: {event}")
            self._handle(event)
        while self.answers and self.answers[0][0] <= self.now_ms:
            self._handle(self.answers.popleft()[1])
        for kind, (deadline, token) in list(self.timers.items()):
            if deadline <= self.now_ms and self.timers.get(kind) == (deadline, token):
                del self.timers[kind]
                self._handle(TimerFired(kind, token))  # type: ignore[arg-type]
        for rid, (seq, index) in list(self.backend.items()):
            if self.next_chunk_ms[rid] > self.now_ms:
                continue
            # The first response plays the voice; any later one (after a barge-in) is silent.
            voice = self.voice if rid == self.out.answer_id else np.zeros(0, np.float32)
            n = CHUNK_MS * RATE // 1000
            part = voice[index * n : (index + 1) * n]
            if part.size:
                self.backend[rid] = (seq, index + 1)
                self.next_chunk_ms[rid] += CHUNK_MS
                self._handle(BackendAudio(rid, seq, pcm16(part)))
            else:
                del self.backend[rid]
                self._handle(BackendDone(rid, seq))

    def _client(self) -> None:
        while self.down and self.down[0][0] <= self.now_ms:
            wire = self.down.popleft()[1]
            self.player.heard(wire)
            self.out.on_event(wire, self.now_ms / 1000)
        if self.now_ms % TICK_MS == 0:
            self._tick()

    def _tick(self) -> None:
        """Rule 1: the tick's 20 ms of microphone, sent as it ends."""
        mic = self.path(self.player.tick()) if self.path is not None else np.zeros(TICK)
        mic = mic.astype(np.float32)
        start = self.tone_at % (self.tone.size - TICK)
        mic += self.tone[start : start + TICK]
        self.tone_at += TICK
        if self.user.size:
            if self.onset_pending:
                self.onset_pending = False
                self.out.onset = self.now_ms / 1000
            n = min(TICK, self.user.size)
            mic[:n] += self.user[:n]
            self.user = self.user[n:]
        self.send({"type": "input_audio_buffer.append", "audio": _b64(pcm16(mic))})
        self.captured += TICK
        self._ack()

    def step(self) -> None:
        """One ms of both sides."""
        self._server()
        self._client()
        self.now_ms += 1

    def say(self, audio: Any) -> None:
        self.user = np.asarray(audio, np.float32).copy()
        self.onset_pending = True

    def _ack(self) -> None:
        if self.now_ms - self.last_ack < ACK_MS:
            return
        self.last_ack = self.now_ms
        player = self.player
        if player.queued and not player.paused:
            rid = player.queued[0].response_id
            self.send(
                {
                    "type": "playback.ack",
                    "response_id": rid,
                    "played_ms": 1000 * player.played.get(rid, 0) // RATE,
                    "input_ms": 1000 * self.captured / RATE,
                }
            )


def _b64(data: bytes) -> str:
    import base64

    return base64.b64encode(data).decode()


def replay(
    run: Run,
    item: EchoItem,
    cancellation: bool = True,
    mode: Mode = "immediate",
    network: Network | None = None,
) -> Outcome:
    """Rule 1: one item's session, in memory."""
    session = _Session(run, item, cancellation, mode, network or Network())
    out = session.out
    session.send(ASK)
    session.send({"type": "response.create"})

    def until(done: Callable[[], bool], limit_ms: int) -> None:
        end = session.now_ms + limit_ms
        while session.now_ms < end and not done():
            session.step()

    until(lambda: out.first_audio is not None, 20_000)
    if out.first_audio is None:
        out.errors.append("no answer audio")
        return out
    out.began = out.first_audio
    answer_s = session.voice.size / RATE
    if item.user is not None:
        until(lambda: out.cut is not None, round(item.offset_s * 1000))
        if out.cut is None:
            session.say(item.user.audio)
            until(lambda: out.onset is not None, 100)
    until(lambda: out.settled(session.now_ms / 1000), round((answer_s + TAIL_S) * 1000))
    out.ended = session.now_ms / 1000
    return out


def _one(args: tuple[Run, EchoItem, bool]) -> Outcome:
    run, item, cancellation = args
    return replay(run, item, cancellation)


def measure(run: Run, workers: int) -> list[Outcome]:
    items = build(run.plan)
    # The echo-free items: the plain server with a headset, and with cancellation on (rule 4).
    jobs = [(run, i, on) for on in (False, True) for i in items if i.room is None]
    jobs += [(run, i, on) for on in run.settings for i in items if i.room is not None]
    if workers <= 1:
        return [_one(job) for job in jobs]
    with ProcessPoolExecutor(workers) as pool:
        return list(pool.map(_one, jobs, chunksize=4))


def table(run: Run, outcomes: list[Outcome], command: str, load: machine_load.Load) -> str:
    lines = [
        "## Echo (in memory)",
        "",
        f"Command: `{command}` ({len(outcomes)} sessions replayed; simulated clock).",
        "",
        *machine_load.lines(load),
        "| voice | cancellation | echo level | false barge-ins (echo alone) | echo heard as "
        "speech | interruptions cut by echo first | interruptions missed | onset -> "
        "interrupt | backchannels cut |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    keys = [f"{x:g} dB" for x in run.plan.levels_db] + ["none"]
    for voice in run.plan.voices:
        for cancellation in sorted({o.cancellation for o in outcomes}):
            for key in keys:
                mine = [
                    o
                    for o in outcomes
                    if o.item.voice == voice
                    and o.cancellation == cancellation
                    and o.item.level == key
                ]
                if not mine:
                    continue
                echo = [o for o in mine if o.item.kind == "echo"]
                speech = [o for o in mine if o.item.kind == "interruption"]
                playing = [o for o in speech if not o.cut_by_echo]
                bc = [o for o in mine if o.item.kind == "backchannel" and not o.cut_by_echo]
                cells = [
                    voice,
                    "on" if cancellation else "off",
                    key,
                    report.share_ci(sum(o.cut_by_echo for o in echo), len(echo)),
                    report.share(sum(o.echo_speech for o in echo), len(echo)),
                    report.share(sum(o.cut_by_echo for o in speech), len(speech)),
                    report.share_ci(sum(not o.interrupted for o in playing), len(playing)),
                    report.median_p90([o.latency for o in playing], 0),
                    report.share(sum(o.interrupted for o in bc), len(bc)),
                ]
                lines.append("| " + " | ".join(cells) + " |")
    false = [o for o in outcomes if o.cancellation and o.cut_by_echo]
    missed = [o for o in outcomes if o.cancellation and o.item.kind == "interruption"]
    missed = [o for o in missed if not o.cut_by_echo and not o.interrupted]
    for line in notes(
        # A cut before any answer audio counts from the simulated clock's start.
        [(o.item.name, o.first_audio or 0.0, o.cut) for o in false],
        [(o.item.name, o.first_audio, o.onset) for o in missed],
        cut_label="Cut by echo (cancellation on)",
        missed_label="Missed (cancellation on)",
        most=12,
        onsets=False,
        end="",
    ):
        lines += ["", line]
    return "\n".join([*lines, "", *targets(outcomes)]) + "\n"


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--voices", default="cascade,omni")
    parser.add_argument("--seeds", type=int, default=13, help="rooms per level, delay and kind")
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--levels", default=",".join(f"{x:g}" for x in LEVELS_DB))
    parser.add_argument("--off", action="store_true", help="also with cancellation off")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)


def _run(args: argparse.Namespace, command: str) -> cli.Outcome:
    voices: tuple[Voice, ...] = tuple(args.voices.split(","))
    plan = Plan(
        voices=voices,
        seeds=args.seeds,
        kinds=tuple(args.kinds.split(",")),
        levels_db=tuple(float(x) for x in args.levels.split(",")),
    )
    run = Run(plan=plan, settings=(False, True) if args.off else (True,))
    mark = machine_load.mark()
    began = time.monotonic()
    outcomes = measure(run, args.workers)
    load = machine_load.Load(mark, machine_load.mark())
    print(f"{len(outcomes)} sessions in {time.monotonic() - began:.0f} s", file=sys.stderr)
    return cli.Outcome(table(run, outcomes, command, load))


BENCH = cli.Bench("bench.echo_offline", __doc__, report.DOC, _arguments, _run)


def main(argv: Sequence[str] | None = None) -> int:
    return cli.main(BENCH, argv)


if __name__ == "__main__":
    raise SystemExit(main())

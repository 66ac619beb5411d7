"""What a session's checkpoint costs per turn: CPU and bytes of its snapshot, and the put.

A checkpoint (orchestrator/service/sessions/checkpoints.py `Checkpoints._write`) takes the
core's state, turns its items into snapshot items, builds a `SessionSnapshot` with the link's
sequence and journal, encodes it (orchestrator/session/resume/snapshot.py, bounded by
`snapshot_max_bytes`) and offers it to the `SnapshotWriter`, whose task `put`s it in the
session store (orchestrator/service/store/). This bench does the same to a real
`SessionCore` driven in memory through the codec, as the session actor drives it:
1. T turns (`--turns`, default 20). Each: a user item (`conversation.item.create`; even turns
   `input_audio`, 6 s of pcm16 with its transcript of 15 words, odd ones `input_text` of 15
   words), `response.create`, then the reply: 30 words of audio (0.4 s a word, in 80 ms
   chunks, each word riding on the chunk where it ends: `BackendAudio`), `BackendDone`.
2. Every event of every step is sequenced and journaled as the actor does (`seq =
   link.next_seq(); link.record(seq, encoder.encode(event, seq).decode())`) and taken by the
   client's socket (`link.delivered`). Two links see the same events: one whose client acks
   everything it has at the start of each turn (`session.event_ack`, `link.acked`), so a
   snapshot at the end of a turn holds that turn's events; one whose client never acks (an
   OpenAI client), whose journal grows to its bound (`resume_journal_bytes`) and then rolls.
3. After the chosen turns (`--at`), at the turn's end (the `response.done` step's
   checkpoint), each link's snapshot is built and encoded `--repeats` times, timed by the
   wall clock (`time.perf_counter`) and this process's CPU (`time.process_time`), and each
   time put into a `MemoryStore` and a `RedisStore` on a real `redis-server` on 127.0.0.1
   (Debian's binary, a folder and a free port of its own; its rows are skipped, with the
   reason, where the binary is missing), in turns, so that drift hits both alike. Each put
   is a new version under a held lease, and must be `written`.
4. A snapshot over `snapshot_max_bytes` is one the server skips (logged; the store keeps the
   previous one): its row says so, and its put is measured all the same.
Settings are `ServiceConfig`'s defaults. Medians, p90 and p99 over the repeats.

Run: `python -m bench.snapshot_cost --write` (writes "## Session snapshots" in
docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import base64
import json
import math
import os
import platform
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import msgspec
import redis
import trio

from bench import cli, machine_load, report, stats
from orchestrator.protocol import client as ce
from orchestrator.protocol.codec import ServerEventEncoder, decode_client_event
from orchestrator.protocol.errors import ProtocolError
from orchestrator.service.config import ServiceConfig
from orchestrator.service.sessions.checkpoints import COALESCE_S
from orchestrator.service.store.base import PutResult, SessionStore
from orchestrator.service.store.memory import MemoryStore
from orchestrator.service.store.redis_store import RedisStore
from orchestrator.session.actions import Checkpoint, StartBackend
from orchestrator.session.core import CoreConfig, SessionCore, Step
from orchestrator.session.inputs import BackendAudio, BackendDone
from orchestrator.session.resume import snapshot as snap
from orchestrator.session.resume.link import SessionLink

HEADING: Final = "## Session snapshots"
SESSION_ID: Final = "sess_bench"
IDENTITY: Final = "bench"
OWNER: Final = "bench"
LEASE_TTL_S: Final = 3600.0  # the bench's lease never lapses mid-run; puts use the config's ttl
RATE: Final = 24_000  # pcm16 mono, bytes = 2 x samples
CHUNK_MS: Final = 80  # a reply's audio chunk (Qwen3-Omni's Code2Wav frame)
WORD_MS: Final = 400  # 150 words a minute
USER_WORDS: Final = 15
REPLY_WORDS: Final = 30
USER_AUDIO_S: Final = 6.0
MODES: Final = ("every turn", "never")

VOCABULARY: Final = (
    "the a weather today tomorrow in Paris Rome what about and is it going to be sunny "
    "rain cold warm please tell me more could you book table for two at seven o'clock "
    "thanks that sounds great I would like train ticket next week with window seat how "
    "much does cost"
).split()


def sentence(rng: random.Random, words: int) -> str:
    said = [rng.choice(VOCABULARY) for _ in range(words)]
    said[0] = said[0].capitalize()
    return " ".join(said) + "."


# --- the conversation ---------------------------------------------------------------------


@dataclass
class Conversation:
    """One core, its events journaled by one link per ack mode (rule 2)."""

    core: SessionCore
    links: dict[str, SessionLink]
    rng: random.Random
    encoder: ServerEventEncoder = field(default_factory=ServerEventEncoder)
    turns: int = 0
    checkpoints: list[int] = field(default_factory=list)  # asked per turn (core rule 9)
    asked: int = 0  # checkpoints asked so far this turn

    @classmethod
    def open(cls, journal_bytes: int, seed: int = 0) -> Conversation:
        core = SessionCore(SESSION_ID, CoreConfig())
        links = {mode: SessionLink(SESSION_ID, IDENTITY, journal_bytes) for mode in MODES}
        conversation = cls(core, links, random.Random(seed))
        conversation._sent(core.open(0))
        # Turns are the client's (no VAD): the bench drives each one itself.
        session = {"instructions": "Be brief.", "audio": {"input": {"turn_detection": None}}}
        conversation.send("session.update", session=session)
        return conversation

    def _sent(self, step: Step) -> int:
        """The step's events, sequenced, journaled and taken by the socket (rule 2); the
        checkpoints it asks for."""
        for event in step.events:
            for link in self.links.values():
                seq = link.next_seq()
                effects = link.record(seq, self.encoder.encode(event, seq).decode())
                assert not effects, effects  # attached: the journal is a ring, never overflows
                link.delivered(seq)
        return sum(isinstance(a, Checkpoint) for a in step.actions)

    def send(self, kind: str, **fields: Any) -> Step:
        event = decode_client_event(json.dumps({"type": kind, **fields}))
        assert not isinstance(event, ProtocolError | ce.SessionResume | ce.SessionEventAck), event
        step = self.core.handle(event)
        self.asked += self._sent(step)
        return step

    def turn(self) -> None:
        """Rule 1: one turn, its acks first (rule 2)."""
        acking = self.links["every turn"]
        acking.acked(acking.last_seq)
        self.asked = 0
        said = sentence(self.rng, USER_WORDS)
        if self.turns % 2 == 0:
            audio = self.rng.randbytes(int(USER_AUDIO_S * RATE) * 2)
            part = {
                "type": "input_audio",
                "audio": base64.b64encode(audio).decode(),
                "transcript": said,
            }
        else:
            part = {"type": "input_text", "text": said}
        item = {"type": "message", "role": "user", "content": [part]}
        self.send("conversation.item.create", item=item)
        [start] = [a for a in self.send("response.create").actions if isinstance(a, StartBackend)]
        rid, seq = start.response_id, start.seq
        chunk = self.rng.randbytes(RATE * CHUNK_MS // 1000 * 2)  # one chunk's noise, reused
        per_word = WORD_MS // CHUNK_MS
        for word in sentence(self.rng, REPLY_WORDS).split():
            for i in range(per_word):
                text = word + " " if i == per_word - 1 else ""
                self.asked += self._sent(self.core.handle(BackendAudio(rid, seq, chunk, text)))
        self.asked += self._sent(self.core.handle(BackendDone(rid, seq, REPLY_WORDS)))
        self.turns += 1
        self.checkpoints.append(self.asked)


# --- what a checkpoint does ---------------------------------------------------------------


def snapshot_of(
    core: SessionCore,
    link: SessionLink,
    version: int,
    max_image_bytes: int,
    max_journal_bytes: int,
) -> snap.SessionSnapshot:
    """The snapshot `Checkpoints._write` builds (tests/bench/test_snapshot_cost.py holds
    the two to the same bytes)."""
    return snap.take(
        core.state(),
        session_id=core.session_id,
        version=version,
        identity=link.identity,
        token=link.token,
        last_seq=link.last_seq,
        journal=link.journal.held(),
        max_image_bytes=max_image_bytes,
        max_journal_bytes=max_journal_bytes,
    )


# --- the stores ---------------------------------------------------------------------------


class RedisServer:
    """`redis-server` in a folder of its own on a free loopback port, nothing saved to disk:
    a copy of tests/redis_server.py's (bench/ does not import tests/). Its place is
    bench/servers.py, which starts no Redis yet."""

    def __init__(self, binary: str, folder: Path) -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))  # a loopback port free now (bench/servers.py rule 1)
            self.port: int = sock.getsockname()[1]
        self.url = f"redis://127.0.0.1:{self.port}/0"
        command = [binary, "--bind", "127.0.0.1", "--port", str(self.port)]
        command += ["--save", "", "--appendonly", "no", "--dir", str(folder)]
        command += ["--daemonize", "no", "--logfile", str(folder / "redis.log")]
        self.process = subprocess.Popen(command, cwd=folder, stdin=subprocess.DEVNULL)
        client = redis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=0.2)
        deadline = time.monotonic() + 10
        try:
            while True:
                try:
                    self.version = str(client.info("server")["redis_version"])
                    return
                except redis.ConnectionError:
                    if self.process.poll() is not None or time.monotonic() > deadline:
                        self.kill()
                        log = (folder / "redis.log").read_text(errors="replace")
                        raise RuntimeError(f"redis-server did not start:\n{log}") from None
                    time.sleep(0.01)
        finally:
            client.close()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(10)  # waited for: its CPU is the bench's own (machine_load rule 1)


@contextmanager
def redis_server(wanted: bool) -> Iterator[RedisServer | str]:
    """A running server, or why there is none."""
    binary = shutil.which("redis-server")
    if not wanted:
        yield "not asked for (--no-redis)"
        return
    if binary is None:
        yield "redis-server is missing (apt-get install redis-server)"
        return
    with tempfile.TemporaryDirectory(prefix="snapshot_cost_") as folder:
        server = RedisServer(binary, Path(folder))
        try:
            yield server
        finally:
            server.kill()


# --- measuring ----------------------------------------------------------------------------


@dataclass
class Row:
    turns: int
    acks: str
    items: int
    journal_events: int
    journal_bytes: int
    snapshot_bytes: int
    over_bound: bool
    wall_s: list[float] = field(default_factory=list)
    cpu_s: list[float] = field(default_factory=list)
    put_s: dict[str, list[float]] = field(default_factory=dict)
    # The last snapshot encoded (for the test: what it holds).
    data: bytes = b""

    def numbers(self) -> list[float]:
        """Every figure the row reports (all finite for a sound run)."""
        figures = [*self.wall_s, *self.cpu_s, *(v for s in self.put_s.values() for v in s)]
        return [float(self.snapshot_bytes), float(self.items), *figures]


@dataclass
class Run:
    turns: int
    repeats: int
    at: tuple[int, ...]
    rows: list[Row]
    stores: tuple[str, ...]
    redis_note: str  # the Redis server's version, or why its rows are skipped
    checkpoints: list[int]  # asked per turn
    config: ServiceConfig
    load: machine_load.Load | None = None


def points(turns: int, at: Sequence[int]) -> tuple[int, ...]:
    """The turns measured after: those of `at` within the run, and the last."""
    return tuple(sorted({t for t in at if 1 <= t <= turns} | {turns}))


async def _measure(
    turns: int, repeats: int, at: tuple[int, ...], redis_url: str | None, config: ServiceConfig
) -> tuple[list[Row], list[int]]:
    stores: dict[str, SessionStore] = {"MemoryStore": MemoryStore()}
    if redis_url is not None:
        stores["RedisStore"] = await RedisStore.connect(redis_url)
    try:
        fences = {
            (name, mode): await store.acquire(f"{SESSION_ID}_{i}", OWNER, LEASE_TTL_S)
            for name, store in stores.items()
            for i, mode in enumerate(MODES)
        }
        conversation = Conversation.open(config.resume_journal_bytes)
        rows: list[Row] = []
        version = 0
        for turn in range(1, turns + 1):
            conversation.turn()
            if turn not in at:
                continue
            for i, mode in enumerate(MODES):
                link = conversation.links[mode]
                row = Row(
                    turns=turn,
                    acks=mode,
                    items=len(conversation.core.state().items),
                    journal_events=len(link.journal),
                    journal_bytes=link.journal.bytes,
                    snapshot_bytes=0,
                    over_bound=False,
                    put_s={name: [] for name in stores},
                )
                for _ in range(repeats):
                    version += 1
                    wall, cpu = time.perf_counter(), time.process_time()
                    snapshot = snapshot_of(
                        conversation.core,
                        link,
                        version,
                        config.snapshot_image_bytes,
                        config.snapshot_journal_bytes,
                    )
                    try:
                        data = snap.encode(snapshot, config.snapshot_max_bytes)
                    except snap.SnapshotTooLarge:
                        data = b""
                    row.cpu_s.append(time.process_time() - cpu)
                    row.wall_s.append(time.perf_counter() - wall)
                    if not data:  # rule 4: skipped by the server; measured all the same
                        row.over_bound = True
                        data = snap.encode(snapshot, sys.maxsize)
                    row.snapshot_bytes, row.data = len(data), data
                    for name, store in stores.items():
                        fence = fences[name, mode]
                        t0 = time.perf_counter()
                        result = await store.put(
                            f"{SESSION_ID}_{i}", version, data, config.snapshot_ttl_s, fence
                        )
                        row.put_s[name].append(time.perf_counter() - t0)
                        assert result is PutResult.WRITTEN, (name, result)
                rows.append(row)
        return rows, conversation.checkpoints
    finally:
        for store in stores.values():
            await store.close()


def measure(turns: int, repeats: int, at: Sequence[int], *, use_redis: bool = True) -> Run:
    """Rules 1-4, the machine's load around them."""
    config = ServiceConfig()
    chosen = points(turns, at)
    before = machine_load.mark()
    with redis_server(use_redis) as server:
        url = server.url if isinstance(server, RedisServer) else None
        note = f"redis-server {server.version}" if isinstance(server, RedisServer) else server
        rows, asked = trio.run(_measure, turns, repeats, chosen, url, config)
    load = machine_load.Load(before, machine_load.mark())
    stores = ("MemoryStore", "RedisStore") if url is not None else ("MemoryStore",)
    return Run(turns, repeats, chosen, rows, stores, note, asked, config, load)


# --- the section --------------------------------------------------------------------------


def _cell(values: Sequence[float], digits: int = 3) -> str:
    """median / p90 / p99 in ms, "-" when nothing was measured."""
    kept = stats.finite(values)
    if not kept:
        return "-"
    return " / ".join(f"{stats.ms(kept, q):.{digits}f}" for q in (0.5, 0.9, 0.99))


def _kib(size: int) -> str:
    return f"{size / 1024:,.0f}" if size >= 10 * 1024 else f"{size / 1024:.1f}"


def section(run: Run, command: str) -> str:
    config = run.config
    asked = sorted(set(run.checkpoints))
    asked_text = " or ".join(str(a) for a in asked)
    redis_cell = "RedisStore" in run.stores
    lines = [
        HEADING,
        "",
        f"Command: `{command}` ({run.turns} turns, {run.repeats} snapshots per row; "
        f"{os.cpu_count()} cores, Python {platform.python_version()}, msgspec "
        f"{msgspec.__version__}, redis-py {redis.__version__}; "
        + (run.redis_note if redis_cell else f"RedisStore skipped: {run.redis_note}")
        + ").",
        "",
        "What one checkpoint of a session costs (`Checkpoints._write`: `core.state()`, "
        "`items_to_snapshot`, the `SessionSnapshot` with the link's journal, `snapshot.encode`) "
        "and its `put` into the store, measured on a real `SessionCore` driven through the "
        "codec in memory. Each turn: a user item (even turns 6 s of `input_audio` with a "
        f"{USER_WORDS}-word transcript, odd ones `input_text`), `response.create`, a reply of "
        f"{REPLY_WORDS} words with {REPLY_WORDS * WORD_MS / 1000:.0f} s of audio in "
        f"{CHUNK_MS} ms chunks, `response.done`; every event journaled as the actor does. "
        "Snapshots taken at the turn's end (the `response.done` step's checkpoint); each turn "
        f"asks for {asked_text} checkpoints (its item, the response's start, its end; "
        f"coalesced within {1000 * COALESCE_S:.0f} ms). Client acks `every turn`: it acks all "
        "it has at the start of each turn (`session.event_ack`), so the journal holds that turn's "
        "events; `never` (an OpenAI client): the journal grows to its "
        f"{config.resume_journal_bytes // (1024 * 1024)} MiB bound (`resume_journal_bytes`) "
        "and rolls. Build + encode: wall (`perf_counter`) and this process's CPU "
        "(`process_time`); puts: a new version each, awaited from Trio (RedisStore: a worker "
        "thread, a Lua script, 127.0.0.1). Cells: median / p90 / p99 in ms. Settings: "
        "`ServiceConfig` defaults.",
        "",
        *machine_load.lines(run.load),
        "| after turn | client acks | items | journal: events / KiB | snapshot KiB | "
        "build + encode, wall ms | build + encode, CPU ms | `MemoryStore.put` ms | "
        "`RedisStore.put` ms |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    over = False
    for row in run.rows:
        size = _kib(row.snapshot_bytes) + (" (over the bound)" if row.over_bound else "")
        over = over or row.over_bound
        lines.append(
            f"| {row.turns} | {row.acks} | {row.items} | {row.journal_events} / "
            f"{_kib(row.journal_bytes)} | {size} | {_cell(row.wall_s)} | {_cell(row.cpu_s)} | "
            f"{_cell(row.put_s.get('MemoryStore', []))} | "
            f"{_cell(row.put_s.get('RedisStore', []))} |"
        )
    lines += [
        "",
        f"A turn asks for {asked_text} checkpoints; the one measured, at its end, is the largest "
        "(the item's and the start's hold no more items and no more journal), so a turn costs "
        f"at most {max(asked, default=0)} times its row, less what the {1000 * COALESCE_S:.0f} ms "
        "coalescing merges.",
        "",
    ]
    if any(row.items < 2 * row.turns for row in run.rows):
        lines += [
            "Fewer items than two a turn: the history's pruning (`HistoryLimits`, at most "
            f"{CoreConfig().limits.max_audio_inputs} turns holding user audio) dropped the oldest "
            "turns, so the conversation's part of a snapshot stops growing.",
            "",
        ]
    if over:
        lines += [
            'A snapshot "over the bound" is larger than `snapshot_max_bytes` '
            f"({config.snapshot_max_bytes // (1024 * 1024)} MiB): the server skips it "
            "(`SnapshotTooLarge`, logged) and the store keeps the previous one; its encode and "
            "put are measured all the same.",
            "",
        ]
    return "\n".join(lines)


def _turn_list(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"a comma-separated list of turns: {text!r}") from error


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--turns", type=int, default=20, help="turns of the conversation")
    parser.add_argument("--repeats", type=int, default=100, help="snapshots per row")
    parser.add_argument(
        "--at", type=_turn_list, default=(1, 5, 10, 20), help="turns measured after (and the last)"
    )
    parser.add_argument(
        "--redis",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also a RedisStore on a local redis-server (skipped when it is missing)",
    )


def _run(args: argparse.Namespace, command: str) -> cli.Outcome:
    if args.turns < 1 or args.repeats < 1:
        raise cli.Usage("--turns and --repeats must be at least 1")
    run = measure(args.turns, args.repeats, args.at, use_redis=args.redis)
    if "RedisStore" not in run.stores:
        print(f"bench.snapshot_cost: RedisStore rows skipped: {run.redis_note}", file=sys.stderr)
    bad = [row for row in run.rows if not all(math.isfinite(v) for v in row.numbers())]
    return cli.Outcome(section(run, command), failed=bool(bad))


BENCH = cli.Bench("bench.snapshot_cost", __doc__, report.DOC, _arguments, _run)


def main(argv: list[str] | None = None) -> int:
    return cli.main(BENCH, argv)


if __name__ == "__main__":
    raise SystemExit(main())

"""bench/snapshot_cost.py: what a session's checkpoint costs. Its numbers mean something only
if every row measured something, the snapshot it times is the one the server writes, and
that snapshot holds the conversation's turns and the journal its client left."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest

from bench import snapshot_cost
from bench.snapshot_cost import MODES, REPLY_WORDS, USER_WORDS, WORD_MS, Conversation, Run
from orchestrator.service.config import ServiceConfig
from orchestrator.service.sessions.checkpoints import Checkpoints
from orchestrator.service.store.memory import MemoryStore
from orchestrator.session.resume import snapshot as snap

TURNS = 3
REPEATS = 3
HAS_REDIS = shutil.which("redis-server") is not None


@pytest.fixture(scope="module")
def run() -> Run:
    return snapshot_cost.measure(TURNS, REPEATS, (1, 5), use_redis=HAS_REDIS)


def test_rule3_every_row_measured_every_store_and_has_finite_numbers(run: Run) -> None:
    assert run.at == (1, TURNS), "the turns asked within the run, and the last"
    assert [(r.turns, r.acks) for r in run.rows] == [(t, m) for t in run.at for m in MODES]
    stores = ("MemoryStore", "RedisStore") if HAS_REDIS else ("MemoryStore",)
    assert run.stores == stores
    for row in run.rows:
        assert len(row.wall_s) == len(row.cpu_s) == REPEATS, row.turns
        assert set(row.put_s) == set(stores)
        assert all(len(times) == REPEATS for times in row.put_s.values())
        numbers = row.numbers()
        assert all(math.isfinite(v) and v >= 0 for v in numbers), (row.turns, row.acks)
        assert min(row.wall_s) > 0 and row.snapshot_bytes == len(row.data) > 0
        assert not row.over_bound, "3 turns are far under snapshot_max_bytes"
    assert run.checkpoints == [3] * TURNS, "a turn asks for 3: its item, start and end"


def test_rule1_the_snapshot_holds_every_turn(run: Run) -> None:
    last = [row for row in run.rows if row.turns == TURNS]
    for row in last:
        held = snap.decode(row.data)
        assert row.items == len(held.items) == 2 * TURNS, "a user item and a reply a turn"
        assert [item.role for item in held.items] == ["user", "assistant"] * TURNS
        for turn in range(TURNS):
            [said] = held.items[2 * turn].content
            # Audio turns keep only their transcript (snapshot.py rule 2): text either way.
            assert isinstance(said, snap.TextIn) and len(said.text.split()) == USER_WORDS
            [reply] = held.items[2 * turn + 1].content
            assert isinstance(reply, snap.AudioOut) and reply.transcript is not None
            assert len(reply.transcript.split()) == REPLY_WORDS
            assert reply.audio_ms == REPLY_WORDS * WORD_MS


def test_rule2_the_journal_is_what_the_client_has_not_acked(run: Run) -> None:
    rows = {row.acks: row for row in run.rows if row.turns == TURNS}
    never = snap.decode(rows["never"].data)
    acking = snap.decode(rows["every turn"].data)
    assert never.last_seq == acking.last_seq
    # Never acked: every event since session.created (seq 1), none missing.
    assert [e.seq for e in never.journal] == list(range(1, never.last_seq + 1))
    # Acked at the turn's start: this turn's events only, from its user item to response.done.
    assert '"conversation.item.added"' in acking.journal[0].text
    assert '"response.done"' in acking.journal[-1].text
    assert acking.journal[-1].seq == acking.last_seq
    assert len(acking.journal) == rows["every turn"].journal_events < len(never.journal) / 2


def test_the_snapshot_timed_is_the_one_checkpoints_write() -> None:
    config = ServiceConfig()
    conversation = Conversation.open(config.resume_journal_bytes)
    for _ in range(2):
        conversation.turn()
    # A third turn's response left generating: the snapshot names it live.
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi."}]}
    conversation.send("conversation.item.create", item=item)
    conversation.send("response.create")
    offered: list[bytes] = []

    class Writer:
        def offer(self, session_id: str, version: int, data: bytes, *, fence: int) -> bool:
            offered.append(data)
            return True

    for mode, link in conversation.links.items():
        checkpoints = Checkpoints(
            conversation.core.session_id,
            MemoryStore(),
            Writer(),  # type: ignore[arg-type]
            owner="bench",
            ttl_s=config.snapshot_ttl_s,
            max_bytes=config.snapshot_max_bytes,
            max_image_bytes=config.snapshot_image_bytes,
            max_journal_bytes=config.snapshot_journal_bytes,
            state=lambda link=link: (conversation.core, link, 0),  # type: ignore[misc]
            on_lost=lambda: None,
            version=6,
            fence=1,
        )
        checkpoints._write()
        ours = snapshot_cost.snapshot_of(
            conversation.core,
            link,
            7,
            config.snapshot_image_bytes,
            config.snapshot_journal_bytes,
        )
        assert offered[-1] == snap.encode(ours, config.snapshot_max_bytes), mode
        assert len(ours.live) == 1 and len(ours.journal) > 0


def test_write_puts_the_section_in_the_document(tmp_path: Path) -> None:
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\n## Other\n\nkept\n", encoding="utf-8")
    argv = ["--turns", "2", "--repeats", "2", "--no-redis", "--write", "--doc", str(doc)]
    assert snapshot_cost.main(argv) == 0
    text = doc.read_text(encoding="utf-8")
    assert "## Other\n\nkept" in text and snapshot_cost.HEADING in text
    assert "`python -m bench.snapshot_cost --turns 2 --repeats 2 --no-redis`" in text
    assert "RedisStore skipped: not asked for" in text and "Machine load:" in text
    table = [line for line in text.splitlines() if line.startswith("| 2 |")]
    assert len(table) == len(MODES) and all(line.endswith("| - |") for line in table)

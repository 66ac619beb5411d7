"""Conversations outlive their worker (issue 36): `turntaker serve --workers 2
--session-store redis://...` behind a real nginx, on the session's real tritonserver (`null`
pipeline) and a real `redis-server`, driven by the restart soak's clients
(bench/restart_clients.py: every sequenced event checked, `conversation.context` at the end).

What a user would notice:
- a rolling restart (SIGHUP to the supervisor) under running sessions: each worker in turn
  closes its sessions with 4001, each client resumes at once through nginx on the other
  worker, and every conversation goes on: no event lost or repeated (seq contiguous from 1
  over every connection), every answer ended once, and a turn after the restart sees every
  earlier turn in `conversation.context`;
- a worker SIGKILLed between turns: its clients lose their connection (no close frame),
  resume through nginx and are taken over from the last snapshot: the earlier turns are in
  `conversation.context`, and the sequence goes on with nothing lost or repeated.

Short drains (`DRAIN_ENV`), few turns, small answers; every wait is bounded.
"""

from __future__ import annotations

import asyncio
import math
import os
import random
import signal
import time
from collections.abc import Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import pytest
import trio

from bench import restart_soak, servers
from bench.drop_checks import Tally
from bench.drop_clients import Timing
from bench.load_clients import session_update
from bench.restart_clients import RestartSession
from orchestrator.service.store.redis_store import RedisStore
from orchestrator.session.resume import snapshot as snap
from orchestrator.triton import TritonServer
from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.skipif(
    not (REPO_ROOT / "model_repository" / "null").is_dir(), reason="no `null` model"
)

# A drain of 3 s, an answer cut after 1 s of it: what the soak's 4-8 token answers (under a
# second at real time) finish well within.
DRAIN_ENV = {"TURNTAKER_DRAIN_TIMEOUT_S": "3", "TURNTAKER_DRAIN_ANSWER_S": "1"}
SESSIONS = 4
TOKENS = 4


@pytest.fixture(scope="module")
def cluster(triton_server: TritonServer, redis_url: str) -> Iterator[servers.Cluster]:
    with servers.cluster(triton_server.grpc_url, 2, redis_url, env=DRAIN_ENV) as running:
        assert sorted(running.workers()) == ["w0", "w1"], running.log()
        yield running


def _clean(tally: Tally) -> dict[str, int]:
    """The figures that must all be 0 (event ids apart: `_ids_unique`)."""
    names = ("losses", "duplicates", "missing_terminals", "extra_terminals", "wrong_length",
             "resume_failures", "unexpected", "hangs", "not_kept")  # fmt: skip
    return {name: getattr(tally, name) for name in names if getattr(tally, name)}


def _ids_unique(tally: Tally) -> None:
    """No `event_id` twice in a session, across the workers that carried it (drop_checks.py);
    checked last, so that a failure here says every other rule held."""
    repeated = [f for f in tally.failures if "event_id" in f][:3]
    assert tally.repeated_ids == 0, (
        f"{tally.repeated_ids} event_ids repeated after a takeover, e.g. {repeated}: the worker "
        "taking a session over numbers its new events from event_1 again"
    )


T = TypeVar("T")


def _in_a_thread(coroutine: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run` on a thread of its own: the browser tests' Playwright keeps an event loop
    running in the main thread for the whole session, where asyncio.run() refuses to start."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def test_a_rolling_restart_keeps_every_conversation_and_every_event(
    cluster: servers.Cluster, redis_url: str
) -> None:
    run = _in_a_thread(
        restart_soak.soak_cluster(
            cluster, SESSIONS, 3, restart=True, warm_s=3.0, after_s=1.0, store_url=redis_url
        )
    )
    tally = run.tally
    assert not run.aborted, cluster.log()
    assert sorted(run.per_worker_s) == ["w0", "w1"], cluster.log()
    assert tally.sessions == SESSIONS and tally.kept == SESSIONS, tally.failures
    assert not _clean(tally), (_clean(tally), tally.failures)
    # Every session sat on a worker that was restarted: each moved at least once, resumed at
    # once, and none lost its connection outright.
    assert tally.resumes["moved"] >= SESSIONS, tally.resumes
    assert tally.resumes["lost"] == 0, tally.resumes
    assert len(tally.resume_s["moved"]) == tally.resumes["moved"]
    assert max(tally.resume_s["moved"]) < 10, tally.resume_s
    # Turns before the restart are among those checked, and turns ran after it.
    assert tally.items_before_restart >= 2 * SESSIONS, tally.items_before_restart
    assert tally.statuses["completed"] >= 2 * SESSIONS, tally.statuses
    _ids_unique(tally)
    assert run.failures() == [], run.failures()


def _stored_seq(redis_url: str, session_id: str) -> int:
    """The last seq the session's snapshot in Redis holds (-1: none)."""

    async def read() -> int:
        store = await RedisStore.connect(redis_url)
        try:
            found = await store.get(session_id)
        finally:
            await store.close()
        return snap.decode(found.data).last_seq if found is not None else -1

    return trio.run(read)


async def _killed(cluster: servers.Cluster, redis_url: str) -> tuple[Tally, list[str]]:
    tally = Tally(0, math.inf)
    sessions = [
        RestartSession(cluster.url, random.Random(n), tally, Timing(1.0)) for n in range(SESSIONS)
    ]
    killed: list[str] = []
    try:
        for session in sessions:
            await session.open()
            await session.send(session_update(TOKENS, server_vad=False))
        for _ in range(2):
            for session in sessions:
                await session.turn(TOKENS)
        victim = sessions[0].sid.split("_")[1]  # sess_<route>_<hex>
        on_victim = [s for s in sessions if s.sid.split("_")[1] == victim]
        # Its sessions' last snapshots hold both turns (a checkpoint follows response.done).
        deadline = time.monotonic() + 10
        for session in on_victim:
            while _stored_seq(redis_url, session.sid) < session.log.last_seq:
                assert time.monotonic() < deadline, f"no snapshot of {session.sid}'s turns"
                await asyncio.sleep(0.05)
        before = {s.sid: list(s.log.item_ids) for s in on_victim}
        os.kill(cluster.workers()[victim][0], signal.SIGKILL)
        for session in on_victim:
            ws = session.ws
            assert ws is not None
            await asyncio.wait_for(ws.wait_closed(), 10)
            assert ws.protocol.close_rcvd is None, "a killed worker sent a close frame"
            killed.append(session.sid)
        # The next turn meets the lost connection: resumed through nginx, taken over there.
        for session in sessions:
            await session.turn(TOKENS)
            assert await session.context_kept(), session.sid
        for session in on_victim:
            assert set(before[session.sid]) <= set(session.log.context_ids or ())
            assert len(before[session.sid]) >= 4  # two turns: a user item and a reply each
    finally:
        for session in sessions:
            await session.close()
            tally.fold(session.log)
    return tally, killed


def test_a_killed_worker_sessions_resume_on_the_other_with_their_history(
    cluster: servers.Cluster, redis_url: str
) -> None:
    tally, killed = _in_a_thread(_killed(cluster, redis_url))
    assert killed, "no session on the killed worker"
    assert tally.resumes["lost"] == len(killed), (tally.resumes, killed)
    assert tally.resumes["moved"] == 0, tally.resumes
    assert not _clean(tally), (_clean(tally), tally.failures)
    assert tally.statuses["completed"] == 3 * SESSIONS, tally.statuses
    _ids_unique(tally)

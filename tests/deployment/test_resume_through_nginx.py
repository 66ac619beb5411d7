"""Session resume through nginx (`turntaker serve --workers 2`, deploy/nginx.conf): real worker
processes on the session's real tritonserver, real sockets dropped or killed under the client.

What a user would notice:
- a connection dropped in the middle of an answer comes back through nginx, with
  `?session_id=<id>` in the URL, to the very process holding the session, and gets the rest
  of the answer: every event once, in order (`server_event_seq` 1, 2, ... with no gap and no
  repeat across both connections), all 40 audio chunks, one completed `response.done`;
- when the process holding a session is SIGKILLed, its client's socket is cut; coming back
  through nginx lands on the live process, which answers `session_resume_failed` and a fresh
  session that works (a response completes);
- the sessions on the live process never notice: an answer streaming during the kill
  completes with contiguous seqs and no `error`, and the next one does too.

On the `null` pipeline a response streams 80 ms of audio every 80 ms, so a 40-token answer
lasts about 3 s: long enough to drop the connection, or kill a worker, in the middle of it.
Every wait is bounded.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest

from orchestrator.triton import TritonServer
from tests.conftest import REPO_ROOT
from tests.deployment.test_nginx_workers import Cluster, _cluster, _route
from tests.e2e.realtime_client import RawSession, raw_session
from tests.e2e.test_conversation_e2e import _ask_text, _manual
from tests.e2e.test_reliability_e2e import _closed
from tests.e2e.test_resume_e2e import _drop, _resume, _seqs

pytestmark = pytest.mark.skipif(
    not (REPO_ROOT / "model_repository" / "null").is_dir(), reason="no `null` model"
)

TOKENS = 40


@pytest.fixture(scope="module")
def cluster(triton_server: TritonServer) -> Iterator[Cluster]:
    with _cluster(triton_server) as running:
        yield running


def _pinned(cluster: Cluster, route: str) -> str:
    """A URL whose connection nginx sends to worker `route` (an id it does not know there:
    a fresh session on that worker)."""
    return f"{cluster.url}&session_id=sess_{route}_0123456789abcdef"


def _created(session: RawSession) -> dict[str, Any]:
    created = session.events[0]
    assert created["type"] == "session.created", created
    return created


def _contiguous(events: list[dict[str, Any]]) -> None:
    seqs = _seqs(events)
    assert seqs == list(range(1, len(seqs) + 1)), f"a gap or a repeat in server_event_seq: {seqs}"
    ids = [e["event_id"] for e in events]
    assert len(ids) == len(set(ids)), "an event_id came twice"


def test_a_drop_mid_response_resumes_on_the_same_worker_with_nothing_lost(
    cluster: Cluster,
) -> None:
    with raw_session(cluster.url) as first:
        route = _route(first)
        created = _created(first)
        sid, token = created["session"]["id"], created["resume_token"]
        _manual(first, max_tokens=TOKENS)
        rid = _ask_text(first, "Talk to me.")
        for _ in range(5):
            first.until("response.output_audio.delta", timeout_s=30)
        before = list(first.events)
        assert not [e for e in before if e["type"] == "response.done"]  # mid-response
        _drop(first.ws)
    time.sleep(0.5)  # the answer goes on meanwhile: its events are journaled
    last = _seqs(before)[-1]
    with raw_session(f"{cluster.url}&session_id={sid}") as second:
        # nginx sent the connection to the process holding the session.
        assert _route(second) == route, (route, _created(second)["session"]["id"])
        assert _created(second)["session"]["id"] != sid
        _resume(second, sid, token, last)
        resumed = second.until("session.resumed", timeout_s=10)
        assert "server_event_seq" not in resumed
        assert resumed["session_id"] == sid and resumed["replayed_from_seq"] == last + 1
        done = second.until("response.done", timeout_s=30)
        assert done["response"]["id"] == rid and done["response"]["status"] == "completed"
        after = second.events[second.events.index(resumed) + 1 :]
    events = [*before, *after]
    _contiguous(events)
    assert not [e for e in events if e["type"] == "error"], events
    assert [e["type"] for e in events].count("response.done") == 1
    deltas = [e for e in events if e["type"] == "response.output_audio.delta"]
    assert len(deltas) == TOKENS  # one 80 ms chunk a token: every one arrived exactly once
    assert done["response"]["usage"]["output_tokens"] == TOKENS


def test_a_sigkilled_worker_resume_fails_over_and_the_other_worker_never_notices(
    triton_server: TritonServer,
) -> None:
    with (
        _cluster(triton_server) as cluster,
        raw_session(_pinned(cluster, "w0")) as on_w0,
        raw_session(_pinned(cluster, "w1")) as on_w1,
    ):
        assert (_route(on_w0), _route(on_w1)) == ("w0", "w1")
        lost = _created(on_w1)
        sid, token = lost["session"]["id"], lost["resume_token"]
        last = _seqs(on_w1.events)[-1]
        _manual(on_w0, max_tokens=TOKENS)
        rid = _ask_text(on_w0, "Keep talking.")
        on_w0.until("response.output_audio.delta", timeout_s=30)

        os.kill(cluster.workers["w1"][0], signal.SIGKILL)
        cluster.wait_line(r"WORKER w1 .* DIED: killed by SIGKILL", 5)
        # The killed worker's client sees its socket cut (nginx loses its upstream).
        code, _ = _closed(on_w1.ws, timeout_s=10)
        assert code != 1000, code  # not a normal close: the session was lost, not ended

        with raw_session(f"{cluster.url}&session_id={sid}") as again:
            # Failed over to the live worker, which does not know the session.
            assert _route(again) == "w0"
            _resume(again, sid, token, last)
            error = again.until("error", timeout_s=10)
            assert error["error"]["code"] == "session_resume_failed", error
            assert error["error"]["event_id"] == "evt_resume"
            assert "server_event_seq" not in error
            # The connection goes on as the fresh session it was given.
            _manual(again, max_tokens=2)
            _ask_text(again, "Hello?")
            done = again.until("response.done", timeout_s=30)["response"]
            assert done["status"] == "completed", done
            _contiguous(again.events)

        # The session on w0 never noticed: its answer completes, whole.
        done = on_w0.until("response.done", timeout_s=30)["response"]
        assert done["id"] == rid and done["status"] == "completed", done
        deltas = [e for e in on_w0.events if e["type"] == "response.output_audio.delta"]
        assert len(deltas) == TOKENS
        # ... and it takes new events and answers again (a short one).
        _manual(on_w0, max_tokens=2)
        rid = _ask_text(on_w0, "Still there?")
        done = on_w0.until("response.done", timeout_s=30)["response"]
        assert done["id"] == rid and done["status"] == "completed", done
        _contiguous(on_w0.events)
        assert not on_w0.of("error"), on_w0.of("error")
        assert cluster.process.poll() is None, cluster.log()

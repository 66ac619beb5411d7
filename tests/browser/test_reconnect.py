"""The page reconnects by itself and resumes its session (REALTIME_CONTRACT, "Event sequence and
session resume"), in a real headless Chromium against the real server.

The page dials the server through a loopback TCP proxy (tests/tcp_proxy.py) whose `cut()` resets
the connection as a network drop would: the browser sees 1006, the server a socket lost without
a 1000 close, so the session lives on and its answer goes on generating into the journal. What
is checked is what a user would notice: the answer plays on and completes once, every sample of
it is played exactly once (its final `playback.ack` covers the server's full length, each ACK
goes out once, and the server puts the whole reply into the history), and the page processes
every sequenced event once, in order. Playwright's view of the sockets' frames is the
independent record of what the server sent.

A scripted server (test_pause_mode.ScriptedServer) then pins down the page's side exactly: an ACK
made while the socket is down goes out once resumed, a replay that overlaps what the page had is
dropped, a session taken over elsewhere is not taken back.
"""

from __future__ import annotations

import base64
import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from playwright import sync_api
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect
from websockets.sync.server import ServerConnection

from orchestrator.service.serve import BackgroundServer
from tests.browser import acks as page_acks
from tests.browser.conftest import write_wav
from tests.browser.page_wait import wait as _wait
from tests.browser.test_pause_mode import CHUNK, ScriptedServer, _chunk
from tests.e2e.realtime_client import flite_speech, silence
from tests.tcp_proxy import TcpProxy

Opener = Callable[[Path, str], "sync_api.Page"]
RATE = 24000
LONG_ANSWERS = "Answer every message with a long story of at least six sentences."


@pytest.fixture
def proxy(realtime_server: BackgroundServer) -> Iterator[TcpProxy]:
    with TcpProxy(realtime_server.config.port, realtime_server.config.host) as p:
        yield p


@dataclass
class Wire:
    """Every frame of every WebSocket the page opened, as Playwright saw it on the network."""

    sockets: list[str] = field(default_factory=list)  # their URLs, in order
    received: list[list[dict[str, Any]]] = field(default_factory=list)
    sent: list[list[dict[str, Any]]] = field(default_factory=list)

    def attach(self, page: sync_api.Page) -> None:
        page.on("websocket", self._opened)

    def _opened(self, ws: sync_api.WebSocket) -> None:
        self.sockets.append(ws.url)
        received: list[dict[str, Any]] = []
        sent: list[dict[str, Any]] = []
        self.received.append(received)
        self.sent.append(sent)
        ws.on("framereceived", lambda payload: received.append(json.loads(payload)))
        ws.on("framesent", lambda payload: sent.append(json.loads(payload)))

    def session_events(self, session_id: str) -> list[dict[str, Any]]:
        """The server's events of one session, across its sockets, by sequence number: the
        union of what each socket carried (a replay repeats nothing, but if it did this would
        not count it twice)."""
        by_seq: dict[int, dict[str, Any]] = {}
        for frames in self.received:
            owner = None
            for event in frames:
                if event["type"] == "session.created":
                    owner = event["session"]["id"]
                elif event["type"] == "session.resumed":
                    owner = event["session_id"]
                seq = event.get("server_event_seq")
                if owner == session_id and seq is not None:
                    by_seq.setdefault(seq, event)
        return [by_seq[s] for s in sorted(by_seq)]


def _open(open_page: Opener, proxy: TcpProxy, wav: Path, wire: Wire) -> sync_api.Page:
    # The page is served through the proxy too, so that it dials the proxy by default and its
    # origin is the host it dials (the server's same-host rule).
    page = open_page(wav, f"http://127.0.0.1:{proxy.port}/")
    wire.attach(page)
    page.click("#connect")
    _wait(page, "window.turntaker.state === 'connected'", "the page connects", 10)
    _wait(
        page,
        "window.turntaker.events.some(e => e.type === 'session.updated')",
        "the server takes the page's session.update",
        10,
    )
    return page


def _samples(delta: str) -> int:
    return len(base64.b64decode(delta)) // 2


def _contiguous(seqs: list[int]) -> bool:
    return seqs == list(range(seqs[0], seqs[0] + len(seqs))) if seqs else False


def _in_order(part: list[Any], whole: list[Any]) -> bool:
    """Whether `part` is `whole` with some of its items left out (none repeated, none added)."""
    rest = iter(whole)
    return all(any(x == y for y in rest) for x in part)


def test_a_drop_mid_answer_resumes_and_the_answer_plays_on_exactly_once(
    realtime_server: BackgroundServer, proxy: TcpProxy, open_page: Opener, tmp_path: Path
) -> None:
    question = flite_speech("Tell me a long story about a dragon and a knight.")
    wav = write_wav(tmp_path / "mic.wav", np.concatenate([silence(0.5), question, silence(3)]))
    wire = Wire()
    page = _open(open_page, proxy, wav, wire)
    page.evaluate(
        "window.turntaker.send({type: 'session.update', session: {type: 'realtime', "
        f"instructions: '{LONG_ANSWERS}', max_output_tokens: 80}}}})"
    )
    _wait(page, "window.turntaker.played_ms > 0", "the answer starts playing", 40)
    rid, heard, queued = page.evaluate(
        "(() => { const t = window.turntaker, rid = t.statsLog.at(-1).rid;"
        " return [rid, t.playedBy[rid], t.received[rid] * 1000 / 24000 - t.playedBy[rid]]; })()"
    )
    # The page's WebSocket, and the HTTP connections its files came by (kept alive).
    assert proxy.cut() >= 1
    t_cut = time.monotonic()
    _wait(
        page,
        "window.turntaker.state.startsWith('reconnecting') || "
        "window.turntaker.state === 'connected (resumed)'",
        "an abnormal close shows the page reconnecting",
        5,
    )
    _wait(
        page,
        "window.turntaker.state === 'connected (resumed)'",
        "the page reconnects and resumes its session",
        15,
    )
    resumed_after_s = time.monotonic() - t_cut
    _wait(
        page,
        f"window.turntaker.playbackState === 'finished' && {page_acks.answered_js(rid)}",
        "the resumed answer plays to its end, is acknowledged, and the server answers the ACK",
        90,
    )
    page.wait_for_timeout(1000)  # a second final ACK, a repeated response.done would show here
    tt = page.evaluate("window.turntaker")
    resume = page.evaluate(
        "(() => { const r = window.turntaker.resume; return {"
        "sessionId: r.sessionId, lastSeq: r.lastSeq, duplicates: r.duplicates,"
        " gaps: r.gaps}; })()"
    )
    transcript = page.evaluate(
        "[...document.querySelectorAll('#transcript .assistant')].map(e => e.textContent)"
    )

    # One drop, seen as abnormal (1006), resumed from the next event after the last processed.
    [drop] = tt["drops"]
    assert drop["code"] == 1006, drop
    assert drop["outcome"] == "resumed", drop
    assert drop["replayed_from_seq"] == drop["last_seq"] + 1, drop
    print(
        f"\ncut during {rid} after {heard:.0f} ms heard, {queued:.0f} ms queued; resumed "
        f"{resumed_after_s:.2f} s later after {drop['attempts']} attempt(s), replay from seq "
        f"{drop['replayed_from_seq']}"
    )

    # The page processed every sequenced event of its session once, in order, none skipped.
    assert resume["duplicates"] == 0 and resume["gaps"] == [], resume
    assert tt["seqs"][0] == 1 and _contiguous(tt["seqs"]), tt["seqs"]
    session_id = resume["sessionId"]
    server = wire.session_events(session_id)
    assert [e["server_event_seq"] for e in server] == tt["seqs"], (
        "the page processed exactly the events the server sent for its session"
    )

    # The second socket: session_id in its URL (never the token), session.resume first.
    assert len(wire.sockets) == 2, wire.sockets
    assert f"session_id={session_id}" in wire.sockets[1], wire.sockets
    assert wire.sent[1][0]["type"] == "session.resume", wire.sent[1][:3]
    assert wire.sent[1][0]["last_server_event_seq"] == drop["last_seq"]
    assert wire.sent[1][0]["resume_token"] not in wire.sockets[1]
    # Its provisional session was ignored: nothing of it among what the page processed.
    [provisional] = [e for e in wire.received[1] if e["type"] == "session.created"]
    assert provisional["session"]["id"] != session_id

    # The drop fell in the middle of the answer: part of its audio came after the resume.
    deltas = [e for e in server if e["type"] == "response.output_audio.delta"]
    mine = [e for e in deltas if e["response_id"] == rid]
    late = [e for e in mine if e["server_event_seq"] > drop["last_seq"]]
    assert late, "the cut came after the whole answer had arrived: no replay of its audio"
    total = sum(_samples(e["delta"]) for e in mine)
    print(
        f"{rid}: {len(mine)} audio deltas ({total / RATE:.2f} s), {len(late)} of them "
        f"({sum(_samples(e['delta']) for e in late) / RATE:.2f} s) after the resume"
    )

    # The answer completed once; its audio was played exactly once, all of it.
    done = [
        e
        for e in tt["events"]
        if e["dir"] == "<" and e["type"] == "response.done" and e.get("response_id") == rid
    ]
    # An 80-token answer may end at the budget: `incomplete` (max_output_tokens), still once.
    assert [e["status"] for e in done] in (["completed"], ["incomplete"]), done
    assert tt["received"][rid] == total, "the page handed the worklet each sample once"
    ack = page_acks.final(tt, rid)
    assert ack["samples"] == total, page_acks.of(tt, rid)
    assert ack["played_ms"] == total * 1000 // RATE
    # On the wire, each ACK the page made went out at most once, in order (of those made while
    # the socket was down only the latest, once resumed), and the final one did.
    made = [
        {k: v for k, v in a.items() if k not in ("samples", "t")} for a in page_acks.of(tt, rid)
    ]
    wire_acks = [
        e
        for frames in wire.sent
        for e in frames
        if e["type"] == "playback.ack" and e["response_id"] == rid
    ]
    assert wire_acks and wire_acks[-1] == made[-1], (wire_acks, made)
    assert _in_order(wire_acks, made), (wire_acks, made)
    held = page_acks.held(tt, rid)
    assert held["played_ms"] == ack["played_ms"], held
    assert held["history_committed"], f"rule 5: a reply heard in full is in the history: {held}"
    # The played cursor only went forward: nothing was replayed to the ear.
    played = [s["played"] for s in tt["statsLog"] if s["rid"] == rid]
    assert played == sorted(played) and played[-1] <= total, played[-5:]
    # The worklet played on through the drop from what it held (the audio is not stopped on an
    # abnormal close).
    during = [
        s["played"]
        for s in tt["statsLog"]
        if s["rid"] == rid and drop["t_lost"] <= s["t"] <= drop["t_resumed"]
    ]
    if queued > 300 and len(during) >= 2:
        assert during[-1] > during[0], during
    # No client event of the page was refused (session.event_ack, the ACK after the resume).
    assert not [e for e in server if e["type"] == "error"], [
        e for e in server if e["type"] == "error"
    ]

    # The transcript shows the answer once, as the server sent it.
    said = "".join(
        e["delta"]
        for e in server
        if e["type"] == "response.output_audio_transcript.delta" and e["response_id"] == rid
    )
    assert said and any(line == "Assistant: " + said for line in transcript), (said, transcript)
    assert page.inner_text("#conn-state") == "connected (resumed)"


def test_a_resume_that_fails_starts_afresh_on_the_new_session(
    realtime_server: BackgroundServer, proxy: TcpProxy, open_page: Opener, tmp_path: Path
) -> None:
    wav = write_wav(tmp_path / "mic.wav", silence(2))
    wire = Wire()
    page = _open(open_page, proxy, wav, wire)
    old = page.evaluate("window.turntaker.resume.sessionId")
    # A token the server does not know: the resume cannot be honoured.
    page.evaluate("window.turntaker.resume.token = 'not-the-token'")
    proxy.cut()
    _wait(
        page,
        "window.turntaker.state === 'connected (new session: resume failed)'",
        "a failed resume goes on as the new session",
        15,
    )
    _wait(
        page,
        "window.turntaker.events.filter(e => e.type === 'session.updated').length === 2",
        "the page re-sends its session.update on the new session",
        10,
    )
    tt = page.evaluate("window.turntaker")
    state = page.evaluate(
        "(() => { const r = window.turntaker.resume; return {sessionId: r.sessionId, "
        "token: r.token, lastSeq: r.lastSeq}; })()"
    )
    [failed] = [e for e in wire.received[1] if e["type"] == "error"]
    assert failed["error"]["code"] == "session_resume_failed", failed
    assert "server_event_seq" not in failed
    [created] = [e for e in wire.received[1] if e["type"] == "session.created"]
    assert state["sessionId"] == created["session"]["id"] != old
    assert state["token"] == created["resume_token"], "a later drop resumes the new session"
    assert tt["seqs"][0] == 1 and _contiguous(tt["seqs"]), tt["seqs"]
    sent = [e["type"] for e in wire.sent[1] if e["type"] != "input_audio_buffer.append"]
    assert sent[:2] == ["session.resume", "session.update"], sent
    assert tt["drops"][0]["outcome"] == "resume_failed"


def test_the_page_retries_while_unreachable_and_disconnect_ends_the_session(
    realtime_server: BackgroundServer, proxy: TcpProxy, open_page: Opener, tmp_path: Path
) -> None:
    wav = write_wav(tmp_path / "mic.wav", silence(2))
    wire = Wire()
    page = _open(open_page, proxy, wav, wire)
    # The server cannot be reached for a while: the first tries fail, a later one resumes.
    proxy.refuse(True)
    proxy.cut()
    _wait(page, "window.turntaker.state === 'reconnecting…'", "the page shows it reconnecting", 5)
    page.wait_for_timeout(1200)
    assert page.evaluate("window.turntaker.state") == "reconnecting…"
    assert page.inner_text("#conn-state") == "reconnecting…"
    assert page.evaluate("window.turntaker.audio") == "running", "the audio runs on meanwhile"
    proxy.refuse(False)
    _wait(
        page,
        "window.turntaker.state === 'connected (resumed)'",
        "a retry after the outage resumes the session",
        10,
    )
    [drop] = page.evaluate("window.turntaker.drops")
    assert drop["attempts"] >= 3, drop  # 250 ms, 500 ms, ... with the first ones refused
    session_id, token = page.evaluate(
        "[window.turntaker.resume.sessionId, window.turntaker.resume.token]"
    )
    accepted = proxy.accepted

    # Disconnect closes with 1000: the session ends on the server, the page does not redial.
    page.click("#disconnect")
    _wait(page, "window.turntaker.state === 'disconnected'", "Disconnect disconnects", 5)
    page.wait_for_timeout(1500)
    assert proxy.accepted == accepted, "no reconnect after a deliberate Disconnect"
    assert page.evaluate("window.turntaker.state") == "disconnected"
    assert page.is_enabled("#connect") and page.is_disabled("#disconnect")
    _assert_resume_fails(realtime_server, session_id, token, "a 1000 close ends it at once")


def test_disconnect_while_the_socket_is_down_still_ends_the_session(
    realtime_server: BackgroundServer, proxy: TcpProxy, open_page: Opener, tmp_path: Path
) -> None:
    wav = write_wav(tmp_path / "mic.wav", silence(2))
    page = _open(open_page, proxy, wav, Wire())
    session_id, token = page.evaluate(
        "[window.turntaker.resume.sessionId, window.turntaker.resume.token]"
    )
    # A long first wait: the user presses Disconnect before the page has dialled again.
    page.evaluate("window.turntaker.backoff = {firstMs: 5000, maxMs: 5000, jitter: 0}")
    proxy.cut()
    _wait(page, "window.turntaker.state === 'reconnecting…'", "the page shows it reconnecting", 5)
    page.click("#disconnect")
    _wait(page, "window.turntaker.state === 'disconnected'", "Disconnect disconnects", 5)
    # Without a socket there is no close frame to send: the page resumes the session on a
    # socket of its own only to close it with 1000, rather than leave it to its 30 s grace.
    _wait(
        page,
        "window.turntaker.farewell && window.turntaker.farewell.outcome === 'ended'",
        "Disconnect while down ends the session the server kept for its grace",
        10,
    )
    assert page.is_enabled("#connect") and page.is_disabled("#disconnect")
    # The farewell's resume rotated the token: the new one would resume a session still held.
    token = page.evaluate("window.turntaker.farewell.token")
    assert token
    _assert_resume_fails(
        realtime_server, session_id, token, "it must be over, not waiting out its grace"
    )


def _assert_resume_fails(server: BackgroundServer, session_id: str, token: str, why: str) -> None:
    """The session is gone from the server: resuming it with its last token fails."""
    with connect(server.url + f"?session_id={session_id}", open_timeout=10) as ws:
        assert json.loads(ws.recv(timeout=10))["type"] == "session.created"
        resume = {
            "type": "session.resume",
            "session_id": session_id,
            "resume_token": token,
            "last_server_event_seq": 0,
        }
        ws.send(json.dumps(resume))
        answer = json.loads(ws.recv(timeout=10))
    assert answer["type"] == "error", answer
    assert answer["error"]["code"] == "session_resume_failed", f"{why}: {answer}"


def test_the_page_gives_up_after_the_grace_and_stops_its_audio(
    realtime_server: BackgroundServer, proxy: TcpProxy, open_page: Opener, tmp_path: Path
) -> None:
    wav = write_wav(tmp_path / "mic.wav", silence(2))
    wire = Wire()
    page = _open(open_page, proxy, wav, wire)
    # The server's 30 s grace, shortened for the test: the schedule is the same.
    page.evaluate("window.turntaker.backoff = {giveUpMs: 2000}")
    proxy.refuse(True)
    proxy.cut()
    _wait(
        page,
        "window.turntaker.state === 'disconnected (gave up reconnecting)'",
        "the page gives up once its next try would come after the grace",
        10,
    )
    [drop] = page.evaluate("window.turntaker.drops")
    assert drop["attempts"] >= 2 and drop["outcome"] is None, drop
    accepted = proxy.accepted
    proxy.refuse(False)
    page.wait_for_timeout(1500)
    assert proxy.accepted == accepted, "no try after giving up"
    assert page.is_enabled("#connect") and page.is_disabled("#disconnect")
    assert page.evaluate("window.turntaker.audio") == "stopped", "the audio stops on giving up"
    page.click("#connect")
    # "connected" shows at the socket's open; the new session's first event follows it.
    _wait(
        page,
        "window.turntaker.state === 'connected' && window.turntaker.resume.lastSeq >= 1",
        "Connect after giving up: a new session",
        10,
    )


# --- a scripted server: the page's side of the resume, exactly -----------------------------------


class _Script:
    """What a scripted two-connection session saw of the page."""

    def __init__(self) -> None:
        self.connections = 0
        self.paths: list[str] = []
        self.received: list[list[dict[str, Any]]] = []
        self.lock = threading.Lock()

    def opened(self, conn: ServerConnection) -> tuple[int, list[dict[str, Any]]]:
        """This connection's index (0: the first) and the list its client events go to."""
        with self.lock:
            self.connections += 1
            assert conn.request is not None
            self.paths.append(conn.request.path)
            got: list[dict[str, Any]] = []
            self.received.append(got)
            return self.connections - 1, got


def _recv(conn: ServerConnection, got: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    """The next client event of type `kind` (appends skipped, all recorded)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            event: dict[str, Any] = json.loads(conn.recv(timeout=1))
        except TimeoutError:
            continue
        got.append(event)
        if event["type"] == kind:
            return event
    raise AssertionError(f"scripted server: no {kind} from the page")


def _listen(conn: ServerConnection, got: list[dict[str, Any]], seconds: float) -> None:
    """Record what the page sends until it closes (or the proxy cuts) the connection."""
    deadline = time.monotonic() + seconds
    with contextlib.suppress(ConnectionClosed):
        while time.monotonic() < deadline:
            try:
                got.append(json.loads(conn.recv(timeout=0.2)))
            except TimeoutError:
                continue


def _put(conn: ServerConnection, seq: int | None, event: dict[str, Any]) -> None:
    extra = {} if seq is None else {"server_event_seq": seq}
    conn.send(json.dumps({"event_id": f"event_{seq}", **extra, **event}))


VAD = {"type": "server_vad", "threshold": 0.5, "silence_duration_ms": 500}


def _created(session_id: str, token: str) -> dict[str, Any]:
    return {
        "type": "session.created",
        "session": {"id": session_id, "audio": {"input": {"turn_detection": VAD}}},
        "resume_token": token,
    }


def test_scripted_an_answer_that_ends_during_the_drop_is_acked_after_the_resume(
    open_page: Opener, tmp_path: Path
) -> None:
    """The answer's last delta and its response.done came before the drop; the page plays the
    rest of it while the server is unreachable, and its final playback.ack goes out on the
    resumed connection (only progress ACKs went out before the drop). The replay overlaps what
    the page had (a careless server): the page drops the repeats, so no sample plays twice and
    the answer completes once."""
    rid, n = "resp_1", 12  # 0.96 s of audio, sent at once
    seen = _Script()

    def script(server: ScriptedServer, conn: ServerConnection) -> None:
        index, got = seen.opened(conn)
        if index == 0:
            _put(conn, 1, _created("sess_A", "tok_A"))
            _recv(conn, got, "session.update")
            _put(
                conn,
                2,
                {
                    "type": "session.updated",
                    "session": {"audio": {"input": {"turn_detection": VAD}}},
                },
            )
            _put(
                conn,
                3,
                {"type": "response.created", "response": {"id": rid, "status": "in_progress"}},
            )
            item = {"id": "item_1", "type": "message", "role": "assistant"}
            _put(conn, 4, {"type": "response.output_item.added", "response_id": rid, "item": item})
            for k in range(n):
                delta = {"response_id": rid, "item_id": "item_1", "delta": _chunk(k)}
                _put(conn, 5 + k, {"type": "response.output_audio.delta", **delta})
            done = {"id": rid, "status": "completed"}
            _put(conn, 5 + n, {"type": "response.done", "response": done})
            _listen(conn, got, 30)  # until the proxy cuts it
            return
        # The resuming connection: its own provisional session first, as the real server does.
        _put(conn, 1, _created("sess_B", "tok_B"))
        resume = _recv(conn, got, "session.resume")
        last = resume["last_server_event_seq"]
        _put(
            conn,
            None,
            {
                "type": "session.resumed",
                "session_id": "sess_A",
                "resume_token": "tok_A2",
                "replayed_from_seq": last - 1,
            },
        )
        # An overlapping replay: the last delta and the response.done again, original seqs.
        delta = {"response_id": rid, "item_id": "item_1", "delta": _chunk(n - 1)}
        _put(conn, 4 + n, {"type": "response.output_audio.delta", **delta})
        _put(conn, 5 + n, {"type": "response.done", "response": {"id": rid, "status": "completed"}})
        ack = _recv(conn, got, "playback.ack")
        _put(
            conn,
            6 + n,
            {
                "type": "playback.acknowledged",
                "response_id": rid,
                "item_id": "item_1",
                "played_ms": ack["played_ms"],
                "committed_ms": ack["played_ms"],
                "history_committed": True,
            },
        )
        _listen(conn, got, 30)

    wav = write_wav(tmp_path / "mic.wav", silence(6))
    with ScriptedServer(script) as server, TcpProxy(server.port) as proxy:
        page = open_page(wav, f"http://127.0.0.1:{proxy.port}/")
        page.click("#connect")
        _wait(page, f"window.turntaker.resume.lastSeq === {5 + n}", "the answer arrives", 10)
        # The server is unreachable for longer than the rest of the answer plays.
        proxy.refuse(True)
        proxy.cut()
        _wait(
            page,
            "window.turntaker.playbackState === 'finished'",
            "the answer plays to its end during the drop",
            10,
        )
        assert page.evaluate("window.turntaker.state") == "reconnecting…"
        proxy.refuse(False)
        _wait(
            page,
            f"window.turntaker.acknowledged.some(a => a.response_id === '{rid}')",
            "the ACK made during the drop goes out once resumed",
            10,
        )
        page.wait_for_timeout(300)
        tt = page.evaluate("window.turntaker")
        resume = page.evaluate(
            "(() => { const r = window.turntaker.resume; return {token: r.token,"
            " duplicates: r.duplicates, gaps: r.gaps, lastSeq: r.lastSeq}; })()"
        )
        page.close()  # the scripts' connections end with it
        assert server.error is None, server.error
    assert seen.paths[1] == "/v1/realtime?session_id=sess_A", seen.paths
    first = seen.received[1][0]
    assert first == {
        "type": "session.resume",
        "session_id": "sess_A",
        "resume_token": "tok_A",
        "last_server_event_seq": 5 + n,
    }, first
    assert resume == {"token": "tok_A2", "duplicates": 2, "gaps": [], "lastSeq": 6 + n}, resume
    assert tt["seqs"] == list(range(1, 7 + n)), tt["seqs"]
    assert tt["received"][rid] == n * CHUNK, "the repeated delta was not played again"
    assert {a["response_id"] for a in tt["acks"]} == {rid}, tt["acks"]
    assert page_acks.final(tt, rid)["samples"] == n * CHUNK, tt["acks"]
    acks = [e for e in seen.received[1] if e["type"] == "playback.ack"]
    assert len(acks) == 1 and acks[0]["played_ms"] == n * CHUNK * 1000 // RATE, acks
    before = [e for e in seen.received[0] if e["type"] == "playback.ack"]
    assert all(e["played_ms"] < n * CHUNK * 1000 // RATE for e in before), (
        f"only progress ACKs go out before the drop, the final one after it: {before}"
    )
    done = [e for e in tt["events"] if e["dir"] == "<" and e["type"] == "response.done"]
    assert len(done) == 1, done
    # The provisional session was only logged, never acted on.
    ignored = [e["type"] for e in tt["events"] if e["dir"] == "~"]
    assert ignored.count("session.created") == 1 and ignored.count("response.done") == 1, ignored
    acked = [e for r in seen.received for e in r if e["type"] == "session.event_ack"]
    assert acked and acked[-1]["server_event_seq"] == 5 + n, acked


def test_scripted_a_session_taken_over_elsewhere_is_not_taken_back(
    open_page: Opener, tmp_path: Path
) -> None:
    seen = _Script()

    def script(server: ScriptedServer, conn: ServerConnection) -> None:
        _, got = seen.opened(conn)
        _put(conn, 1, _created("sess_A", "tok_A"))
        _recv(conn, got, "session.update")
        _put(
            conn,
            None,
            {
                "type": "error",
                "error": {
                    "type": "invalid_request_error",
                    "code": "session_replaced",
                    "message": "resumed elsewhere",
                },
            },
        )
        conn.close(1000, "session replaced")

    wav = write_wav(tmp_path / "mic.wav", silence(2))
    with ScriptedServer(script) as server:
        page = open_page(wav, server.url)
        page.click("#connect")
        _wait(
            page,
            "window.turntaker.state === 'disconnected (session taken over by another connection)'",
            "session_replaced ends the page's connection",
            10,
        )
        page.wait_for_timeout(1000)
        assert seen.connections == 1, "no reconnect to take the session back"
        assert page.evaluate("window.turntaker.audio") == "stopped"
        assert server.error is None, server.error

"""The page in the interruption policy's pause mode (REALTIME_CONTRACT v2), in real Chromium.

Two halves:
- A scripted server (a WebSocket that plays a fixed sequence of server events, the page's files
  served from disk): what the page does with `output_audio_buffer.paused` / `resumed` and
  `overlap.decision`, exactly, with no model and no timing doubt.
- The real server on the `null` pipeline (long answers of fixed length and pace) with the fake
  microphone: a short "yeah" in another voice during an answer pauses and resumes it, a real
  sentence interrupts it as in v1.

What a user notices is checked where it is heard: the worklet's played cursor stands still
while paused and goes on from the same sample, the answer plays to its end, and its final
`playback.ack` covers its full length (the progress ACKs before it, while it played, are cursors
that only move forward, and none comes while it is paused).
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from playwright import sync_api
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response
from websockets.sync.server import Server, ServerConnection, serve
from websockets.typing import Subprotocol

from orchestrator.service.config import ServiceConfig
from orchestrator.service.serve import BackgroundServer
from orchestrator.triton import TritonServer
from tests.browser import acks as page_acks
from tests.browser.conftest import write_wav
from tests.browser.page_wait import wait as _wait
from tests.conftest import REPO_ROOT, free_port
from tests.e2e.realtime_client import flite_speech, silence

STATIC = REPO_ROOT / "orchestrator" / "service" / "static"
Opener = Callable[..., "sync_api.Page"]
RATE = 24000
CHUNK = 1920  # 80 ms at 24 kHz, as the null pipeline's chunks


def _connect(page: Any) -> None:
    page.click("#connect")
    _wait(page, "window.turntaker.state === 'connected'", "the page connects", 10)


class ScriptedServer:
    """One WebSocket session that sends `script(conn, recv)`'s events; records what came in."""

    def __init__(self, script: Callable[[ScriptedServer, ServerConnection], None]) -> None:
        self.script = script
        self.received: list[dict[str, Any]] = []
        self.error: BaseException | None = None
        self.port = free_port()
        self.seq = 0
        self._server: Server | None = None
        self._thread: threading.Thread | None = None

    def send(self, conn: ServerConnection, event: dict[str, Any]) -> None:
        self.seq += 1
        conn.send(json.dumps({"event_id": f"event_{self.seq}", **event}))

    def recv_until(
        self,
        conn: ServerConnection,
        kind: str,
        timeout_s: float,
        until: Callable[[dict[str, Any]], bool] = lambda event: True,
    ) -> dict[str, Any]:
        """The next client event of type `kind` that `until` accepts (all recorded)."""
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"scripted server: no {kind} from the page in {timeout_s} s")
            try:
                event: dict[str, Any] = json.loads(conn.recv(timeout=left))
            except TimeoutError:
                continue
            self.received.append(event)
            if event.get("type") == kind and until(event):
                return event

    def listen(self, conn: ServerConnection, seconds: float) -> None:
        """Record what the page sends for `seconds` (or until the connection closes)."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                self.received.append(json.loads(conn.recv(timeout=min(left, 0.2))))
            except TimeoutError:
                continue

    def acks(self) -> list[dict[str, Any]]:
        """The playback.acks the page sent, in order."""
        return [e for e in list(self.received) if e.get("type") == "playback.ack"]

    def _handle(self, conn: ServerConnection) -> None:
        try:
            self.script(self, conn)
        except ConnectionClosed:
            pass
        except BaseException as error:  # reported by the test, not lost in a thread
            self.error = error

    def __enter__(self) -> ScriptedServer:
        self._server = serve(
            self._handle,
            "127.0.0.1",
            self.port,
            process_request=_static,
            subprotocols=[Subprotocol("realtime")],
        )
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None and self._thread is not None
        self._server.shutdown()
        self._thread.join(timeout=5)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"


MIME = {".html": "text/html", ".js": "text/javascript"}


def _static(conn: ServerConnection, request: Request) -> Response | None:
    """The page's own files on the scripted server's port (as the real server serves them), so
    the page dials it as it dials the real one. (Playwright's request routing does not reach the
    worklet modules' fetches.)"""
    path = request.path.split("?")[0]
    if path == "/v1/realtime":
        return None
    file = STATIC / (path.removeprefix("/static/") if path != "/" else "index.html")
    if file.parent != STATIC or not file.is_file():
        return conn.respond(404, "not found\n")
    body = file.read_bytes()
    headers = Headers(
        [
            ("Content-Type", MIME.get(file.suffix, "application/octet-stream")),
            ("Content-Length", str(len(body))),
        ]
    )
    return Response(200, "OK", headers, body)


def _chunk(k: int) -> str:
    """80 ms of a quiet tone: only the count of samples matters to these tests."""
    t = (np.arange(CHUNK) + k * CHUNK) / RATE
    pcm = (np.sin(2 * np.pi * 440 * t) * 2000).astype("<i2")
    return base64.b64encode(pcm.tobytes()).decode()


def _open_session(server: ScriptedServer, conn: ServerConnection) -> dict[str, Any]:
    """session.created, then the page's session.update echoed as session.updated."""
    vad = {"type": "server_vad", "threshold": 0.5, "silence_duration_ms": 500}
    server.send(
        conn,
        {
            "type": "session.created",
            "session": {
                "audio": {"input": {"turn_detection": {**vad, "interrupt_response": True}}}
            },
        },
    )
    update = server.recv_until(conn, "session.update", 10)
    td = update["session"]["audio"]["input"]["turn_detection"]
    server.send(
        conn, {"type": "session.updated", "session": {"audio": {"input": {"turn_detection": td}}}}
    )
    return td  # type: ignore[no-any-return]


def _deltas(
    server: ScriptedServer,
    conn: ServerConnection,
    rid: str,
    first: int,
    n: int,
    paced: bool = True,
) -> None:
    for k in range(first, first + n):
        server.send(
            conn,
            {
                "type": "response.output_audio.delta",
                "response_id": rid,
                "item_id": "item_1",
                "delta": _chunk(k),
            },
        )
        if paced:
            time.sleep(CHUNK / RATE)  # real time, as a server streams


def _answer_start(server: ScriptedServer, conn: ServerConnection, rid: str) -> None:
    server.send(
        conn, {"type": "response.created", "response": {"id": rid, "status": "in_progress"}}
    )
    server.send(
        conn,
        {
            "type": "response.output_item.added",
            "response_id": rid,
            "item": {"id": "item_1", "type": "message", "role": "assistant"},
        },
    )


def _pause(server: ScriptedServer, conn: ServerConnection, rid: str) -> None:
    server.send(
        conn,
        {"type": "input_audio_buffer.speech_started", "audio_start_ms": 0, "item_id": "item_2"},
    )
    server.send(conn, {"type": "output_audio_buffer.paused", "response_id": rid})


def _assert_progress_around(tt: dict[str, Any], rid: str, pause: dict[str, Any]) -> None:
    """The page told its cursor while the answer played (player.js rule 6, without echo
    cancellation: about every 250 ms), and never while it was paused."""
    progress = page_acks.of(tt, rid)[:-1]
    assert [a for a in progress if a["t"] < pause["t_paused_msg"]], (
        f"no progress ACK while the answer played before the pause: {progress}"
    )
    paused = [a for a in progress if pause["t_paused_msg"] <= a["t"] <= pause["t_resumed_msg"]]
    assert not paused, f"a progress ACK while paused: {paused} {pause}"
    assert all("input_ms" in a for a in progress), progress
    steps = np.diff([a["input_ms"] for a in progress])
    assert np.all(steps > page_acks.PROGRESS_STEP_MS - 0.01), f"more often than 250 ms: {steps}"


def test_scripted_pause_and_resume_play_on_from_the_same_sample(
    open_page: Opener, tmp_path: Path
) -> None:
    rid = "resp_1"
    # Chunks sent before (at real time, then a burst that is still queued when the pause
    # comes), while and after the pause.
    before, burst, during, after = 15, 5, 10, 15
    total = (before + burst + during + after) * CHUNK
    paused_at: dict[str, float] = {}
    # The resume waits until the test has read the paused state off the page: on a loaded
    # machine the page can take longer than the 0.5 s pause to be polled.
    paused_seen = threading.Event()

    def script(server: ScriptedServer, conn: ServerConnection) -> None:
        td = _open_session(server, conn)
        assert td["interruption"]["mode"] == "pause", td
        _answer_start(server, conn, rid)
        _deltas(server, conn, rid, 0, before)
        _deltas(server, conn, rid, before, burst, paced=False)
        _pause(server, conn, rid)
        paused_at["t"] = time.monotonic()
        # The server keeps streaming the paused answer; the page must queue it, not play it.
        _deltas(server, conn, rid, before + burst, during)
        time.sleep(0.5)
        paused_seen.wait(20)
        server.send(
            conn,
            {
                "type": "overlap.decision",
                "response_id": rid,
                "decision": "resume",
                "reason": "backchannel",
                "speech_ms": 240,
            },
        )
        server.send(conn, {"type": "output_audio_buffer.resumed", "response_id": rid})
        _deltas(server, conn, rid, before + burst + during, after)
        server.send(conn, {"type": "response.done", "response": {"id": rid, "status": "completed"}})
        # The progress ACKs first (player.js rule 6), then the one of the answer's end.
        ack = server.recv_until(
            conn, "playback.ack", 20, until=lambda a: a["played_ms"] == total * 1000 // RATE
        )
        server.send(
            conn,
            {
                "type": "playback.acknowledged",
                "response_id": rid,
                "item_id": "item_1",
                "played_ms": ack["played_ms"],
                "committed_ms": ack["played_ms"],
                "history_committed": True,
            },
        )
        # The session stays open while the test reads the page. Read (and record) what the
        # page still sends meanwhile, as the interrupt test's script does: a script asleep
        # here left its receive queue full, and the server's shutdown then waited out
        # websockets' 10 s close_timeout for the page's close frame it could not read.
        server.listen(conn, 5)

    wav = write_wav(tmp_path / "mic.wav", silence(1))
    with ScriptedServer(script) as server:
        page = open_page(wav, server.url + "?interruption=pause")
        assert page.eval_on_selector("#interruption", "e => e.value") == "pause", (
            "/?interruption=pause must open the page in pause mode"
        )
        _connect(page)
        _wait(
            page,
            "window.turntaker.pauses['resp_1'] && window.turntaker.pauses['resp_1'].t_paused",
            "output_audio_buffer.paused pauses the playback worklet",
            20,
        )
        # The paused state is on the page, where the user looks.
        assert page.inner_text("#playback-state") == "paused"
        assert "paused" in page.eval_on_selector("#playback-state", "e => e.className")
        paused_seen.set()
        _wait(
            page,
            "window.turntaker.playbackState === 'finished'",
            "output_audio_buffer.resumed plays the answer on to its end and its ACK",
            20,
        )
        time.sleep(0.3)
        tt = page.evaluate("window.turntaker")
        shown = page.inner_text("#overlap-decision")
        log = page.inner_text("#log")
        assert server.error is None, server.error
    pause = tt["pauses"][rid]
    assert pause["paused_applied"] and pause["resumed_applied"], pause
    assert pause["paused_played"] > 0 and pause["paused_queued"] > 0, (
        f"the pause must catch the answer in mid-play, audio still queued: {pause}"
    )
    assert pause["paused_played"] + pause["paused_queued"] <= (before + burst) * CHUNK
    assert pause["resumed_played"] == pause["paused_played"], (
        f"pause mode: the played cursor must stand still while paused: {pause}"
    )
    held = [
        s
        for s in tt["statsLog"]
        if s["rid"] == rid and pause["t_paused"] < s["t"] < pause["t_resumed"]
    ]
    assert len(held) >= 10, f"too few worklet reports while paused to tell: {held}"
    assert all(s["played"] == pause["paused_played"] and s["paused"] for s in held), held
    later = [s["played"] for s in tt["statsLog"] if s["rid"] == rid and s["t"] > pause["t_resumed"]]
    assert later and later == sorted(later) and later[-1] > pause["paused_played"], (
        "pause mode: after resume the cursor goes on from where it stopped"
    )
    ack = page_acks.final(tt, rid)
    assert ack["samples"] == total == tt["received"][rid], (
        f"pause mode: nothing is lost over a pause, the final ACK is of the full length: {ack}"
    )
    assert ack["played_ms"] == total * 1000 // RATE
    _assert_progress_around(tt, rid, pause)
    assert [(d["decision"], d["reason"], d["speech_ms"]) for d in tt["decisions"]] == [
        ("resume", "backchannel", 240)
    ]
    assert shown == "resume (backchannel, 240 ms of speech) for resp_1", shown
    assert "overlap.decision resp_1 resume reason=backchannel speech_ms=240" in log, log[-2000:]


def test_scripted_pause_then_interrupt_drops_the_kept_audio_and_acks_where_it_stopped(
    open_page: Opener, tmp_path: Path
) -> None:
    rid = "resp_1"

    def script(server: ScriptedServer, conn: ServerConnection) -> None:
        _open_session(server, conn)
        _answer_start(server, conn, rid)
        _deltas(server, conn, rid, 0, 15)
        _deltas(server, conn, rid, 15, 5, paced=False)
        _pause(server, conn, rid)
        _deltas(server, conn, rid, 20, 6)
        server.send(
            conn,
            {
                "type": "overlap.decision",
                "response_id": rid,
                "decision": "interrupt",
                "reason": "speech",
                "speech_ms": 400,
            },
        )
        server.send(conn, {"type": "output_audio_buffer.cleared", "response_id": rid})
        server.send(
            conn,
            {
                "type": "response.done",
                "response": {
                    "id": rid,
                    "status": "cancelled",
                    "status_details": {"type": "cancelled", "reason": "turn_detected"},
                },
            },
        )
        # A late delta of the interrupted answer: fenced by the server, and by the page too.
        _deltas(server, conn, rid, 26, 2)
        server.listen(conn, 10)

    wav = write_wav(tmp_path / "mic.wav", silence(1))
    with ScriptedServer(script) as server:
        page = open_page(wav, server.url + "?interruption=pause")
        _connect(page)
        _wait(
            page,
            "window.turntaker.clears['resp_1'] && window.turntaker.clears['resp_1'].t_silent",
            "an interrupt after a pause clears the answer and acknowledges what was played",
            20,
        )
        time.sleep(0.5)
        tt = page.evaluate("window.turntaker")
        state = page.inner_text("#playback-state")
        final = page_acks.final(tt, rid)
        # Every ACK the page made reached the server, once each, in order; the last, where it
        # stopped, too.
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and len(server.acks()) < len(tt["acks"]):
            time.sleep(0.1)
        sent = [a["played_ms"] for a in tt["acks"]]
        assert [a["played_ms"] for a in server.acks()] == sent, (server.acks(), sent)
        assert server.error is None, server.error
    pause, clear = tt["pauses"][rid], tt["clears"][rid]
    assert pause["paused_played"] > 0 and pause["paused_queued"] > 0, pause
    assert pause["ended"] == "output_audio_buffer.cleared", pause
    assert clear["played"] == pause["paused_played"], (
        f"pause mode: nothing plays between the pause and the interrupt: {pause} {clear}"
    )
    assert clear["dropped"] == 26 * CHUNK - pause["paused_played"], (
        f"pause mode: the interrupt drops the kept queue, also what came while paused: {clear}"
    )
    assert {a["response_id"] for a in tt["acks"]} == {rid}, tt["acks"]
    assert page_acks.final_of_cut(tt, rid, pause["t_paused_msg"]) == final
    assert final["samples"] == pause["paused_played"], tt["acks"]
    later = [s for s in tt["statsLog"] if s["rid"] == rid and s["t"] > pause["t_paused"]]
    assert all(s["played"] == pause["paused_played"] for s in later), later[-3:]
    assert state == "cleared"
    assert tt["decisions"][0]["decision"] == "interrupt"


# --- the real server, null pipeline, fake microphone --------------------------------------------

# 80 ms of audio per token on `null`: an answer of 8 s, long enough to speak over.
ANSWER_TOKENS = 100
# Long enough after the question that the answer is being heard when the user speaks again.
GAP_S = 3.0


@pytest.fixture(scope="module")
def null_server(triton_server: TritonServer) -> Iterator[BackgroundServer]:
    """The real server on the `null` pipeline: answers of fixed length streamed at real time
    (and no transcripts: a "yeah" is judged by its length alone)."""
    config = ServiceConfig(port=free_port(), triton_urls=(triton_server.grpc_url,), pipeline="null")
    with BackgroundServer(config) as server:
        yield server


def _pause_session(page: Any) -> None:
    _connect(page)
    _wait(
        page,
        "window.turntaker.interruption === 'pause'",
        "the server holds turn_detection.interruption.mode = pause (session.updated)",
        10,
    )
    page.evaluate(
        "window.turntaker.send({type: 'session.update', session: {type: 'realtime', "
        f"max_output_tokens: {ANSWER_TOKENS}}}}})"
    )


def _of(tt: dict[str, Any], kind: str, rid: str | None = None) -> list[dict[str, Any]]:
    return [
        e
        for e in tt["events"]
        if e["dir"] == "<" and e["type"] == kind and (rid is None or e.get("response_id") == rid)
    ]


def test_a_yeah_during_the_answer_pauses_it_and_it_plays_on_to_its_end(
    null_server: BackgroundServer, open_page: Opener, tmp_path: Path
) -> None:
    question = flite_speech("Tell me a long story about a dragon.")
    yeah = flite_speech("yeah", voice="kal")  # another voice than the answer's
    wav = write_wav(
        tmp_path / "mic.wav",
        np.concatenate([silence(0.5), question, silence(GAP_S), yeah, silence(14)]),
    )
    page = open_page(wav, null_server.http_url + "/?interruption=pause")
    _pause_session(page)
    _wait(
        page,
        "document.getElementById('playback-state').textContent === 'paused'",
        'pause mode: a "yeah" during the answer shows the playback paused',
        30,
    )
    _wait(page, "window.turntaker.decisions.length > 0", "pause mode: one overlap.decision", 10)
    assert page.inner_text("#overlap-decision").startswith("resume ("), page.inner_text(
        "#overlap-decision"
    )
    _wait(
        page,
        "window.turntaker.playbackState === 'finished'",
        "pause mode: after resume the answer plays to its end and is acknowledged",
        30,
    )
    rid = page.evaluate("window.turntaker.acks[window.turntaker.acks.length - 1].response_id")
    _wait(page, page_acks.answered_js(rid), "the server answers the answer's final ACK", 10)
    time.sleep(1.0)  # a second final ACK or a late event would show here
    tt = page.evaluate("window.turntaker")
    (created,) = _of(tt, "response.created")
    assert created["response_id"] == rid, (created, rid)
    decisions = [d for d in tt["decisions"] if d["response_id"] == rid]
    print(f"\nyeah over {rid}: {decisions}; pause {tt['pauses'].get(rid)}")
    assert len(decisions) == 1, f"pause mode: exactly one overlap.decision: {decisions}"
    assert decisions[0]["decision"] == "resume", decisions
    assert decisions[0]["reason"] in ("short", "backchannel"), decisions
    kinds = [
        e["type"] for e in tt["events"] if e["dir"] == "<" and (e.get("response_id") in (rid, None))
    ]
    started = kinds.index("input_audio_buffer.speech_started", kinds.index("response.created"))
    assert (
        kinds[started:].index("output_audio_buffer.paused")
        < kinds[started:].index("overlap.decision")
        < kinds[started:].index("output_audio_buffer.resumed")
    ), kinds
    assert not _of(tt, "output_audio_buffer.cleared", rid), "a resumed answer is never cleared"
    assert [e["status"] for e in _of(tt, "response.done", rid)] == ["completed"]
    assert len(_of(tt, "input_audio_buffer.committed")) == 1, (
        'pause mode: the overlapping "yeah" never becomes a user turn'
    )
    pause = tt["pauses"][rid]
    assert pause["paused_applied"] and pause["resumed_applied"], pause
    assert pause["paused_played"] > 0, f"the yeah came before any answer was heard: {pause}"
    assert pause["resumed_played"] == pause["paused_played"], (
        f"pause mode: the played cursor stands still while paused: {pause}"
    )
    held = [
        s
        for s in tt["statsLog"]
        if s["rid"] == rid and pause["t_paused"] < s["t"] < pause["t_resumed"]
    ]
    assert held and all(s["played"] == pause["paused_played"] for s in held), held[-3:]
    later = [s["played"] for s in tt["statsLog"] if s["rid"] == rid and s["t"] > pause["t_resumed"]]
    assert later and later[-1] > pause["paused_played"], (
        "pause mode: after resume the cursor goes on from where it stopped"
    )
    ack = page_acks.final(tt, rid)
    assert ack["samples"] == tt["received"][rid], (
        f"pause mode: the final ACK is of the answer's full length (nothing lost over the "
        f"pause): {page_acks.of(tt, rid)}, received {tt['received'][rid]} samples"
    )
    assert tt["received"][rid] == ANSWER_TOKENS * CHUNK, tt["received"][rid]
    _assert_progress_around(tt, rid, pause)
    held_by_server = page_acks.held(tt, rid)
    assert held_by_server["played_ms"] == ack["played_ms"], held_by_server
    assert held_by_server["history_committed"], (
        f"rule 5: a reply heard in full (over a pause) is in the history: {held_by_server}"
    )
    assert page.inner_text("#playback-state") == "finished"
    # The timeline tells the yeah from a barge-in: a backchannel over a paused answer, no cut.
    drawn = page.eval_on_selector_all("#timeline-list li", "els => els.map(e => e.textContent)")
    kinds = [line.split(" ")[:2] for line in drawn]
    assert ["user", "backchannel"] in kinds and ["assistant", "paused"] in kinds, drawn
    assert ["assistant", "cut"] not in kinds and ["user", "barge-in"] not in kinds, drawn
    assert any(line.startswith("user decision at") and ": resume: " in line for line in drawn)


def test_a_sentence_during_the_answer_interrupts_it_as_in_v1(
    null_server: BackgroundServer, open_page: Opener, tmp_path: Path
) -> None:
    question = flite_speech("Tell me a long story about a dragon.")
    sentence = flite_speech("Stop. What is the capital of France?", voice="kal")
    wav = write_wav(
        tmp_path / "mic.wav",
        np.concatenate([silence(0.5), question, silence(GAP_S), sentence, silence(8)]),
    )
    page = open_page(wav, null_server.http_url + "/?interruption=pause")
    _pause_session(page)
    _wait(
        page,
        "Object.values(window.turntaker.clears).some(c => c.t_silent !== null)",
        "pause mode: a sentence over the answer interrupts it (output_audio_buffer.cleared)",
        30,
    )
    first = page.evaluate("window.turntaker.events.find(e => e.type === 'response.created')")
    rid = first["response_id"]
    _wait(
        page,
        f"Object.entries(window.turntaker.playedBy).some(([k, v]) => k !== '{rid}' && v > 0)",
        "the interrupting sentence is the next turn, and its answer is heard",
        30,
    )
    time.sleep(0.5)
    tt = page.evaluate("window.turntaker")
    decisions = [d for d in tt["decisions"] if d["response_id"] == rid]
    print(f"\nsentence over {rid}: {decisions}; pause {tt['pauses'].get(rid)}")
    assert len(decisions) == 1, f"pause mode: exactly one overlap.decision: {decisions}"
    assert (decisions[0]["decision"], decisions[0]["reason"]) == ("interrupt", "speech")
    # The sentence opens with "Stop", an interrupt word: a partial that holds it decides at
    # once, however short the speech; any other decision waits for min_speech_ms (400, the
    # page's default). Which partial comes back first depends on the machine's load.
    said = (decisions[0].get("transcript") or "").lower()
    assert decisions[0]["speech_ms"] >= 400 or "stop" in said, decisions
    kinds = [e["type"] for e in tt["events"] if e["dir"] == "<" and e.get("response_id") == rid]
    assert (
        kinds.index("output_audio_buffer.paused")
        < kinds.index("overlap.decision")
        < (kinds.index("output_audio_buffer.cleared"))
    ), kinds
    (done,) = _of(tt, "response.done", rid)
    assert (done["status"], done.get("reason")) == ("cancelled", "turn_detected"), (
        f"rule 1 after an interrupt decision: {done}"
    )
    pause, clear = tt["pauses"][rid], tt["clears"][rid]
    assert pause["paused_played"] > 0, f"the sentence came before any answer was heard: {pause}"
    assert clear["played"] == pause["paused_played"], (
        f"pause mode: nothing of the answer plays between the pause and the interrupt: "
        f"{pause} {clear}"
    )
    ack = page_acks.final_of_cut(tt, rid, pause["t_paused_msg"])
    assert ack["samples"] == clear["played"], page_acks.of(tt, rid)
    later = [s for s in tt["statsLog"] if s["rid"] == rid and s["t"] > pause["t_paused"]]
    assert all(s["played"] == clear["played"] for s in later), later[-3:]
    decided = next(e["t"] for e in tt["events"] if e["type"] == "overlap.decision")
    committed = [e for e in _of(tt, "input_audio_buffer.committed") if e["t"] > decided]
    assert len(committed) == 1, "rule 1: the interrupting speech is the next user turn"
    assert len(_of(tt, "response.created")) == 2

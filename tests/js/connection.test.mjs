// Unit tests of the page's connection (connection.js) over a fake WebSocket and fake timers.
import assert from "node:assert/strict";
import { test } from "node:test";

import { Connection, FAREWELL_MS, RESUME_ANSWER_MS } from "../../orchestrator/service/static/connection.js";
import { Emitter } from "../../orchestrator/service/static/emitter.js";

class FakeSocket {
  static OPEN = 1;

  constructor(url, protocols) {
    this.url = url;
    this.protocols = protocols;
    this.readyState = 0;
    this.sent = [];
    this.closedWith = null;
    FakeSocket.made.push(this);
  }

  send(data) {
    this.sent.push(JSON.parse(data));
  }

  close(code, reason) {
    this.closedWith = [code, reason];
  }

  // What the network does.
  open() {
    this.readyState = 1;
    this.onopen();
  }

  receive(event) {
    this.onmessage({ data: JSON.stringify(event) });
  }

  lose(code, reason = "") {
    this.readyState = 3;
    this.onclose({ code, reason });
  }
}

function setup() {
  FakeSocket.made = [];
  const clock = { t: 0 };
  const timers = {
    pending: new Map(),
    next: 1,
    setTimeout(fn, ms) {
      const id = this.next++;
      this.pending.set(id, { fn, at: clock.t + ms });
      return id;
    },
    clearTimeout(id) {
      this.pending.delete(id);
    },
    // Runs the earliest timer, moving the clock to it; returns its delay from now.
    fire() {
      const [id, { fn, at }] = [...this.pending].sort((a, b) => a[1].at - b[1].at)[0];
      this.pending.delete(id);
      const waited = at - clock.t;
      clock.t = at;
      fn();
      return waited;
    },
  };
  const calls = [];
  const hooks = {};
  for (const name of ["opened", "live", "newSession", "event", "status", "finished"]) {
    hooks[name] = (arg) => calls.push(arg === undefined ? [name] : [name, arg]);
  }
  const emitter = new Emitter((e) => { throw e; });
  const emitted = [];
  for (const type of ["wire", "mic", "session-start", "lost", "retry", "reconnected", "farewell", "farewell-answer"]) {
    emitter.on(type, (detail) => emitted.push([type, detail]));
  }
  const connection = new Connection({ hooks, emitter, WebSocket: FakeSocket, timers, now: () => clock.t });
  connection.backoffOptions = { jitter: 0 };
  return { connection, timers, calls, emitted, clock };
}

const created = (seq, id = "sess_A", token = "tok_A") => ({
  type: "session.created", server_event_seq: seq, session: { id }, resume_token: token,
});

// A live session: connected, session.created (seq 1) processed.
function live() {
  const s = setup();
  s.connection.open("ws://h/v1/realtime?session_id=old", "sk-1");
  const [sock] = FakeSocket.made;
  sock.open();
  sock.receive(created(1));
  return { ...s, sock };
}

test("a first connection: a fresh URL, the key in a subprotocol, the session.update when open", () => {
  const { connection, calls, emitted, sock } = live();
  assert.equal(sock.url, "ws://h/v1/realtime");
  assert.deepEqual(sock.protocols, ["realtime", "openai-insecure-api-key.sk-1"]);
  assert.deepEqual(calls.slice(0, 3), [["opened"], ["status", "connected"], ["live"]]);
  assert.deepEqual(calls[3], ["event", created(1)]);
  assert.deepEqual(emitted[0], ["session-start", {}]);
  assert.deepEqual(emitted[1], ["wire", { dir: "<", event: created(1) }]);
  assert.equal(connection.link.sessionId, "sess_A");
});

test("a URL that is no URL ends the connection at once, saying why", () => {
  const { connection, calls } = setup();
  connection.open("not a url", "");
  assert.deepEqual(calls, [["finished", "error: TypeError"]]);
});

test("rule 1: a socket given up on is not heard", () => {
  const { connection, timers, calls, sock } = live();
  sock.lose(1006);
  timers.fire();
  const [, second] = FakeSocket.made;
  const before = calls.length;
  sock.receive({ type: "response.created", server_event_seq: 2, response: { id: "r1" } });
  sock.lose(1000);
  assert.equal(calls.length, before);
  assert.equal(connection.ws, second);
});

test("rule 2: while down or resuming nothing goes out but session.resume; mic audio is dropped", () => {
  const { connection, timers, sock, emitted } = live();
  connection.sendAudio(new Int16Array(4).buffer);
  assert.equal(sock.sent.at(-1).type, "input_audio_buffer.append");
  const mic = () => emitted.filter(([type]) => type === "mic").map(([, d]) => d);
  assert.deepEqual(mic(), [{ samples: 4 }], "the audio that went out is what the input clock counts");
  sock.lose(1006);
  assert.equal(connection.send({ type: "session.update" }), false);
  timers.fire();
  const second = FakeSocket.made[1];
  second.open();
  connection.sendAudio(new Int16Array(4).buffer);
  assert.equal(connection.send({ type: "session.update" }), false);
  assert.equal(mic().length, 1, "dropped audio is not on the input clock");
  assert.deepEqual(second.sent, [{
    type: "session.resume", session_id: "sess_A", resume_token: "tok_A", last_server_event_seq: 1,
  }]);
  assert.equal(second.url, "ws://h/v1/realtime?session_id=sess_A");
});

test("rule 3: an ACK made while down goes out once resumed, the latest per response", () => {
  const { connection, timers, calls, emitted, sock } = live();
  sock.lose(1006);
  connection.sendAck({ type: "playback.ack", response_id: "r1", played_ms: 100 });
  connection.sendAck({ type: "playback.ack", response_id: "r1", played_ms: 200 });
  timers.fire();
  const second = FakeSocket.made[1];
  second.open();
  second.receive({ type: "session.resumed", session_id: "sess_A", resume_token: "tok_A2", replayed_from_seq: 2 });
  assert.deepEqual(second.sent.slice(1), [
    { type: "playback.ack", response_id: "r1", played_ms: 200 },
    { type: "session.event_ack", server_event_seq: 1 },
  ]);
  assert.ok(calls.some((c) => c[0] === "status" && c[1] === "connected (resumed)"));
  assert.deepEqual(emitted.filter(([t]) => t === "reconnected"),
    [["reconnected", { outcome: "resumed", replayedFrom: 2 }]]);
  assert.deepEqual(emitted.filter(([t]) => t === "lost"), [["lost", { code: 1006, lastSeq: 1 }]]);
  assert.equal(emitted.filter(([t]) => t === "retry").length, 1);
});

test("rule 4: a normal close, a refusal, a takeover and a session without resume are final", () => {
  for (const [code, reason, status] of [
    [1000, "", "disconnected"],
    [1008, "invalid API key", "disconnected (1008: invalid API key)"],
  ]) {
    const { calls, sock } = live();
    sock.lose(code, reason);
    assert.deepEqual(calls.at(-1), ["finished", status]);
    assert.equal(FakeSocket.made.length, 1, "no second dial");
  }
  const taken = live();
  taken.sock.receive({ type: "error", error: { code: "session_replaced" } });
  taken.sock.lose(1000);
  assert.deepEqual(taken.calls.at(-1), ["finished", "disconnected (session taken over by another connection)"]);
  // No token announced: nothing to resume.
  const { connection, calls } = setup();
  connection.open("ws://h/v1/realtime", "");
  FakeSocket.made[0].open();
  FakeSocket.made[0].receive({ type: "session.created", session: { id: "s" } });
  FakeSocket.made[0].lose(1006, "");
  assert.deepEqual(calls.at(-1), ["finished", "disconnected (1006)"]);
  // 1005 (no status) reads as a plain disconnect, when final.
  const plain = setup();
  plain.connection.open("ws://h/v1/realtime", "");
  FakeSocket.made[0].lose(1005, "");
  assert.deepEqual(plain.calls.at(-1), ["finished", "disconnected"]);
});

test("rule 4: a loss is retried with backoff, and given up past the grace", () => {
  const { connection, timers, calls } = live();
  connection.backoffOptions = { jitter: 0, giveUpMs: 2000 };
  FakeSocket.made[0].lose(1006);
  assert.deepEqual(calls.at(-1), ["status", "reconnecting…"]);
  const waits = [];
  while (calls.at(-1)[0] !== "finished") {
    waits.push(timers.fire());
    FakeSocket.made.at(-1).lose(1006); // refused
  }
  assert.deepEqual(waits, [250, 500, 1000]);
  assert.deepEqual(calls.at(-1), ["finished", "disconnected (gave up reconnecting)"]);
  assert.equal(timers.pending.size, 0);
});

test("rule 4: a 1001 (server shutting down) is a loss like any other: the first redial waits the backoff", () => {
  const { timers, calls, emitted, sock } = live();
  sock.lose(1001, "server is shutting down");
  assert.deepEqual(calls.at(-1), ["status", "reconnecting…"]);
  assert.deepEqual(emitted.filter(([t]) => t === "lost"), [["lost", { code: 1001, lastSeq: 1 }]]);
  assert.equal(timers.fire(), 250);
  assert.equal(FakeSocket.made.length, 2);
  assert.equal(FakeSocket.made[1].url, "ws://h/v1/realtime?session_id=sess_A");
});

test("rule 7: a restart close (4001) is redialled at once and the session resumes", () => {
  const { connection, timers, calls, emitted, sock } = live();
  sock.receive({ type: "error", error: { type: "server_error", code: "server_restarting" } });
  sock.lose(4001, "server restarting; resume the session");
  assert.ok(!calls.some((c) => c[0] === "finished"), "not final");
  assert.deepEqual(calls.at(-1), ["status", "server restarting: moving the session…"]);
  assert.deepEqual(emitted.filter(([t]) => t === "lost"), [["lost", { code: 4001, lastSeq: 1 }]]);
  assert.equal(timers.fire(), 0, "no backoff before the first redial");
  const second = FakeSocket.made[1];
  assert.equal(second.url, "ws://h/v1/realtime?session_id=sess_A");
  second.open();
  assert.deepEqual(second.sent, [{
    type: "session.resume", session_id: "sess_A", resume_token: "tok_A", last_server_event_seq: 1,
  }]);
  second.receive({ type: "session.resumed", session_id: "sess_A", resume_token: "tok_A2", replayed_from_seq: 2 });
  assert.deepEqual(calls.at(-1), ["status", "connected (resumed)"]);
  assert.deepEqual(emitted.filter(([t]) => t === "reconnected"),
    [["reconnected", { outcome: "resumed", replayedFrom: 2 }]]);
  assert.equal(connection.link.token, "tok_A2");
  assert.equal(connection.backoff, null);
  // The next worker drains too (a rolling restart): a new drop, at once again.
  second.lose(4001, "server restarting; resume the session");
  assert.equal(timers.fire(), 0);
  assert.equal(FakeSocket.made.length, 3);
});

test("rule 7: a redial after a restart close that fails waits the backoff; one try at once a drop", () => {
  const { timers, sock } = live();
  sock.lose(4001, "server restarting; resume the session");
  const waits = [timers.fire()];
  FakeSocket.made.at(-1).lose(1006); // the try at once found no worker
  waits.push(timers.fire());
  FakeSocket.made.at(-1).lose(4001); // another draining worker, in the same drop
  waits.push(timers.fire());
  assert.deepEqual(waits, [0, 250, 500]);
});

test("rule 5: a resume unanswered is given up on that socket", () => {
  const { timers } = live();
  FakeSocket.made[0].lose(1006);
  timers.fire();
  const second = FakeSocket.made[1];
  second.open();
  assert.equal(timers.fire(), RESUME_ANSWER_MS);
  assert.deepEqual(second.closedWith, [4000, "session.resume unanswered"]);
});

test("a failed resume goes on as a new session, started afresh", () => {
  const { connection, timers, calls, emitted } = live();
  connection.sendAck({ type: "playback.ack", response_id: "r0", played_ms: 1 }); // sent live
  FakeSocket.made[0].lose(1006);
  connection.sendAck({ type: "playback.ack", response_id: "r1", played_ms: 1 });
  timers.fire();
  const second = FakeSocket.made[1];
  second.open();
  second.receive(created(1, "sess_B", "tok_B"));
  calls.length = 0;
  emitted.length = 0;
  second.receive({ type: "error", error: { code: "session_resume_failed" } });
  assert.deepEqual(calls.map((c) => c[0]), ["newSession", "event", "event", "status"]);
  assert.deepEqual(calls.at(-1), ["status", "connected (new session: resume failed)"]);
  assert.equal(emitted[0][0], "session-start");
  assert.equal(connection.link.sessionId, "sess_B");
  assert.ok(!second.sent.some((e) => e.type === "playback.ack"), "the old session's ACK is gone");
});

test("rule 6: Disconnect closes a live socket with 1000", () => {
  const { connection, calls, sock } = live();
  connection.disconnect();
  assert.deepEqual(sock.closedWith, [1000, undefined]);
  sock.lose(1000);
  assert.deepEqual(calls.at(-1), ["finished", "disconnected"]);
});

test("rule 6: Disconnect while down ends the session on a socket of its own", () => {
  const { connection, calls, emitted, timers } = live();
  FakeSocket.made[0].lose(1006);
  connection.disconnect();
  assert.deepEqual(calls.at(-1), ["finished", "disconnected"]);
  const farewell = FakeSocket.made[1];
  assert.equal(farewell.url, "ws://h/v1/realtime?session_id=sess_A");
  farewell.open();
  assert.deepEqual(farewell.sent, [{
    type: "session.resume", session_id: "sess_A", resume_token: "tok_A", last_server_event_seq: 1,
  }]);
  farewell.receive(created(1, "sess_C", "tok_C")); // its provisional session: not the answer
  assert.equal(farewell.closedWith, null);
  farewell.receive({ type: "session.resumed", session_id: "sess_A", resume_token: "tok_A2" });
  assert.deepEqual(farewell.closedWith, [1000, undefined]);
  assert.deepEqual(emitted.filter(([t]) => t.startsWith("farewell")),
    [["farewell", {}], ["farewell-answer", { outcome: "ended", token: "tok_A2" }]]);
  farewell.lose(1000);
  assert.equal(timers.pending.size, 0);
  assert.equal(FakeSocket.made.length, 2, "no redial after Disconnect");
});

test("rule 6: the farewell socket gives up waiting after FAREWELL_MS", () => {
  const { connection, timers } = live();
  FakeSocket.made[0].lose(1006);
  connection.disconnect();
  const farewell = FakeSocket.made[1];
  farewell.open();
  assert.equal(timers.fire(), FAREWELL_MS);
  assert.deepEqual(farewell.closedWith, [1000, undefined]);
});

test("the wire: what is sent and processed is emitted, mic audio is not (only its length)", () => {
  const { connection, emitted, sock } = live();
  emitted.length = 0;
  connection.sendAudio(new Int16Array(2).buffer);
  connection.send({ type: "session.update" });
  sock.receive({ ...created(1) }); // a duplicate: only logged
  assert.deepEqual(emitted, [
    ["mic", { samples: 2 }],
    ["wire", { dir: ">", event: { type: "session.update" } }],
    ["wire", { dir: "~", event: created(1) }],
  ]);
});

// Unit tests of the page's reconnect-and-resume logic (the same file connection.js imports).
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  BACKOFF,
  Backoff,
  RESTARTING_CLOSE,
  ResumeState,
  freshUrl,
  resumeUrl,
} from "../../orchestrator/service/static/reconnect.js";

// --- backoff ---------------------------------------------------------------------------------

test("backoff doubles from 250 ms to 4 s and gives up past the server's grace", () => {
  const b = new Backoff({}, () => 0); // no jitter drawn: the schedule itself
  const delays = [];
  let elapsed = 0;
  for (;;) {
    const d = b.next(elapsed);
    if (d === null) break;
    delays.push(d);
    elapsed += d;
  }
  assert.deepEqual(delays.slice(0, 6), [250, 500, 1000, 2000, 4000, 4000]);
  assert.ok(elapsed <= BACKOFF.giveUpMs, elapsed);
  // The next try would have started after the grace.
  assert.ok(elapsed + 4000 > BACKOFF.giveUpMs, elapsed);
});

test("backoff jitter only shortens a wait, by at most its fraction", () => {
  for (const r of [0, 0.3, 0.999]) {
    const b = new Backoff({}, () => r);
    const d = [b.next(0), b.next(0), b.next(0)];
    [250, 500, 1000].forEach((base, i) => {
      assert.ok(d[i] <= base && d[i] >= base * (1 - BACKOFF.jitter) - 1, `${r}: ${d}`);
    });
  }
  const low = new Backoff({}, () => 1).next(0);
  const high = new Backoff({}, () => 0).next(0);
  assert.ok(low < high, "two pages dropped at once do not dial at the same instant");
});

test("backoff gives up at once when the grace is already spent", () => {
  assert.equal(new Backoff({}, () => 0).next(BACKOFF.giveUpMs), null);
  assert.equal(new Backoff({ giveUpMs: 1000 }, () => 0).next(800), null);
  assert.equal(new Backoff({ giveUpMs: 1000 }, () => 0).next(700), 250);
});

test("backoff: a restart close (4001) is tried at once, once a drop, the schedule untouched", () => {
  assert.equal(RESTARTING_CLOSE, 4001);
  const b = new Backoff({}, () => 0);
  assert.deepEqual([b.next(0, 4001), b.next(0, 1006), b.next(250, 4001), b.next(750, 1006)],
    [0, 250, 500, 1000]);
  // 1001 (a drain that kept nothing) waits as any loss does.
  assert.equal(new Backoff({}, () => 0).next(0, 1001), 250);
  // Past the grace, even a restart close is given up.
  assert.equal(new Backoff({ giveUpMs: 1000 }, () => 0).next(1001, 4001), null);
});

// --- URLs ------------------------------------------------------------------------------------

test("the resume URL adds or replaces session_id and keeps the rest of the query", () => {
  assert.equal(
    resumeUrl("ws://127.0.0.1:8000/v1/realtime", "sess_1"),
    "ws://127.0.0.1:8000/v1/realtime?session_id=sess_1",
  );
  const u = new URL(resumeUrl("wss://h/v1/realtime?model=m&session_id=old", "sess_2"));
  assert.equal(u.searchParams.get("model"), "m");
  assert.deepEqual(u.searchParams.getAll("session_id"), ["sess_2"]);
  assert.equal(u.pathname, "/v1/realtime");
});

test("the token never goes in a URL; a fresh URL drops a stale session_id", () => {
  const s = live(); // token "tok_1"
  const url = resumeUrl("ws://h/v1/realtime?model=m", s.sessionId);
  assert.ok(!url.includes("tok_1"), url);
  assert.equal(freshUrl("ws://h/v1/realtime?model=m&session_id=x"), "ws://h/v1/realtime?model=m");
  assert.equal(freshUrl("ws://h/v1/realtime"), "ws://h/v1/realtime");
});

// --- sequence and resume ---------------------------------------------------------------------

function created(id, seq = 1, token = `tok_${id.slice(-1)}`) {
  return { type: "session.created", server_event_seq: seq, session: { id }, resume_token: token };
}

function ev(seq, type = "response.output_audio.delta", extra = {}) {
  return { type, server_event_seq: seq, response_id: "resp_1", ...extra };
}

function types(result) {
  return result.process.map((e) => `${e.type}${e.server_event_seq ? "#" + e.server_event_seq : ""}`);
}

// A session that has processed events 1..5.
function live() {
  const s = new ResumeState();
  s.start();
  s.receive(created("sess_1"));
  for (let n = 2; n <= 5; n++) s.receive(ev(n));
  return s;
}

test("a first connection's session.created starts the session and its token", () => {
  const s = new ResumeState();
  assert.equal(s.canResume(), false);
  s.start();
  assert.ok(s.accepting(), "the page's first session.update goes out before session.created");
  const r = s.receive(created("sess_1"));
  assert.deepEqual(types(r), ["session.created#1"]);
  assert.equal(s.phase, "live");
  assert.equal(s.sessionId, "sess_1");
  assert.equal(s.token, "tok_1");
  assert.equal(s.lastSeq, 1);
  assert.ok(s.canResume());
});

test("a server without resume support announces no token: nothing to resume", () => {
  const s = new ResumeState();
  s.start();
  s.receive({ type: "session.created", session: { id: "sess_1" } });
  assert.equal(s.canResume(), false);
  // Its events carry no sequence number and all pass.
  assert.deepEqual(types(s.receive({ type: "response.created" })), ["response.created"]);
  assert.deepEqual(types(s.receive({ type: "response.created" })), ["response.created"]);
});

test("a sequenced event at or below the last one processed is dropped; unsequenced ones pass", () => {
  const s = live();
  assert.deepEqual(types(s.receive(ev(5))), []);
  assert.deepEqual(types(s.receive(ev(3))), []);
  assert.equal(s.duplicates, 2);
  assert.deepEqual(types(s.receive({ type: "error", error: { code: "x" } })), ["error"]);
  assert.deepEqual(types(s.receive(ev(6))), ["response.output_audio.delta#6"]);
  assert.equal(s.lastSeq, 6);
  assert.deepEqual(s.gaps, []);
});

test("a skipped sequence number is recorded as a gap, and the event still processed", () => {
  const s = live();
  assert.deepEqual(types(s.receive(ev(8))), ["response.output_audio.delta#8"]);
  assert.deepEqual(s.gaps, [[6, 7]]);
});

test("a drop stops client events; the resume message asks for what came after the last one", () => {
  const s = live();
  s.dropped();
  assert.equal(s.phase, "down");
  assert.equal(s.accepting(), false, "mic appends are dropped while disconnected");
  assert.ok(s.canResume());
  const msg = s.beginResume();
  assert.deepEqual(msg, {
    type: "session.resume",
    session_id: "sess_1",
    resume_token: "tok_1",
    last_server_event_seq: 5,
  });
  assert.equal(s.accepting(), false, "session.resume must be the first client event");
});

test("leaving while down asks to resume the session only to end it; otherwise nothing", () => {
  const s = live();
  assert.equal(s.farewell(), null, "a live socket is closed with 1000 itself");
  s.dropped();
  assert.deepEqual(s.farewell(), {
    type: "session.resume",
    session_id: "sess_1",
    resume_token: "tok_1",
    last_server_event_seq: 5,
  });
  assert.equal(s.phase, "down", "asking changes nothing of the page's own state");
  s.beginResume();
  assert.equal(s.farewell(), null, "a resume already sent: closing its socket ends the session");
  const fresh = new ResumeState();
  fresh.start();
  fresh.dropped();
  assert.equal(fresh.farewell(), null, "no session.created yet: nothing to end");
});

test("a successful resume ignores the provisional session and plays the replay on exactly", () => {
  const s = live();
  s.dropped();
  s.beginResume();
  // The new connection's own session, created before the resume is read: nothing resets.
  const p = s.receive(created("sess_9", 1, "tok_9"));
  assert.deepEqual(p.process, []);
  assert.equal(s.lastSeq, 5);
  const r = s.receive({
    type: "session.resumed",
    session_id: "sess_1",
    resume_token: "tok_new",
    replayed_from_seq: 6,
  });
  assert.equal(r.outcome, "resumed");
  assert.deepEqual(types(r), ["session.resumed"]);
  assert.deepEqual(
    r.ignored.map((e) => e.session.id),
    ["sess_9"],
  );
  assert.equal(s.phase, "live");
  assert.ok(s.accepting());
  assert.equal(s.token, "tok_new", "the old token is void: keep the new one");
  assert.equal(s.sessionId, "sess_1");
  // The replay, with an overlap a careless server might send: each sample plays once.
  const seen = [];
  for (const n of [5, 6, 7, 7, 8, 9]) seen.push(...types(s.receive(ev(n))));
  assert.deepEqual(seen, [6, 7, 8, 9].map((n) => `response.output_audio.delta#${n}`));
  assert.equal(s.duplicates, 2);
  assert.deepEqual(s.gaps, []);
  // A second drop resumes with the new token from where the replay left off.
  s.dropped();
  assert.deepEqual(s.beginResume(), {
    type: "session.resume",
    session_id: "sess_1",
    resume_token: "tok_new",
    last_server_event_seq: 9,
  });
});

test("a resume answered from a later seq than asked records the gap", () => {
  const s = live();
  s.dropped();
  s.beginResume();
  s.receive({ type: "session.resumed", session_id: "sess_1", resume_token: "t", replayed_from_seq: 9 });
  assert.deepEqual(s.gaps, [[6, 8]]);
});

test("a failed resume goes on as the provisional session, from its start", () => {
  const s = live();
  s.dropped();
  s.beginResume();
  assert.deepEqual(s.receive(created("sess_9", 1, "tok_9")).process, []);
  // Anything else of the provisional session before the answer waits with it.
  assert.deepEqual(s.receive(ev(2, "session.updated")).process, []);
  const r = s.receive({
    type: "error",
    error: { type: "invalid_request_error", code: "session_resume_failed", message: "unknown session" },
  });
  assert.equal(r.outcome, "resume_failed");
  assert.deepEqual(types(r), ["error", "session.created#1", "session.updated#2"]);
  assert.equal(s.phase, "live");
  assert.equal(s.sessionId, "sess_9");
  assert.equal(s.token, "tok_9", "a later drop resumes the new session");
  assert.equal(s.lastSeq, 2);
  assert.ok(s.accepting(), "the page re-sends its session.update");
  assert.deepEqual(types(s.receive(ev(3, "response.created"))), ["response.created#3"]);
});

test("a failed resume before the provisional session.created waits for it as a first connect", () => {
  const s = live();
  s.dropped();
  s.beginResume();
  const r = s.receive({ type: "error", error: { code: "session_resume_failed", message: "m" } });
  assert.deepEqual(types(r), ["error"]);
  assert.equal(s.phase, "fresh");
  assert.equal(s.canResume(), false);
  s.receive(created("sess_7", 1, "tok_7"));
  assert.equal(s.sessionId, "sess_7");
  assert.equal(s.lastSeq, 1);
});

test("unsequenced events pass while resuming; a stray resume answer is only logged", () => {
  const s = live();
  s.dropped();
  s.beginResume();
  assert.deepEqual(types(s.receive({ type: "error", error: { code: "other" } })), ["error"]);
  s.receive({ type: "session.resumed", session_id: "sess_1", resume_token: "t2", replayed_from_seq: 6 });
  const stray = s.receive({ type: "session.resumed", session_id: "sess_1", resume_token: "t3" });
  assert.deepEqual(stray.process, []);
  assert.equal(s.token, "t2");
  const failed = s.receive({ type: "error", error: { code: "session_resume_failed" } });
  assert.deepEqual(failed.process, []);
  assert.equal(s.sessionId, "sess_1", "a stray failure does not reset a live session");
});

test("session_replaced is reported whatever the phase", () => {
  const s = live();
  const r = s.receive({ type: "error", error: { code: "session_replaced", message: "m" } });
  assert.equal(r.outcome, "replaced");
  assert.deepEqual(types(r), ["error"]);
});

test("event acks go out every 50 events or when forced, never twice for the same seq", () => {
  const s = live(); // 1..5
  assert.equal(s.eventAck(), null);
  assert.deepEqual(s.eventAck(50, true), { type: "session.event_ack", server_event_seq: 5 });
  assert.equal(s.eventAck(50, true), null);
  for (let n = 6; n < 55; n++) s.receive(ev(n));
  assert.equal(s.eventAck(), null);
  s.receive(ev(55));
  assert.deepEqual(s.eventAck(), { type: "session.event_ack", server_event_seq: 55 });
  s.receive(ev(56));
  s.dropped();
  assert.equal(s.eventAck(50, true), null, "nothing is sent while the socket is lost");
});

test("start() forgets an earlier session entirely", () => {
  const s = live();
  s.receive(ev(7));
  s.start();
  assert.equal(s.canResume(), false);
  assert.equal(s.lastSeq, 0);
  assert.deepEqual(s.gaps, []);
  assert.equal(s.phase, "fresh");
});

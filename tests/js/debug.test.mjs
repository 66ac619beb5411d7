// Unit tests of the page's debug record (debug.js): built only from what the parts emit.
import assert from "node:assert/strict";
import { test } from "node:test";

import { debugRecord } from "../../orchestrator/service/static/debug.js";
import { Emitter } from "../../orchestrator/service/static/emitter.js";

function setup() {
  const emitter = new Emitter((e) => { throw e; });
  const clock = { t: 0 };
  const sent = [];
  const connection = { link: { sessionId: "s" }, backoffOptions: {}, send: (e) => sent.push(e) || true };
  const parts = {
    emitter, connection,
    settings: { interruptResponse: true, interruption: "pause" },
    view: { statuses: { state: "connected", inputState: "-", responseState: "-", playbackState: "paused" } },
    audio: { state: "running" },
  };
  const tt = debugRecord(parts, () => clock.t);
  return { tt, emitter, clock, parts, sent };
}

test("the page's state is read through, never copied; backoff options write through", () => {
  const { tt, parts, sent } = setup();
  assert.equal(tt.state, "connected");
  parts.view.statuses.state = "reconnecting…";
  assert.equal(tt.state, "reconnecting…");
  assert.equal(tt.playbackState, "paused");
  assert.equal(tt.interruption, "pause");
  assert.equal(tt.audio, "running");
  assert.equal(tt.resume, parts.connection.link);
  tt.backoff = { giveUpMs: 2000 };
  assert.deepEqual(parts.connection.backoffOptions, { giveUpMs: 2000 });
  tt.send({ type: "session.update" });
  assert.deepEqual(sent, [{ type: "session.update" }]);
});

test("events and sequence numbers: every wire event; seqs of processed ones, per session", () => {
  const { tt, emitter, clock } = setup();
  clock.t = 5;
  emitter.emit("wire", { dir: "<", event: { type: "session.created", server_event_seq: 1 } });
  emitter.emit("wire", { dir: "~", event: { type: "response.done", server_event_seq: 1, response: { id: "r", status: "completed" } } });
  emitter.emit("wire", { dir: ">", event: { type: "session.update" } });
  assert.deepEqual(tt.seqs, [1]);
  assert.deepEqual(tt.events.map((e) => [e.t, e.dir, e.type]), [
    [5, "<", "session.created"], [5, "~", "response.done"], [5, ">", "session.update"],
  ]);
  emitter.emit("session-start");
  assert.deepEqual(tt.seqs, []);
  for (let i = 0; i < 5001; i++) emitter.emit("wire", { dir: ">", event: { type: "x" } });
  assert.equal(tt.events.length, 5004 - 1000);
});

test("clears: the trigger, the server's cleared message, the worklet's silence", () => {
  const { tt, emitter, clock } = setup();
  clock.t = 10;
  emitter.emit("interrupt", { rid: "r1", trigger: "speech_started" });
  clock.t = 20;
  emitter.emit("wire", { dir: "<", event: { type: "output_audio_buffer.cleared", response_id: "r1" } });
  clock.t = 25;
  emitter.emit("wire", { dir: "<", event: { type: "output_audio_buffer.cleared", response_id: "r1" } });
  clock.t = 30;
  emitter.emit("worklet", { type: "cleared", rid: "r1", played: 4800, dropped: 96 });
  assert.deepEqual(tt.clears.r1, {
    trigger: "speech_started", t_trigger: 10, t_cleared_msg: 20, t_silent: 30, played: 4800, dropped: 96,
  });
  assert.equal(tt.playedBy.r1, 200);
  // Cut off by the cleared message itself: it came when the page cut it off.
  emitter.emit("wire", { dir: "<", event: { type: "output_audio_buffer.cleared", response_id: "r2" } });
  emitter.emit("interrupt", { rid: "r2", trigger: "output_audio_buffer.cleared" });
  assert.equal(tt.clears.r2.t_cleared_msg, 30);
});

test("pauses: the page's pause and resume, where the worklet's cursor stood, how it ended", () => {
  const { tt, emitter, clock } = setup();
  clock.t = 1;
  emitter.emit("pause", { rid: "r1" });
  clock.t = 2;
  emitter.emit("worklet", { type: "paused", rid: "r1", played: 100, queued: 50, applied: true });
  clock.t = 3;
  emitter.emit("resume", { rid: "r1" });
  clock.t = 4;
  emitter.emit("worklet", { type: "resumed", rid: "r1", played: 100, applied: true });
  assert.deepEqual(tt.pauses.r1, {
    t_paused_msg: 1, paused_played: 100, paused_queued: 50, paused_applied: true, t_paused: 2,
    t_resumed_msg: 3, t_resumed: 4, resumed_played: 100, resumed_applied: true, ended: "resumed",
  });
  emitter.emit("pause", { rid: "r2" });
  emitter.emit("interrupt", { rid: "r2", trigger: "output_audio_buffer.cleared" });
  assert.equal(tt.pauses.r2.ended, "output_audio_buffer.cleared");
});

test("audio handed over, worklet reports and ACKs", () => {
  const { tt, emitter, clock } = setup();
  emitter.emit("audio", { rid: "r1", samples: 1920 });
  emitter.emit("audio", { rid: "r1", samples: 1920 });
  clock.t = 7;
  emitter.emit("worklet", { type: "stats", rid: "r1", played: 2400, paused: false, queued: 9 });
  emitter.emit("worklet", { type: "stats", rid: null, played: 0, paused: false });
  emitter.emit("worklet", { type: "finished", rid: "r1", played: 3840 });
  emitter.emit("ack", { event: { type: "playback.ack", response_id: "r1", played_ms: 160 }, samples: 3840 });
  emitter.emit("wire", { dir: "<", event: {
    type: "playback.acknowledged", response_id: "r1", played_ms: 160, committed_ms: 160, history_committed: true,
  } });
  emitter.emit("wire", { dir: "<", event: {
    type: "overlap.decision", response_id: "r1", decision: "resume", reason: "short", speech_ms: 80,
  } });
  assert.deepEqual(tt.received, { r1: 3840 });
  assert.deepEqual(tt.statsLog, [{ t: 7, rid: "r1", played: 2400, paused: false }]);
  assert.equal(tt.played_ms, 100);
  assert.equal(tt.playedBy.r1, 160);
  assert.deepEqual(tt.acks, [{ type: "playback.ack", response_id: "r1", played_ms: 160, samples: 3840, t: 7 }]);
  assert.deepEqual(tt.acknowledged, [{ response_id: "r1", played_ms: 160, committed_ms: 160, history_committed: true }]);
  assert.deepEqual(tt.decisions, [{
    t: 7, response_id: "r1", decision: "resume", reason: "short", speech_ms: 80, transcript: null,
  }]);
});

test("drops: one per lost socket, its tries and how it ended; the farewell", () => {
  const { tt, emitter, clock } = setup();
  clock.t = 100;
  emitter.emit("lost", { code: 1006, lastSeq: 12 });
  emitter.emit("retry");
  emitter.emit("retry");
  clock.t = 900;
  emitter.emit("reconnected", { outcome: "resumed", replayedFrom: 13 });
  assert.deepEqual(tt.drops, [{
    t_lost: 100, code: 1006, attempts: 2, t_resumed: 900, outcome: "resumed", last_seq: 12, replayed_from_seq: 13,
  }]);
  assert.equal(tt.farewell, undefined);
  emitter.emit("farewell");
  assert.deepEqual(tt.farewell, { t: 900, outcome: null });
  emitter.emit("farewell-answer", { outcome: "ended", token: "tok_2" });
  assert.deepEqual(tt.farewell, { t: 900, outcome: "ended", token: "tok_2" });
});

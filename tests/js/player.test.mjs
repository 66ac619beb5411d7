// Unit tests of the page's side of playback (player.js), over a fake worklet and view.
import assert from "node:assert/strict";
import { test } from "node:test";

import { Emitter } from "../../orchestrator/service/static/emitter.js";
import { bytesToB64 } from "../../orchestrator/service/static/pcm.js";
import {
  ECHO_PROGRESS_REPORTS, PROGRESS_REPORTS, Player,
} from "../../orchestrator/service/static/player.js";

function setup(inputAt = undefined) {
  const worklet = { live: true, posted: [], post(msg) { this.posted.push(msg); } };
  const view = {
    states: [], playedMs: null,
    playback(s) { this.states.push(s); },
    played(ms) { this.playedMs = ms; },
  };
  const sent = [];
  const emitter = new Emitter((e) => { throw e; });
  const emitted = [];
  for (const type of ["interrupt", "pause", "resume", "audio", "worklet", "ack"]) {
    emitter.on(type, (detail) => emitted.push([type, detail]));
  }
  const player = new Player({ worklet, view, emitter, sendAck: (e) => sent.push(e), inputAt });
  return { player, worklet, view, sent, emitted };
}

const delta = (n) => bytesToB64(new Int16Array(n).buffer);
const types = (worklet) => worklet.posted.map((m) => m.type);

test("rule 1: an interrupted response is cleared once and its later deltas are discarded", () => {
  const { player, worklet, emitted } = setup();
  player.started("r1");
  player.push("r1", "item_1", delta(480));
  player.interrupt("r1", "speech_started");
  player.interrupt("r1", "output_audio_buffer.cleared");
  player.push("r1", "item_1", delta(480));
  player.done("r1");
  assert.deepEqual(types(worklet), ["push", "clear"]);
  assert.equal(worklet.posted[0].samples.byteLength, 960);
  assert.deepEqual(emitted.filter(([t]) => t === "interrupt").map(([, d]) => d),
    [{ rid: "r1", trigger: "speech_started" }]);
  assert.deepEqual(emitted.filter(([t]) => t === "audio").map(([, d]) => d),
    [{ rid: "r1", samples: 480 }]);
  assert.ok(player.isInterrupted("r1"));
});

test("rule 1: an interrupt without a response id does nothing", () => {
  const { player, worklet, emitted } = setup();
  player.interrupt(undefined, "speech_started");
  assert.deepEqual(worklet.posted, []);
  assert.deepEqual(emitted, []);
});

test("rule 2: only the latest response can be paused, and not once cut off", () => {
  const { player, worklet, view } = setup();
  player.started("r2");
  player.pause("r1"); // stale: not the latest
  assert.deepEqual(worklet.posted, []);
  player.interrupt("r2", "speech_started");
  player.pause("r2");
  assert.deepEqual(types(worklet), ["clear"]);
  assert.deepEqual(view.states, []);
});

test("rule 2: a resume plays on only a response paused now", () => {
  const { player, worklet, view, emitted } = setup();
  player.started("r1");
  player.resume("r1"); // never paused
  player.pause("r1");
  player.resume("r1");
  player.resume("r1"); // already resumed
  assert.deepEqual(types(worklet), ["pause", "resume"]);
  assert.deepEqual(view.states, ["paused", "playing"]);
  assert.deepEqual(emitted.map(([t]) => t), ["pause", "resume"]);
  // Paused again after a resume: a new pause.
  player.pause("r1");
  player.interrupt("r1", "output_audio_buffer.cleared");
  player.resume("r1"); // the clear ended the pause
  assert.deepEqual(types(worklet), ["pause", "resume", "pause", "clear"]);
});

test("rule 3: the ACK of a cleared response says what the worklet rendered, with its item", () => {
  const { player, sent, view, emitted } = setup();
  player.started("r1");
  player.item("r1", "item_9");
  player.interrupt("r1", "speech_started");
  player.onWorklet({ type: "cleared", rid: "r1", played: 12000, dropped: 100 });
  assert.deepEqual(sent, [{ type: "playback.ack", response_id: "r1", played_ms: 500, item_id: "item_9" }]);
  assert.deepEqual(view.states, ["cleared"]);
  const [, ack] = emitted.find(([t]) => t === "ack");
  assert.deepEqual(ack, { event: sent[0], samples: 12000 });
});

test("rule 3: a response heard in full is acknowledged once at its end; not if cut off", () => {
  const { player, sent, view } = setup();
  player.started("r1");
  player.push("r1", "item_1", delta(100));
  player.onWorklet({ type: "finished", rid: "r1", played: 24001 });
  assert.deepEqual(sent, [{ type: "playback.ack", response_id: "r1", played_ms: 1000, item_id: "item_1" }]);
  assert.ok(player.heardInFull("r1"));
  assert.deepEqual(view.states, ["finished"]);
  player.interrupt("r2", "response.done");
  player.onWorklet({ type: "finished", rid: "r2", played: 10 });
  assert.equal(sent.length, 1);
});

test("rule 4: a worklet report that trails the end or the clear does not say playing", () => {
  const { player, view } = setup();
  player.onWorklet({ type: "stats", rid: "r1", played: 2400, paused: false });
  player.onWorklet({ type: "stats", rid: "r1", played: 2400, paused: false }); // stood still
  player.onWorklet({ type: "stats", rid: "r1", played: 4800, paused: true });
  player.onWorklet({ type: "finished", rid: "r1", played: 4800 });
  player.onWorklet({ type: "stats", rid: "r1", played: 9600, paused: false }); // trails the end
  player.interrupt("r2", "speech_started");
  player.onWorklet({ type: "stats", rid: "r2", played: 100, paused: false }); // trails the clear
  player.onWorklet({ type: "stats", rid: null, played: 0, paused: false }); // nothing playing
  assert.deepEqual(view.states, ["playing", "paused", "finished"]);
  assert.equal(view.playedMs, 4); // the last report with a response: 100 samples
});

test("rule 4: a report written before the worklet took the pause does not say playing", () => {
  const { player, view } = setup();
  player.started("r1");
  player.onWorklet({ type: "stats", rid: "r1", played: 2400, paused: false });
  player.pause("r1");
  player.onWorklet({ type: "stats", rid: "r1", played: 4800, paused: false }); // trails the pause
  player.onWorklet({ type: "paused", rid: "r1", played: 4800, queued: 100, applied: true });
  assert.deepEqual(view.states, ["playing", "paused"]);
  player.resume("r1");
  player.onWorklet({ type: "stats", rid: "r1", played: 7200, paused: false });
  assert.deepEqual(view.states, ["playing", "paused", "playing", "playing"]);
});

test("rule 5: without a worklet nothing is queued, paused or resumed", () => {
  const { player, worklet, emitted } = setup();
  worklet.live = false;
  player.started("r1");
  player.push("r1", "item_1", delta(10));
  player.pause("r1");
  player.done("r1");
  player.interrupt("r1", "speech_started");
  assert.deepEqual(worklet.posted, []);
  assert.ok(player.isInterrupted("r1"), "still known as cut off");
  assert.deepEqual(emitted.map(([t]) => t), ["interrupt"]);
});

test("a new conversation forgets the old one's responses", () => {
  const { player } = setup();
  player.started("r1");
  player.interrupt("r1", "speech_started");
  player.onWorklet({ type: "finished", rid: "r0", played: 1 });
  player.reset();
  assert.equal(player.current, null);
  assert.ok(!player.isInterrupted("r1") && !player.heardInFull("r0"));
});

test("the remembered responses are bounded", () => {
  const { player } = setup();
  for (let i = 0; i < 100; i++) {
    player.item(`r${i}`, `item_${i}`);
    player.interrupt(`r${i}`, "speech_started");
  }
  assert.equal(player.items.size, 64);
  assert.equal(player.interrupted.size, 64);
  assert.ok(!player.isInterrupted("r0") && player.isInterrupted("r99"));
});

const stats = (rid, played, frame, paused = false) => ({ type: "stats", rid, played, paused, frame });

// One worklet report: 1200 frames (50 ms) after the last, the cursor `step` samples on.
function reporter(player, rid, { played = 0, frame = 0 } = {}) {
  return {
    played, frame,
    report(step = 1200, paused = false) {
      this.played += step;
      this.frame += 1200;
      player.onWorklet(stats(rid, this.played, this.frame, paused));
    },
  };
}

test("rule 6: with echo cancellation off, the playing response is acknowledged every 250 ms", () => {
  const { player, sent } = setup((frame) => frame); // input began with the context
  player.started("r1");
  player.item("r1", "item_1");
  const w = reporter(player, "r1");
  for (let i = 0; i < 20; i++) w.report(); // 1 s of playback, a report every 50 ms
  assert.equal(PROGRESS_REPORTS, 5);
  assert.deepEqual(sent.map((e) => [e.played_ms, e.input_ms]),
    [[250, 250], [500, 500], [750, 750], [1000, 1000]]);
  assert.ok(sent.every((e) => e.type === "playback.ack" && e.response_id === "r1" &&
                               e.item_id === "item_1"));
  // Paused: nothing, not even from a report written before the worklet took the pause (its
  // cursor moved), however long the pause.
  player.pause("r1");
  w.report();
  for (let i = 0; i < 20; i++) w.report(0, true);
  assert.equal(sent.length, 4, "no progress ACK while paused");
  // Resumed: on from the same cursor, at the first report that moves it (the reports of the
  // pause counted), then at the same pace.
  player.resume("r1");
  for (let i = 0; i < 10; i++) w.report();
  assert.deepEqual(sent.slice(4).map((e) => e.played_ms), [1100, 1350]);
  // Starved (the cursor stands still): nothing new to say.
  for (let i = 0; i < 10; i++) w.report(0);
  assert.equal(sent.length, 6);
  // Rule 3's one ACK still ends it; nothing after it.
  player.onWorklet({ type: "finished", rid: "r1", played: w.played + 600, frame: w.frame + 600 });
  assert.deepEqual(sent.at(-1), {
    type: "playback.ack", response_id: "r1", item_id: "item_1", played_ms: 1575, input_ms: 3075,
  });
  for (let i = 0; i < 10; i++) w.report();
  assert.equal(sent.length, 7, "nothing after the response was heard in full");
});

test("rule 6: a response cut off is not acknowledged as it plays; the next one is", () => {
  const { player, sent } = setup();
  player.started("r1");
  const w1 = reporter(player, "r1");
  for (let i = 0; i < PROGRESS_REPORTS; i++) w1.report();
  assert.deepEqual(sent.map((e) => e.played_ms), [250]);
  player.interrupt("r1", "speech_started");
  for (let i = 0; i < 2 * PROGRESS_REPORTS; i++) w1.report(); // trailing the clear
  player.onWorklet({ type: "cleared", rid: "r1", played: 7200 });
  assert.deepEqual(sent.map((e) => e.played_ms), [250, 300], "the clear's ACK, and no other");
  // The next response's first report that moves says where it stands (the reports since the
  // last progress ACK counted), then every PROGRESS_REPORTS.
  player.started("r2");
  const w2 = reporter(player, "r2");
  for (let i = 0; i <= PROGRESS_REPORTS; i++) w2.report();
  assert.deepEqual(sent.map((e) => [e.response_id, e.played_ms]),
    [["r1", 250], ["r1", 300], ["r2", 50], ["r2", 300]]);
});

test("rule 6: with echo cancellation on, the playing response is acknowledged every 100 ms", () => {
  const { player, sent } = setup((frame) => frame - 1000); // input began 1000 frames in
  player.started("r1");
  player.item("r1", "item_1");
  player.acknowledgeProgress(true);
  player.onWorklet(stats("r1", 1200, 5000));
  player.onWorklet(stats("r1", 2400, 6200));
  for (let i = 1; i <= 2 * ECHO_PROGRESS_REPORTS; i++) {
    player.onWorklet(stats("r1", 2400 + 1200 * i, 6200 + 1200 * i));
  }
  // Every ECHO_PROGRESS_REPORTS reports: input = frame - 1000.
  assert.equal(ECHO_PROGRESS_REPORTS, 2);
  assert.deepEqual(sent.map((e) => [e.played_ms, e.input_ms]),
    [[100, 5200 / 24], [200, 7600 / 24], [300, 10000 / 24]]);
  assert.ok(sent.every((e) => e.type === "playback.ack" && e.item_id === "item_1"));
  // Standing still (paused, or starved) or paused: no progress ACK says nothing new.
  for (let i = 0; i < 2 * PROGRESS_REPORTS; i++) player.onWorklet(stats("r1", 7200, 20000 + i));
  player.pause("r1");
  for (let i = 0; i < 2 * PROGRESS_REPORTS; i++) player.onWorklet(stats("r1", 7200 + i, 30000 + i, true));
  assert.equal(sent.length, 3);
  // Rule 3's one ACK still ends it, with where the input stood.
  player.onWorklet({ type: "finished", rid: "r1", played: 9600, frame: 40000 });
  assert.deepEqual(sent.at(-1), {
    type: "playback.ack", response_id: "r1", item_id: "item_1", played_ms: 400, input_ms: 39000 / 24,
  });
  for (let i = 0; i < 2 * PROGRESS_REPORTS; i++) player.onWorklet(stats("r1", 9600 + i, 50000 + i));
  assert.equal(sent.length, 4, "nothing after the response was heard in full");
});

test("rule 6: the echo setting changes the pace at once; reports before the change count", () => {
  const { player, sent } = setup();
  player.started("r1");
  const w = reporter(player, "r1");
  for (let i = 0; i < 3; i++) w.report(); // 3 of the 5
  player.acknowledgeProgress(true);
  w.report(); // 4 >= 2: at once
  for (let i = 0; i < 2 * ECHO_PROGRESS_REPORTS; i++) w.report();
  assert.deepEqual(sent.map((e) => e.played_ms), [200, 300, 400]);
  player.acknowledgeProgress(false);
  for (let i = 0; i < 2 * PROGRESS_REPORTS; i++) w.report();
  assert.deepEqual(sent.map((e) => e.played_ms), [200, 300, 400, 650, 900]);
});

test("rule 6: an ACK names no input where its position is unknown", () => {
  const { player, sent } = setup((frame) => (frame === null ? null : 0));
  player.started("r1");
  player.interrupt("r1", "speech_started");
  player.onWorklet({ type: "cleared", rid: "r1", played: 480 });
  assert.deepEqual(sent, [{ type: "playback.ack", response_id: "r1", played_ms: 20 }]);
});

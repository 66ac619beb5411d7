// Unit tests of the page's playback queue (the same file the playback worklet imports).
import assert from "node:assert/strict";
import { test } from "node:test";

import { BoundedSet, PlaybackQueue } from "../../orchestrator/service/static/playback-core.js";

const QUANTUM = 128;

function tone(n, value = 1000) {
  return new Int16Array(n).fill(value);
}

function renderFrames(queue, frames) {
  const finished = [];
  const out = new Float32Array(QUANTUM);
  const all = [];
  for (let done = 0; done < frames; done += QUANTUM) {
    finished.push(...queue.render(out));
    all.push(...out);
  }
  return { finished, samples: all };
}

test("clear drops only that response's queued samples and reports the played count", () => {
  const q = new PlaybackQueue({ capacity: 10000 });
  q.push("resp_a", tone(2000, 100));
  q.push("resp_b", tone(1000, 200));
  renderFrames(q, 512);
  assert.equal(q.played("resp_a"), 512);
  const result = q.clear("resp_a");
  assert.deepEqual(result, { rid: "resp_a", played: 512, dropped: 1488 });
  assert.equal(q.pending("resp_a"), 0);
  assert.equal(q.pending("resp_b"), 1000);
  // What plays next is resp_b, at once.
  const { samples } = renderFrames(q, 128);
  assert.ok(samples.every((s) => s === 200 / 32768));
  assert.equal(q.played("resp_a"), 512);
  assert.equal(q.played("resp_b"), 128);
  assert.equal(q.pushed, q.played("resp_a") + q.played("resp_b") + q.length + result.dropped);
});

test("clear keeps a newer response's samples queued before the older one's (ring wrap)", () => {
  const q = new PlaybackQueue({ capacity: 1000 });
  q.push("resp_a", tone(700, 1));
  renderFrames(q, 640); // read pointer near the end: the next pushes wrap around
  q.push("resp_b", tone(300, 2));
  q.push("resp_a", tone(100, 3)); // interleaved (not the usual order, still handled)
  q.push("resp_b", tone(200, 4));
  const result = q.clear("resp_a");
  assert.equal(result.played, 640);
  assert.equal(result.dropped, 60 + 100);
  assert.equal(q.pending("resp_b"), 500);
  const { samples } = renderFrames(q, 512);
  const ints = samples.map((s) => Math.round(s * 32768));
  assert.deepEqual(ints.slice(0, 300), Array(300).fill(2));
  assert.deepEqual(ints.slice(300, 500), Array(200).fill(4));
  assert.deepEqual(ints.slice(500), Array(12).fill(0));
});

test("ACK count: played is the rendered frames of that response, finished reported once", () => {
  const q = new PlaybackQueue();
  q.push("resp_a", tone(1000));
  q.markDone("resp_a");
  let { finished } = renderFrames(q, 896);
  assert.deepEqual(finished, []);
  assert.equal(q.played("resp_a"), 896);
  ({ finished } = renderFrames(q, 256));
  assert.deepEqual(finished, [{ rid: "resp_a", played: 1000 }]);
  ({ finished } = renderFrames(q, 256));
  assert.deepEqual(finished, []);
  assert.equal(q.played("resp_a"), 1000); // silence is not counted
});

test("an interrupted response is never reported finished", () => {
  const q = new PlaybackQueue();
  q.push("resp_a", tone(1000));
  q.markDone("resp_a");
  renderFrames(q, 256);
  q.clear("resp_a");
  const { finished } = renderFrames(q, 1024);
  assert.deepEqual(finished, []);
  q.markDone("resp_a");
  assert.deepEqual(renderFrames(q, 128).finished, []);
});

test("late decodes: a delta of an interrupted id after the clear is discarded", () => {
  const q = new PlaybackQueue();
  q.push("resp_a", tone(500, 5));
  renderFrames(q, 128);
  q.clear("resp_a");
  q.push("resp_b", tone(300, 7));
  assert.equal(q.push("resp_a", tone(400, 5)), 0); // late, after the clear
  assert.equal(q.pending("resp_a"), 0);
  const { samples } = renderFrames(q, 512);
  const ints = samples.map((s) => Math.round(s * 32768));
  assert.ok(!ints.includes(5));
  assert.equal(ints.filter((s) => s === 7).length, 300);
  assert.equal(q.played("resp_a"), 128);
  assert.equal(q.played("resp_b"), 300);
});

test("a newer response's queued deltas survive the clear of the older one", () => {
  const q = new PlaybackQueue();
  q.push("resp_a", tone(1000, 1));
  q.push("resp_b", tone(256, 2));
  q.push("resp_c", tone(256, 3));
  q.clear("resp_a");
  q.push("resp_b", tone(256, 2));
  assert.equal(q.pending("resp_b"), 512);
  assert.equal(q.pending("resp_c"), 256);
  const { samples } = renderFrames(q, 1024);
  const ints = samples.map((s) => Math.round(s * 32768));
  // Order is kept: b, c, then b's later delta.
  assert.deepEqual(ints.slice(0, 256), Array(256).fill(2));
  assert.deepEqual(ints.slice(256, 512), Array(256).fill(3));
  assert.deepEqual(ints.slice(512, 768), Array(256).fill(2));
});

test("interrupted-id memory is bounded (the last 64 are kept)", () => {
  const q = new PlaybackQueue({ maxRemembered: 64 });
  for (let i = 0; i < 1000; i++) {
    q.push(`resp_${i}`, tone(10));
    q.clear(`resp_${i}`);
  }
  assert.equal(q.interrupted.size, 64);
  assert.ok(q.playedBy.size <= 64);
  assert.ok(q.isInterrupted("resp_999"));
  assert.ok(q.isInterrupted("resp_936"));
  assert.ok(!q.isInterrupted("resp_935"));
  assert.equal(q.push("resp_999", tone(10)), 0);
  assert.equal(q.length, 0);

  const set = new BoundedSet(3);
  for (const v of ["a", "b", "c", "a", "d"]) set.add(v);
  assert.deepEqual([...set.items], ["b", "c", "d"]);
});

// --- pause / resume (interruption policy, pause mode) ------------------------------------------

// Distinct non-zero samples, so that a lost, repeated or reordered sample shows, and silence
// (0) is never mistaken for audio.
function ramp(start, n) {
  const a = new Int16Array(n);
  for (let i = 0; i < n; i++) a[i] = ((start + i) % 30000) + 1;
  return a;
}

function ints(samples) {
  return samples.map((s) => Math.round(s * 32768));
}

test("pause: the played cursor stands still while paused and goes on from where it stopped", () => {
  const q = new PlaybackQueue();
  q.push("resp_a", ramp(0, 4000));
  renderFrames(q, 256);
  assert.equal(q.played("resp_a"), 256);
  assert.equal(q.pause("resp_a"), true);
  const held = renderFrames(q, 1024);
  assert.ok(held.samples.every((s) => s === 0), "pause mode: a paused response must render silence");
  assert.equal(q.played("resp_a"), 256, "pause mode: a paused cursor stands still (the ACK reports it)");
  assert.equal(q.pending("resp_a"), 4000 - 256, "pause mode: the paused response's queue is kept");
  assert.equal(q.resume("resp_a"), true);
  const after = ints(renderFrames(q, 128).samples);
  assert.deepEqual(after, [...ramp(256, 128)], "pause mode: resume plays on from the exact sample");
  assert.equal(q.played("resp_a"), 384);
});

test("pause: deltas keep queuing while paused and nothing is lost or repeated on resume", () => {
  const q = new PlaybackQueue();
  q.push("resp_a", ramp(0, 1000));
  const before = renderFrames(q, 384);
  q.pause("resp_a");
  q.push("resp_a", ramp(1000, 1000)); // the server keeps sending the paused response's audio
  q.push("resp_a", ramp(2000, 500));
  q.markDone("resp_a");
  const held = renderFrames(q, 2560);
  assert.deepEqual(held.finished, [], "pause mode: a paused response with audio left is not finished");
  assert.ok(held.samples.every((s) => s === 0));
  assert.equal(q.pending("resp_a"), 2500 - 384, "pause mode: the kept queue grows with new deltas");
  q.resume("resp_a");
  const after = renderFrames(q, 2560);
  const heard = [...ints(before.samples), ...ints(after.samples)].filter((s) => s !== 0);
  assert.deepEqual(heard, [...ramp(0, 2500)], "pause mode: every sample plays once, in order");
  assert.deepEqual(after.finished, [{ rid: "resp_a", played: 2500 }], "the full-length ACK comes once");
  assert.equal(q.pushed, q.played("resp_a"));
});

test("pause: a pause that comes before the response's first delta holds it from its start", () => {
  const q = new PlaybackQueue();
  assert.equal(q.pause("resp_b"), true);
  q.push("resp_b", ramp(0, 512));
  assert.ok(renderFrames(q, 512).samples.every((s) => s === 0));
  assert.equal(q.played("resp_b"), 0);
  q.resume("resp_b");
  assert.deepEqual(ints(renderFrames(q, 512).samples), [...ramp(0, 512)]);
});

test("pause: a clear while paused drops the kept queue, as a clear does today", () => {
  const q = new PlaybackQueue();
  q.push("resp_a", ramp(0, 1000));
  renderFrames(q, 256);
  q.pause("resp_a");
  q.push("resp_a", ramp(1000, 500));
  renderFrames(q, 256);
  const result = q.clear("resp_a");
  assert.deepEqual(result, { rid: "resp_a", played: 256, dropped: 1500 - 256 },
    "pause mode: the ACK after an interrupt reports the cursor where the pause stopped it");
  assert.equal(q.isPaused("resp_a"), false, "a clear ends the pause");
  assert.equal(q.push("resp_a", ramp(1500, 300)), 0, "late deltas after the clear are discarded");
  assert.equal(q.resume("resp_a"), false);
  // The next answer is not held behind the dropped one.
  q.push("resp_b", tone(256, 9));
  assert.deepEqual(ints(renderFrames(q, 256).samples), Array(256).fill(9));
  assert.equal(q.played("resp_a"), 256);
});

test("pause: a pause for an old response id (cleared or played to its end) does nothing", () => {
  const q = new PlaybackQueue();
  q.push("resp_a", tone(256, 1));
  q.markDone("resp_a");
  assert.deepEqual(renderFrames(q, 256).finished, [{ rid: "resp_a", played: 256 }]);
  q.push("resp_b", tone(500, 2));
  renderFrames(q, 128);
  q.clear("resp_b");
  q.push("resp_c", tone(1024, 3));
  assert.equal(q.pause("resp_a"), false, "a pause of a finished response is stale");
  assert.equal(q.pause("resp_b"), false, "a pause of a cleared response is stale");
  assert.equal(q.resume("resp_x"), false, "a resume of a response never paused does nothing");
  assert.deepEqual(ints(renderFrames(q, 512).samples), Array(512).fill(3),
    "a stale pause must not silence the response playing now");
  assert.equal(q.played("resp_a"), 256);
  assert.equal(q.played("resp_c"), 512);
});

test("pause: paused-id memory is bounded", () => {
  const q = new PlaybackQueue({ maxRemembered: 64 });
  for (let i = 0; i < 1000; i++) q.pause(`resp_${i}`);
  assert.equal(q.paused.size, 64);
  assert.ok(q.isPaused("resp_999"));
  assert.ok(q.finished.size <= 64);
});

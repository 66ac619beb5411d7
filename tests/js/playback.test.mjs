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

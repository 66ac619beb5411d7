// Unit tests of the timeline's view (timeline.js) over a fake canvas: what it listens to, when it
// redraws, and the list that stands for the canvas to a screen reader.
import assert from "node:assert/strict";
import { test } from "node:test";

import { Emitter } from "../../orchestrator/service/static/emitter.js";
import { Timeline, WINDOW_MS } from "../../orchestrator/service/static/timeline.js";

function setup() {
  const clock = { t: 1000 };
  const calls = [];
  // A 2D context that takes every call and property and records the texts drawn.
  const ctx = new Proxy({}, {
    get: (target, name) => (name === "measureText" ? (s) => ({ width: s.length * 6 })
      : name === "fillText" ? (s) => calls.push(s) : target[name] ?? (() => {})),
    set: (target, name, value) => { target[name] = value; return true; },
  });
  const handlers = {};
  const canvas = {
    clientWidth: 800, width: 0, height: 0,
    getContext: () => ctx,
    addEventListener: (type, f) => { handlers[type] = f; },
  };
  const doc = { createElement: () => ({ textContent: "" }) };
  const list = { ownerDocument: doc, items: [], replaceChildren(...els) { this.items = els.map((e) => e.textContent); } };
  const frames = [];
  const emitter = new Emitter((e) => { throw e; });
  const timeline = new Timeline({ canvas, list, emitter, now: () => clock.t, frame: (f) => frames.push(f) });
  return { timeline, emitter, clock, calls, list, frames, handlers };
}

test("rule 1: redrawn every frame while a session is live, still once it is over", () => {
  const { timeline, emitter, frames } = setup();
  assert.equal(frames.length, 0, "nothing runs before a session");
  emitter.emit("session-start");
  frames.shift()();
  frames.shift()();
  assert.equal(frames.length, 1, "each frame asks for the next");
  timeline.stop();
  frames.shift()();
  assert.equal(frames.length, 0, "the connection is over: no more frames");
});

test("rule 3: the list says what the canvas shows, from the page's emitter", () => {
  const { timeline, emitter, clock, calls, list } = setup();
  emitter.emit("session-start");
  for (let k = 0; k < 50; k++) emitter.emit("mic", { samples: 480 }); // 1 s of mic by t=1000
  emitter.emit("wire", { dir: "<", event: { type: "input_audio_buffer.speech_started", audio_start_ms: 400 } });
  emitter.emit("wire", { dir: "~", event: { type: "input_audio_buffer.speech_stopped", audio_end_ms: 900 } });
  clock.t = 1600;
  emitter.emit("worklet", { type: "stats", rid: "r1", played: 2400 });
  emitter.emit("interrupt", { rid: "r1", trigger: "speech_started" });
  clock.t = 1700;
  emitter.emit("worklet", { type: "cleared", rid: "r1", played: 4800 });
  timeline.draw();
  assert.deepEqual(list.items, [
    "user speech from 0.400 s, ongoing", // "~" (only logged) is not acted on
    "assistant audio from 1.500 s to 1.700 s",
    "assistant cut at 1.700 s: cut at 0.20 s of the answer",
  ]);
  assert.ok(calls.includes("✂ cut at 0.20 s of the answer"), "the cut's label is drawn");
  assert.ok(calls.includes("user") && calls.includes("assistant"), "both lanes are labelled");
});

test("rule 2: the wheel scrolls back within the history, a double click comes back to now", () => {
  const { timeline, handlers, calls } = setup();
  handlers.wheel({ deltaY: 1e9, preventDefault() {} });
  assert.equal(timeline.offset, timeline.model.historyMs - WINDOW_MS);
  assert.ok(calls.some((s) => s.includes("s back (double-click: now)")));
  handlers.wheel({ deltaY: -1e9, preventDefault() {} });
  assert.equal(timeline.offset, 0);
  handlers.wheel({ deltaY: 100, preventDefault() {} });
  handlers.dblclick();
  assert.equal(timeline.offset, 0);
});

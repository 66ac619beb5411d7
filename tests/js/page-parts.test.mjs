// Unit tests of the page's small pure parts: emitter.js, pcm.js, event-summary.js.
import assert from "node:assert/strict";
import { test } from "node:test";

import { Emitter } from "../../orchestrator/service/static/emitter.js";
import { isAudioDelta, logLine, responseId, summarize } from "../../orchestrator/service/static/event-summary.js";
import { b64ToInt16, bytesToB64 } from "../../orchestrator/service/static/pcm.js";

test("emitter rule 1: listeners run synchronously, in the order they subscribed", () => {
  const e = new Emitter();
  const seen = [];
  e.on("x", (d) => seen.push(["a", d.n]));
  const off = e.on("x", (d) => seen.push(["b", d.n]));
  e.emit("x", { n: 1 });
  off();
  e.emit("x", { n: 2 });
  e.emit("y");
  assert.deepEqual(seen, [["a", 1], ["b", 1], ["a", 2]]);
});

test("emitter rule 2: a listener that throws is reported and the others still run", () => {
  const reported = [];
  const e = new Emitter((error) => reported.push(error.message));
  const seen = [];
  e.on("x", () => { throw new Error("broken observer"); });
  e.on("x", () => seen.push("after"));
  e.emit("x");
  assert.deepEqual(reported, ["broken observer"]);
  assert.deepEqual(seen, ["after"]);
});

test("pcm: samples survive the round trip through base64; a half sample is dropped", () => {
  const samples = Int16Array.from([0, 1, -1, 32767, -32768, 1234]);
  assert.deepEqual(b64ToInt16(bytesToB64(samples.buffer)), samples);
  assert.deepEqual(b64ToInt16(btoa("\x01\x00\x02")), Int16Array.from([1]));
  // Longer than one slice of String.fromCharCode.
  const long = new Int16Array(0x9000).map((_, i) => i);
  assert.deepEqual(b64ToInt16(bytesToB64(long.buffer)), long);
});

test("summary: the response an event is about, from response_id or its response", () => {
  assert.equal(responseId({ response_id: "r1" }), "r1");
  assert.equal(responseId({ response: { id: "r2" } }), "r2");
  assert.equal(responseId({ type: "x" }), undefined);
});

test("summary: what the record keeps of an event", () => {
  const td = { type: "semantic_vad", eagerness: "high" };
  assert.deepEqual(
    summarize("<", { type: "session.updated", server_event_seq: 3, session: { audio: { input: { turn_detection: td } } } }, 7),
    { t: 7, dir: "<", type: "session.updated", seq: 3, turn_detection: td },
  );
  assert.deepEqual(
    summarize("<", {
      type: "response.done",
      response: { id: "r1", status: "cancelled", status_details: { type: "cancelled", reason: "turn_detected" } },
    }, 1),
    { t: 1, dir: "<", type: "response.done", response_id: "r1", status: "cancelled", reason: "turn_detected" },
  );
  assert.deepEqual(summarize(">", { type: "playback.ack", response_id: "r1" }, 2),
    { t: 2, dir: ">", type: "playback.ack", response_id: "r1" });
});

test("summary: the log panel leaves out audio deltas and spells out overlap decisions", () => {
  const delta = { type: "response.output_audio.delta", response_id: "r1" };
  assert.ok(isAudioDelta(delta));
  assert.ok(!isAudioDelta({ type: "response.output_audio_transcript.delta" }));
  assert.equal(logLine(summarize("<", delta, 1), delta), null);
  const decision = {
    type: "overlap.decision", response_id: "resp_1", decision: "resume", reason: "backchannel",
    speech_ms: 240, transcript: "yeah",
  };
  assert.equal(logLine(summarize("<", decision, 1500), decision),
    '1.500 < overlap.decision resp_1 resume reason=backchannel speech_ms=240 heard="yeah"');
  const sent = { type: "session.update" };
  assert.equal(logLine(summarize(">", sent, 12), sent), "0.012 > session.update");
});

// Unit tests of the turn-taking timeline's model (timeline-model.js): what a developer reads off
// the two lanes after a barge-in, a backchannel, a turn, and that the history stays bounded.
import assert from "node:assert/strict";
import { test } from "node:test";

import { describe, RATE, RECENT_RESPONSES, TimelineModel } from "../../orchestrator/service/static/timeline-model.js";

// A page whose clock the test moves; the microphone sends 20 ms chunks in real time from t=0.
function setup(options) {
  const clock = { t: 0 };
  const model = new TimelineModel(() => clock.t, options);
  const chunk = RATE / 50;
  // Advances the clock to `t`, sending the microphone's audio meanwhile (rule 1).
  let sentTo = 0;
  const to = (t) => {
    while (sentTo + 20 <= t) {
      sentTo += 20;
      clock.t = sentTo;
      model.sent(chunk);
    }
    clock.t = t;
  };
  return { model, clock, to };
}

const spans = (model, lane) => model.items.filter((i) => i.lane === lane && i.end !== i.start);
const marks = (model, lane) => model.items.filter((i) => i.lane === lane && i.end === i.start);

// A question, its end of turn and the answer playing from t=3000 (its first report at 3050).
function answerPlaying({ model, to }) {
  model.server({ type: "session.updated", session: { audio: { input: { turn_detection: { type: "server_vad", silence_duration_ms: 500 } } } } });
  to(600);
  model.server({ type: "input_audio_buffer.speech_started", audio_start_ms: 500 });
  to(2600);
  model.server({ type: "input_audio_buffer.speech_stopped", audio_end_ms: 2000 });
  model.server({ type: "input_audio_buffer.committed" });
  model.server({ type: "response.created", response: { id: "r1" } });
  model.server({ type: "response.output_item.added", response_id: "r1", item: { id: "item_a" } });
  to(3050);
  model.worklet({ type: "stats", rid: "r1", played: 1200, paused: false }); // 50 ms played
}

test("a turn: speech where the VAD heard it, the end of turn with its cause, the answer's latency from it", () => {
  const s = setup();
  answerPlaying(s);
  const { model } = s;
  const [speech] = spans(model, "user");
  assert.deepEqual([speech.kind, speech.start, speech.end], ["speech", 500, 2000]);
  const [eot] = marks(model, "user");
  assert.equal(eot.kind, "end-of-turn");
  assert.equal(eot.start, 2600);
  assert.equal(eot.label, "end of turn: silence 500 ms");
  const audio = model.items.find((i) => i.kind === "audio");
  assert.deepEqual([audio.start, audio.end, audio.label], [3000, null, "answer +1000 ms"]);
});

test("a barge-in (immediate mode): an overlap span, the answer's audio ending at the cut, a cut mark where the playback stopped", () => {
  const s = setup();
  answerPlaying(s);
  const { model, to } = s;
  to(5300);
  model.server({ type: "input_audio_buffer.speech_started", audio_start_ms: 5100 });
  const overlap = model.items.find((i) => i.lane === "user" && i.start === 5100);
  assert.equal(overlap.kind, "overlap", "speech over the playing answer is an overlap at once");
  model.interrupt("r1", "speech_started"); // the page cuts it at onset
  assert.equal(overlap.kind, "barge-in");
  to(5340); // the worklet went silent and says so
  model.worklet({ type: "cleared", rid: "r1", played: 2340 * 24, dropped: 1000 });
  model.worklet({ type: "stats", rid: "r1", played: 2340 * 24 }); // a late report changes nothing
  const audio = model.items.find((i) => i.kind === "audio");
  assert.equal(audio.end, 5340, "the answer's audio ends where the playback stopped");
  const cut = model.items.find((i) => i.kind === "cut");
  assert.deepEqual([cut.lane, cut.start, cut.rid], ["assistant", 5340, "r1"]);
  assert.equal(cut.label, "cut at 2.34 s of the answer");
  assert.ok(overlap.start < cut.start && overlap.end === null, "the user's speech spans the cut");
  model.server({ type: "conversation.item.truncated", item_id: "item_a", audio_end_ms: 2340 });
  assert.equal(cut.label, "cut at 2.34 s of the answer, server kept 2340 ms");
  to(6500);
  model.server({ type: "input_audio_buffer.speech_stopped", audio_end_ms: 6000 });
  assert.equal(overlap.end, 6000);
  assert.equal(model.items.filter((i) => i.kind === "audio" && i.end === null).length, 0);
});

test("pause mode: a backchannel pauses the answer and resumes it, drawn as a backchannel with its decision", () => {
  const s = setup();
  answerPlaying(s);
  const { model, to } = s;
  to(5300);
  model.server({ type: "input_audio_buffer.speech_started", audio_start_ms: 5100 });
  model.server({ type: "output_audio_buffer.paused", response_id: "r1" });
  to(5320);
  model.worklet({ type: "paused", rid: "r1", applied: true, played: 2300 * 24 });
  to(5800);
  model.server({ type: "input_audio_buffer.speech_stopped", audio_end_ms: 5400 });
  model.server({ type: "overlap.decision", response_id: "r1", decision: "resume", reason: "backchannel", speech_ms: 300 });
  to(5830);
  model.worklet({ type: "resumed", rid: "r1", applied: true, played: 2300 * 24 });
  const user = model.items.find((i) => i.lane === "user" && i.start === 5100);
  assert.deepEqual([user.kind, user.end], ["backchannel", 5400]);
  const decision = model.items.find((i) => i.kind === "decision");
  assert.equal(decision.label, "resume: backchannel, 300 ms speech +700 ms");
  const assistant = model.items.filter((i) => i.lane === "assistant").map((i) => [i.kind, i.start, i.end]);
  assert.deepEqual(assistant, [["audio", 3000, 5320], ["paused", 5320, 5830], ["audio", 5830, null]]);
  assert.equal(model.items.filter((i) => i.kind === "cut").length, 0, "a backchannel cuts nothing");
  to(9000);
  model.worklet({ type: "finished", rid: "r1", played: 6000 * 24 });
  assert.equal(model.items.find((i) => i.kind === "finished").label, "heard in full, 6.00 s");
  assert.equal(model.items.filter((i) => i.end === null).length, 0);
});

test("pause mode: speech that stops and starts again within one overlap (its item) is one span", () => {
  const s = setup();
  answerPlaying(s);
  const { model, to } = s;
  to(5300);
  model.server({ type: "input_audio_buffer.speech_started", audio_start_ms: 5100, item_id: "item_2" });
  to(5320);
  model.worklet({ type: "paused", rid: "r1", applied: true, played: 2300 * 24 });
  to(5600);
  model.server({ type: "input_audio_buffer.speech_stopped", audio_end_ms: 5500, item_id: "item_2" });
  to(5900);
  model.server({ type: "input_audio_buffer.speech_started", audio_start_ms: 5800, item_id: "item_2" });
  model.server({ type: "overlap.decision", response_id: "r1", decision: "interrupt", reason: "speech", speech_ms: 500 });
  const user = model.items.filter((i) => i.lane === "user" && i.start > 5000 && i.end !== i.start);
  assert.deepEqual(user.map((i) => [i.kind, i.start, i.end]), [["barge-in", 5100, null]]);
});

test("pause mode: an interrupt decision makes the overlap a barge-in and the cut comes at the clear", () => {
  const s = setup();
  answerPlaying(s);
  const { model, to } = s;
  to(5300);
  model.server({ type: "input_audio_buffer.speech_started", audio_start_ms: 5100 });
  to(5320);
  model.worklet({ type: "paused", rid: "r1", applied: true, played: 2300 * 24 });
  to(5700);
  model.server({ type: "overlap.decision", response_id: "r1", decision: "interrupt", reason: "speech", speech_ms: 420 });
  model.server({ type: "output_audio_buffer.cleared", response_id: "r1" });
  to(5720);
  model.worklet({ type: "cleared", rid: "r1", played: 2300 * 24 });
  const user = model.items.find((i) => i.lane === "user" && i.start === 5100);
  assert.equal(user.kind, "barge-in");
  assert.equal(model.items.find((i) => i.kind === "decision").label, "interrupt: speech, 420 ms speech +600 ms");
  const assistant = model.items.filter((i) => i.lane === "assistant").map((i) => [i.kind, i.start, i.end]);
  assert.deepEqual(assistant, [["audio", 3000, 5320], ["paused", 5320, 5720], ["cut", 5720, 5720]]);
});

test("an answer that starves (its audio ran out before its end) shows the gap; speech in it still overlaps", () => {
  const s = setup();
  answerPlaying(s); // first report at 3050: 50 ms played
  const { model, to } = s;
  to(3100);
  model.worklet({ type: "stats", rid: "r1", played: 2400 });
  to(3150);
  model.worklet({ type: "stats", rid: "r1", played: 2400 }); // stood still: nothing left to play
  to(3200);
  model.worklet({ type: "stats", rid: "r1", played: 2400 });
  to(3500);
  model.server({ type: "input_audio_buffer.speech_started", audio_start_ms: 3450 });
  to(3600);
  model.worklet({ type: "stats", rid: "r1", played: 3600 }); // moved again: 50 ms played since
  const audio = model.items.filter((i) => i.kind === "audio").map((i) => [i.start, i.end]);
  assert.deepEqual(audio, [[3000, 3100], [3550, null]]);
  assert.equal(model.items.find((i) => i.start === 3450).kind, "overlap");
});

// Reports as the worklet makes them: the context frame (a sample at RATE) of frame 0 is page
// time 1000, and a report is made every 50 ms (1200 frames).
const frameAt = (t) => (t - 1000) * RATE / 1000;

test("rule 6: a report the page took late is drawn where the worklet made it", () => {
  const s = setup();
  const { model, to } = s;
  to(3050);
  model.worklet({ type: "stats", rid: "r1", played: 1200, frame: frameAt(3050) });
  to(3100);
  model.worklet({ type: "stats", rid: "r1", played: 2400, frame: frameAt(3100) });
  to(3400); // the page was busy: the next two come 250 ms late
  model.worklet({ type: "stats", rid: "r1", played: 3600, frame: frameAt(3150) });
  model.worklet({ type: "cleared", rid: "r1", played: 4000, frame: frameAt(3167) });
  const assistant = model.items.filter((i) => i.lane === "assistant").map((i) => [i.kind, i.start, Math.round(i.end)]);
  assert.deepEqual(assistant, [["audio", 3000, 3167], ["cut", 3167, 3167]]);
});

test("rule 6: an answer that ran dry between two reports is drawn as long as it was heard", () => {
  const s = setup();
  const { model, to } = s;
  let played = 0;
  for (let t = 3050; t <= 3500; t += 50) {
    to(t);
    played += t === 3200 ? 480 : 1200; // 20 of the 50 ms between 3150 and 3200 were heard
    model.worklet({ type: "stats", rid: "r1", played, frame: frameAt(t) });
  }
  const audio = model.items.filter((i) => i.kind === "audio").map((i) => [i.start, i.end]);
  assert.deepEqual(audio, [[3000, 3170], [3200, null]]);
  const heard = 170 + (model.now() - 3200);
  assert.equal(heard, played * 1000 / RATE);
});

test("speech with no answer playing is a turn, not an overlap; a new session restarts the input clock", () => {
  const s = setup();
  const { model, to } = s;
  to(10000);
  model.newSession();
  to(10500);
  model.server({ type: "input_audio_buffer.speech_started", audio_start_ms: 100 });
  const [speech] = model.items;
  assert.deepEqual([speech.kind, speech.start], ["speech", 10100]);
  model.server({ type: "session.updated", session: { audio: { input: { turn_detection: { type: "semantic_vad" } } } } });
  model.server({ type: "input_audio_buffer.committed" });
  assert.equal(model.items[1].label, "end of turn: model");
  assert.equal(speech.end, 10500, "a commit ends the speech it takes");
});

test("bounds: history older than historyMs goes, and at most maxItems are kept", () => {
  const s = setup({ historyMs: 10000, maxItems: 5 });
  const { model, to } = s;
  for (let k = 0; k < 4; k++) {
    to(k * 1000 + 500);
    model.server({ type: "input_audio_buffer.speech_started", audio_start_ms: k * 1000 + 100 });
    to(k * 1000 + 900);
    model.server({ type: "input_audio_buffer.speech_stopped", audio_end_ms: k * 1000 + 400 });
    model.server({ type: "input_audio_buffer.committed" });
  }
  assert.equal(model.items.length, 5, "8 items made, the newest 5 kept");
  assert.equal(model.items[0].kind, "end-of-turn");
  const v = model.version;
  to(20000);
  model.server({ type: "input_audio_buffer.speech_started", audio_start_ms: 19900 });
  assert.deepEqual(model.items.map((i) => [i.kind, i.start]), [["speech", 19900]],
    "what ended over historyMs ago is gone");
  assert.ok(model.version > v);
});

test("each item in words, for the list a screen reader reads in the canvas's place", () => {
  assert.equal(describe({ lane: "user", kind: "barge-in", start: 12346, end: 13500, label: "" }),
    "user barge-in from 12.346 s to 13.500 s");
  assert.equal(describe({ lane: "user", kind: "speech", start: 500, end: null, label: "" }),
    "user speech from 0.500 s, ongoing");
  assert.equal(describe({ lane: "assistant", kind: "cut", start: 15120, end: 15120, label: "cut at 2.34 s of the answer" }),
    "assistant cut at 15.120 s: cut at 2.34 s of the answer");
});

test("bounds: a long session keeps which response the newest items belong to, not every one", () => {
  // Rule 5: was one itemRid entry per response for the whole session.
  const { model } = setup();
  for (let n = 0; n < 1000; n += 1) {
    model.server({ type: "response.created", response: { id: `r${n}` } });
    model.server({ type: "response.output_item.added", response_id: `r${n}`, item: { id: `item_${n}` } });
  }
  assert.equal(model.itemRid.size, RECENT_RESPONSES);
  assert.ok(model.responses.size <= RECENT_RESPONSES);
  assert.equal(model.itemRid.get("item_999"), "r999");
  assert.equal(model.itemRid.get("item_0"), undefined);
});

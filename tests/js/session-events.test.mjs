// Unit tests of the page's handler per server event (session-events.js), with fake parts.
import assert from "node:assert/strict";
import { test } from "node:test";

import { SERVER_EVENTS, dispatch } from "../../orchestrator/service/static/session-events.js";
import { Settings } from "../../orchestrator/service/static/settings.js";

// A fake player and view that record each call as [name, ...args].
function setup() {
  const calls = [];
  const recorder = (target, names) => {
    for (const name of names) target[name] = (...args) => { calls.push([name, ...args]); };
    return target;
  };
  const player = recorder({ current: null, interrupted: new Set(), heard: new Set() },
    ["started", "item", "push", "pause", "resume", "done", "acknowledgeProgress"]);
  player.interrupt = (rid, trigger) => { calls.push(["interrupt", rid, trigger]); player.interrupted.add(rid); };
  player.isInterrupted = (rid) => player.interrupted.has(rid);
  player.heardInFull = (rid) => player.heard.has(rid);
  player.started = (rid) => { calls.push(["started", rid]); player.current = rid; };
  const view = recorder({}, ["status", "transcript", "cut", "decision", "showSettings"]);
  return { page: { settings: new Settings(), player, view }, calls };
}

const td = (extra = {}) => ({ audio: { input: { turn_detection: { type: "server_vad", ...extra } } } });

test("rule 1: session.created and session.updated show and hold the server's settings", () => {
  for (const type of ["session.created", "session.updated"]) {
    const { page, calls } = setup();
    dispatch(page, { type, session: td({ interruption: { mode: "pause" } }) });
    assert.equal(page.settings.interruption, "pause");
    assert.equal(calls.length, 2);
    assert.equal(calls[0][0], "showSettings");
    assert.equal(calls[0][1].interruption, "pause");
    assert.deepEqual(calls[1], ["acknowledgeProgress", false]);
  }
});

test("rule 1: with echo cancellation held, the player acknowledges as it plays", () => {
  const { page, calls } = setup();
  const session = td();
  session.audio.input.echo_cancellation = { type: "server" };
  dispatch(page, { type: "session.updated", session });
  assert.deepEqual(calls.at(-1), ["acknowledgeProgress", true]);
  dispatch(page, { type: "session.updated", session: td() });
  assert.deepEqual(calls.at(-1), ["acknowledgeProgress", false]);
});

test("rule 2: in immediate mode speech cuts off the response playing", () => {
  const { page, calls } = setup();
  dispatch(page, { type: "response.created", response: { id: "r1" } });
  dispatch(page, { type: "input_audio_buffer.speech_started" });
  assert.deepEqual(calls, [
    ["started", "r1"], ["status", "responseState", "in_progress"],
    ["status", "inputState", "speaking"], ["interrupt", "r1", "speech_started"],
  ]);
});

test("rule 2: speech leaves alone a response heard in full, or with none playing", () => {
  const { page, calls } = setup();
  dispatch(page, { type: "input_audio_buffer.speech_started" });
  page.player.current = "r1";
  page.player.heard.add("r1");
  dispatch(page, { type: "input_audio_buffer.speech_started" });
  assert.ok(!calls.some(([name]) => name === "interrupt"), calls);
});

test("rule 2: in pause mode, or without interrupt_response, speech waits for the server", () => {
  for (const extra of [{ interruption: { mode: "pause" } }, { interrupt_response: false }]) {
    const { page, calls } = setup();
    dispatch(page, { type: "session.updated", session: td(extra) });
    dispatch(page, { type: "response.created", response: { id: "r1" } });
    dispatch(page, { type: "input_audio_buffer.speech_started" });
    assert.ok(!calls.some(([name]) => name === "interrupt"), calls);
    dispatch(page, { type: "output_audio_buffer.paused", response_id: "r1" });
    dispatch(page, { type: "output_audio_buffer.resumed", response_id: "r1" });
    assert.deepEqual(calls.slice(-2), [["pause", "r1"], ["resume", "r1"]]);
  }
});

test("rule 3: a cleared or cancelled response is cut off and struck through", () => {
  const { page, calls } = setup();
  dispatch(page, { type: "output_audio_buffer.cleared", response_id: "r1" });
  dispatch(page, { type: "response.done", response: { id: "r2", status: "cancelled" } });
  assert.deepEqual(calls, [
    ["interrupt", "r1", "output_audio_buffer.cleared"], ["cut", "r1"],
    ["status", "responseState", "cancelled"], ["interrupt", "r2", "response.done"], ["cut", "r2"],
  ]);
});

test("rule 3: the transcript of a cut-off response stops; the user's goes on", () => {
  const { page, calls } = setup();
  dispatch(page, { type: "response.output_audio_transcript.delta", response_id: "r1", delta: "Once" });
  dispatch(page, { type: "output_audio_buffer.cleared", response_id: "r1" });
  dispatch(page, { type: "response.output_audio_transcript.delta", response_id: "r1", delta: " upon" });
  dispatch(page, { type: "response.output_text.delta", response_id: "r2", delta: "Hi" });
  dispatch(page, { type: "conversation.item.input_audio_transcription.delta", item_id: "i1", delta: "stop" });
  dispatch(page, {
    type: "conversation.item.input_audio_transcription.completed", item_id: "i1", transcript: "Stop.",
  });
  assert.deepEqual(calls.filter(([name]) => name === "transcript"), [
    ["transcript", "r1", "assistant", "Once"], ["transcript", "r2", "assistant", "Hi"],
    ["transcript", "i1", "user", "stop"], ["transcript", "i1", "user", "Stop.", true],
  ]);
});

test("the audio, its item and a completed response go to the player", () => {
  const { page, calls } = setup();
  dispatch(page, { type: "response.output_item.added", response_id: "r1", item: { id: "i9" } });
  dispatch(page, { type: "response.output_audio.delta", response_id: "r1", item_id: "i9", delta: "AAA=" });
  dispatch(page, { type: "response.done", response: { id: "r1", status: "completed" } });
  dispatch(page, { type: "overlap.decision", response_id: "r1", decision: "resume" });
  dispatch(page, { type: "input_audio_buffer.speech_stopped" });
  dispatch(page, { type: "input_audio_buffer.committed" });
  assert.deepEqual(calls, [
    ["item", "r1", "i9"], ["push", "r1", "i9", "AAA="],
    ["status", "responseState", "completed"], ["done", "r1"],
    ["decision", { type: "overlap.decision", response_id: "r1", decision: "resume" }],
    ["status", "inputState", "silent"], ["status", "inputState", "committed"],
  ]);
});

test("a reply cut short by the server's limits (incomplete) or failed still plays to its end", () => {
  // Was: only "completed" told the player, so an incomplete reply never finished playing
  // and its final ACK never went out.
  for (const status of ["incomplete", "failed"]) {
    const { page, calls } = setup();
    dispatch(page, { type: "response.done", response: { id: "r1", status } });
    assert.deepEqual(calls, [["status", "responseState", status], ["done", "r1"]]);
  }
});

test("rule 5: server_restarting is shown as the session moving, not as a failure", (t) => {
  const warned = t.mock.method(console, "warn", () => {});
  const { page, calls } = setup();
  dispatch(page, { type: "error", error: { type: "server_error", code: "server_restarting", message: "…" } });
  assert.deepEqual(calls, [["status", "state", "server restarting: moving the session…"]]);
  assert.equal(warned.mock.callCount(), 0);
  // Any other error is still warned of.
  dispatch(page, { type: "error", error: { type: "server_error", code: "server_shutting_down" } });
  assert.equal(warned.mock.callCount(), 1);
  assert.equal(calls.length, 1);
});

test("rule 4: an event type not in the table does nothing", () => {
  const { page, calls } = setup();
  dispatch(page, { type: "playback.acknowledged", response_id: "r1" });
  dispatch(page, { type: "rate_limits.updated" });
  dispatch(page, { type: "toString" }); // not a handler, though every object has it
  assert.deepEqual(calls, []);
  assert.ok(Object.isFrozen(SERVER_EVENTS));
});

// Unit tests of the page's session settings (settings.js).
import assert from "node:assert/strict";
import { test } from "node:test";

import { Settings, heldSettings, sessionUpdate } from "../../orchestrator/service/static/settings.js";

const FORM = {
  interrupt: true, interruption: "immediate", minSpeech: "400", resumeAfter: "1500",
  turnType: "server_vad", eagerness: "auto", threshold: "0.5", silence: "500", preemptive: false,
  echo: false, noise: "", voice: "joe",
};

const session = (td) => ({ audio: { input: { turn_detection: td } } });

test("rule 1: the page holds the mode the server echoes; none echoed is immediate", () => {
  const s = new Settings();
  s.hold(session({ type: "server_vad", interruption: { mode: "pause", min_speech_ms: 300 } }));
  assert.equal(s.interruption, "pause");
  s.hold(session({ type: "server_vad" }));
  assert.equal(s.interruption, "immediate");
  s.hold(undefined);
  assert.equal(s.interruption, "immediate");
  assert.equal(s.interruptResponse, true, "no turn detection: interrupt_response as default");
  const held = heldSettings(session({ type: "semantic_vad", interruption: { mode: "pause" } }));
  assert.deepEqual(held.policy, { mode: "pause" });
  assert.equal(held.turnDetection.type, "semantic_vad");
});

test("rule 2: speech interrupts at once only with interrupt_response and the immediate mode", () => {
  const s = new Settings();
  assert.ok(s.interruptsAtOnce());
  s.hold(session({ type: "server_vad", interrupt_response: false }));
  assert.ok(!s.interruptsAtOnce());
  s.hold(session({ type: "server_vad", interruption: { mode: "pause" } }));
  assert.ok(!s.interruptsAtOnce());
  s.hold(session({ type: "server_vad", interrupt_response: true, interruption: { mode: "immediate" } }));
  assert.ok(s.interruptsAtOnce());
});

test("rule 2: until the server answers, the form's interrupt box counts", () => {
  const s = new Settings();
  const event = s.request({ ...FORM, interrupt: false });
  assert.equal(s.interruptResponse, false);
  assert.equal(event.session.audio.input.turn_detection.interrupt_response, false);
});

test("rule 3: server_vad sends its silence knobs, semantic_vad its eagerness, never both", () => {
  const vad = sessionUpdate(FORM).session.audio.input.turn_detection;
  assert.deepEqual(vad, {
    type: "server_vad", interrupt_response: true, interruption: { mode: "immediate" },
    preemptive_response: false, threshold: 0.5, silence_duration_ms: 500,
  });
  const semantic = sessionUpdate({ ...FORM, turnType: "semantic_vad", eagerness: "high", preemptive: true })
    .session.audio.input.turn_detection;
  assert.deepEqual(semantic, {
    type: "semantic_vad", interrupt_response: true, interruption: { mode: "immediate" },
    preemptive_response: true, eagerness: "high",
  });
});

test("rule 4: the pause knobs go out only in pause mode", () => {
  const pause = sessionUpdate({ ...FORM, interruption: "pause" }).session.audio.input.turn_detection;
  assert.deepEqual(pause.interruption, { mode: "pause", min_speech_ms: 400, resume_after_ms: 1500 });
  const event = sessionUpdate(FORM);
  assert.deepEqual(event.session.audio.input.turn_detection.interruption, { mode: "immediate" });
  assert.equal(event.type, "session.update");
  assert.deepEqual(event.session.output_modalities, ["audio"]);
  assert.deepEqual(event.session.audio.input.transcription, { model: "whisper" });
});

test("rule 5: echo cancellation and noise reduction go out on or off, and show as held", () => {
  const off = sessionUpdate(FORM).session.audio.input;
  assert.equal(off.echo_cancellation, null);
  assert.equal(off.noise_reduction, null);
  const on = sessionUpdate({ ...FORM, echo: true, noise: "far_field" }).session.audio.input;
  assert.deepEqual(on.echo_cancellation, { type: "server" });
  assert.deepEqual(on.noise_reduction, { type: "far_field" });
  const held = heldSettings({
    audio: { input: { echo_cancellation: { type: "server" }, noise_reduction: { type: "near_field" } } },
  });
  assert.equal(held.echo, true);
  assert.equal(held.noise, "near_field");
  const none = heldSettings({ audio: { input: { noise_reduction: null } } });
  assert.equal(none.echo, false);
  assert.equal(none.noise, "");
});

test("rule 6: the voice goes out as the output's voice and shows as held", () => {
  assert.deepEqual(sessionUpdate({ ...FORM, voice: "slt" }).session.audio.output, { voice: "slt" });
  assert.equal(heldSettings({ audio: { input: {}, output: { voice: "rms" } } }).voice, "rms");
  assert.equal(heldSettings({ audio: { input: {} } }).voice, "");
});

// The checker that tests/e2e/test_wire_parity_e2e.py runs the e2e suite's server events
// through (sdk_server_events.mjs): it passes the shapes the server sends, and fails each way a
// client of the JS Agents SDK would be hurt.
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import path from "node:path";
import { test } from "node:test";

import { SDK_DIR, checkAll, loadChecker } from "./sdk_server_events.mjs";

// `make test` installs the SDK (npm ci in tests/clients/js): a missing one is a failure.
const installed = existsSync(path.join(SDK_DIR, "dist", "openaiRealtimeEvents.mjs"));
assert.ok(installed, "tests/clients/js/node_modules is not installed: run `make test`");
const check = await loadChecker();

const userAudio = (content) => ({
  type: "conversation.item.added",
  event_id: "event_5",
  server_event_seq: 5,
  previous_item_id: null,
  item: { id: "item_1", object: "realtime.item", type: "message", status: "completed", role: "user", content },
});

const GOOD = [
  userAudio([{ type: "input_audio", transcript: null }]),
  {
    type: "response.done",
    event_id: "event_9",
    response: {
      id: "resp_1",
      object: "realtime.response",
      status: "cancelled",
      status_details: { type: "cancelled", reason: "turn_detected", error: null },
      output: [],
      conversation_id: "conv_1",
      output_modalities: ["audio"],
      max_output_tokens: "inf",
      audio: { output: { format: { type: "audio/pcm", rate: 24000 }, voice: "alloy" } },
      usage: { total_tokens: 0, input_tokens: 0, output_tokens: 0, input_token_details: {}, output_token_details: {} },
      metadata: null,
    },
  },
  {
    type: "conversation.item.input_audio_transcription.failed",
    event_id: "event_6",
    item_id: "item_1",
    content_index: 0,
    error: { type: "transcription_error", code: "transcription_failed", message: "no speech" },
  },
  { type: "output_audio_buffer.cleared", event_id: "event_7", response_id: "resp_1" },
  {
    type: "error",
    event_id: "event_8",
    error: {
      type: "invalid_request_error",
      code: "response_cancel_not_active",
      message: "Cancellation failed: no active response found",
      param: null,
      event_id: "c1",
    },
  },
  {
    type: "input_audio_buffer.timeout_triggered",
    event_id: "event_10",
    audio_start_ms: 0,
    audio_end_ms: 500,
    item_id: "item_2",
  },
  {
    type: "playback.acknowledged",
    event_id: "event_11",
    response_id: "resp_1",
    item_id: "item_3",
    played_ms: 80,
    committed_ms: null,
    history_committed: false,
  },
];

test("the shapes the server sends pass", () => {
  assert.deepEqual(checkAll(check, GOOD), { checked: GOOD.length, failures: [] });
});

test("a user audio part without `transcript` fails: the SDK's handler throws", () => {
  const [problem] = check(userAudio([{ type: "input_audio" }]));
  assert.match(problem, /handler throws .*content\.0/);
});

test("unknown keys fail, at the top and deep in an item", () => {
  assert.match(check({ ...GOOD[0], extra: 1 }).join(), /unknown key 'extra'/);
  const deep = userAudio([{ type: "input_audio", transcript: null, lang: "en" }]);
  assert.match(check(deep).join(), /unknown key 'item\.content\[\]\.lang'/);
  // `resume_token` is an extension of `session.created` only.
  assert.match(check({ ...GOOD[3], resume_token: "t" }).join(), /unknown key 'resume_token'/);
});

test("a null where the SDK takes a string or nothing fails", () => {
  const failed = { ...GOOD[2], error: { ...GOOD[2].error, param: null } };
  assert.match(check(failed).join(), /error\.param/);
});

test("extension events need exactly their keys; other types are unknown", () => {
  const { history_committed: _, ...missing } = GOOD[6];
  assert.match(check(missing).join(), /missing key 'history_committed'/);
  assert.match(check({ ...GOOD[6], extra: 1 }).join(), /unknown key 'extra'/);
  assert.match(check({ type: "response.audio.delta", event_id: "e" }).join(), /neither OpenAI's/);
});

// Unit tests of where the input stood at a frame of the audio (input-position.js).
import assert from "node:assert/strict";
import { test } from "node:test";

import { InputPosition } from "../../orchestrator/service/static/input-position.js";

test("rule 3: unknown before a chunk was sent; then one frame is one sample, either side", () => {
  const input = new InputPosition();
  assert.equal(input.at(500), null);
  input.sent(480, 1000);
  input.sent(480, 1480);
  assert.equal(input.at(1480), 960);
  assert.equal(input.at(1600), 1080, "after the last chunk");
  assert.equal(input.at(1300), 780, "inside the last chunk");
  assert.equal(input.at(null), null, "a report without its frame");
});

test("rule 2: a chunk that was not sent does not count", () => {
  const input = new InputPosition();
  input.sent(480, 1000);
  // The chunks ending at 1480 and 1960 fell into a drop; the next one went out.
  input.sent(480, 2440);
  assert.equal(input.at(2440), 960);
  assert.equal(input.at(2500), 1020);
});

test("rule 1: a new conversation starts again at 0", () => {
  const input = new InputPosition();
  input.sent(480, 1000);
  input.reset();
  assert.equal(input.at(1000), null);
  input.sent(480, 9000);
  assert.equal(input.at(9000), 480);
});

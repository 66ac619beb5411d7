// One line of what went over the wire, for the log panel (view.js) and the debug record
// (debug.js): the same summary for both, so that what a test reads is what a user sees.
// Pure; node tests it (tests/js/page-parts.test.mjs).
//
// Directions: ">" sent, "<" received and acted on, "~" received and only logged (a replay's
// duplicate, a resuming socket's provisional session: reconnect.js).

// The response an event is about: its response_id, or the response it carries.
export function responseId(event) {
  return event.response_id || (event.response && event.response.id);
}

// The record of one event at time `t` (ms): its type and what the tests and the log look at.
export function summarize(dir, event, t) {
  const entry = { t, dir, type: event.type };
  if (event.server_event_seq !== undefined) entry.seq = event.server_event_seq;
  const rid = responseId(event);
  if (rid) entry.response_id = rid;
  const input = event.session && event.session.audio && event.session.audio.input;
  if (input && input.turn_detection) entry.turn_detection = input.turn_detection;
  if (event.type === "response.done") {
    entry.status = event.response.status;
    const details = event.response.status_details;
    if (details && details.reason) entry.reason = details.reason;
  }
  return entry;
}

// Audio deltas stream by the dozen a second: the panel leaves them out (the record keeps them).
export function isAudioDelta(event) {
  return event.type.endsWith(".delta") && event.type.includes("audio.delta");
}

// The panel's line for an entry; null for what the panel leaves out.
export function logLine(entry, event) {
  if (isAudioDelta(event)) return null;
  let line = `${(entry.t / 1000).toFixed(3)} ${entry.dir} ${event.type}` +
    (entry.response_id ? ` ${entry.response_id}` : "");
  if (event.type === "overlap.decision") {
    line += ` ${event.decision} reason=${event.reason} speech_ms=${event.speech_ms}` +
      (event.transcript ? ` heard=${JSON.stringify(event.transcript)}` : "");
  }
  return line;
}

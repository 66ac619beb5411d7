// What the page does with each server event it processes: a handler per event type, in a
// table. The connection (connection.js) has already sorted the event (reconnect.js: a replay's
// duplicate or a provisional session's event never gets here). Pure: the page's parts are
// handed in as `page` = {settings (settings.js), player (player.js), view (view.js)}, so node
// tests each handler with fakes (tests/js/session-events.test.mjs).
//
// Rules:
// 1. The page shows, and acts on, the settings the server holds (settings.js): among them, with
//    echo cancellation on, the player acknowledges playback as it goes (player.js rule 6).
// 2. In immediate mode speech cuts off the response playing at once, unless it was already
//    heard in full; in pause mode the server says what to do (output_audio_buffer.paused, one
//    overlap.decision, then resumed or cleared): dropping the answer at speech would lose what a
//    "yeah" must not cost.
// 3. A response cut off (cleared, or done as cancelled) is struck through in the transcript;
//    its late transcript deltas are not shown.
// 4. An event type not in the table is only logged.
// 5. An `error` server_restarting is no failure: the server drains for a deploy and the
//    connection resumes the session on another worker at once (connection.js rule 7); the page
//    says so in its state. Other errors are warned of.

import { responseId } from "./event-summary.js";
import { RESTARTING_STATUS, SERVER_RESTARTING } from "./reconnect.js";

function held(page, event) {
  const shown = page.settings.hold(event.session);
  page.view.showSettings(shown);
  page.player.acknowledgeProgress(shown.echo); // player.js rule 6
}

function cut(page, rid, trigger) {
  page.player.interrupt(rid, trigger); // nothing if already interrupted
  page.view.cut(rid);
}

export const SERVER_EVENTS = Object.freeze({
  "session.created": held,
  "session.updated": held,
  "input_audio_buffer.speech_started": (page) => {
    page.view.status("inputState", "speaking");
    const { player, settings } = page;
    if (settings.interruptsAtOnce() && player.current && !player.heardInFull(player.current)) {
      player.interrupt(player.current, "speech_started");
    }
  },
  "input_audio_buffer.speech_stopped": (page) => page.view.status("inputState", "silent"),
  "input_audio_buffer.committed": (page) => page.view.status("inputState", "committed"),
  "conversation.item.input_audio_transcription.delta": (page, event) => {
    page.view.transcript(event.item_id, "user", event.delta);
  },
  "conversation.item.input_audio_transcription.completed": (page, event) => {
    page.view.transcript(event.item_id, "user", event.transcript, true);
  },
  "response.created": (page, event, rid) => {
    page.player.started(rid);
    page.view.status("responseState", "in_progress");
  },
  "response.output_item.added": (page, event, rid) => page.player.item(rid, event.item.id),
  "response.output_audio.delta": (page, event, rid) => {
    page.player.push(rid, event.item_id, event.delta);
  },
  "response.output_audio_transcript.delta": assistantText,
  "response.output_text.delta": assistantText,
  "output_audio_buffer.paused": (page, event, rid) => page.player.pause(rid),
  "output_audio_buffer.resumed": (page, event, rid) => page.player.resume(rid),
  "overlap.decision": (page, event) => page.view.decision(event),
  "output_audio_buffer.cleared": (page, event, rid) => cut(page, rid, "output_audio_buffer.cleared"),
  "response.done": (page, event, rid) => {
    const status = event.response.status;
    page.view.status("responseState", status);
    if (status === "cancelled") cut(page, rid, "response.done");
    // Completed, incomplete (cut short by the server's limits) or failed: what arrived is
    // all there will be, and it plays to its end (its final ACK then says so).
    else page.player.done(rid);
  },
  "error": (page, event) => {
    if (event.error && event.error.code === SERVER_RESTARTING) page.view.status("state", RESTARTING_STATUS);
    else console.warn("server error", event.error);
  },
});

function assistantText(page, event, rid) {
  if (!page.player.isInterrupted(rid)) page.view.transcript(rid, "assistant", event.delta);
}

export function dispatch(page, event) {
  const handler = Object.hasOwn(SERVER_EVENTS, event.type) ? SERVER_EVENTS[event.type] : null;
  if (handler) handler(page, event, responseId(event));
}

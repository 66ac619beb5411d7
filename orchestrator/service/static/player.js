// The page's side of playback: which response plays, which were cut off, paused or heard to
// their end, and the playback.ack of each. The samples themselves live in the playback worklet
// (playback-worklet.js over playback-core.js); this object tells it what to do and hears what
// it did. Free of the DOM and of Web Audio: the worklet, the view and the ACK's way out are
// handed in, so node tests it (tests/js/player.test.mjs).
//
// Rules:
// 1. A response is interrupted once: its queued audio is dropped in the worklet and every later
//    delta of it is discarded, here and there.
// 2. Only the latest response can be paused; a pause naming another, or one already cut off, is
//    stale and does nothing. A resume plays on only a response that is paused now.
// 3. A response's final ACK is made once, with what the worklet rendered of it: at the clear of
//    an interrupted one, at the end of one heard in full.
// 4. A worklet report can trail the end, the clear or the pause it covers: it never undoes that
//    state (a report written before the worklet took the pause does not say "playing").
// 5. Without a worklet (the audio stopped) nothing is queued, paused or resumed; what the page
//    knows of its responses stays until a new conversation.
// 6. The response playing is also acknowledged while it plays, every few worklet reports in
//    which its cursor moved (never while paused, cut off or heard in full), whatever the echo
//    setting. The server's history keeps what the user heard of an interrupted answer
//    (docs/protocol.md, rule 5) and cuts it where the last ACK it holds says: a client that
//    tells its cursor only at the end leaves that cut at its last ACK (often nothing) whenever
//    the end's ACK comes too late or is lost with the socket. Every PROGRESS_REPORTS reports
//    (250 ms); with the server's echo cancellation on (`acknowledgeProgress`) every
//    ECHO_PROGRESS_REPORTS (100 ms): only such frequent ACKs keep the echo's reference on the
//    server within 10 ms of this player ("playback.ack"). A progress ACK is a cursor; the one
//    ACK of rule 3 still ends the response. Every ACK carries `input_ms` where the worklet said
//    the frame it was read at and the input's position then is known (input-position.js).
//
// Emits (for listeners, emitter.js): "interrupt" {rid, trigger}, "pause" {rid}, "resume" {rid},
// "audio" {rid, samples} (samples handed to the worklet), "worklet" (each worklet message, as
// it came), "ack" {event, samples} (rule 3's and rule 6's alike).

import { BoundedSet } from "./playback-core.js";
import { b64ToInt16 } from "./pcm.js";

export const RATE = 24000;
const REMEMBERED = 64;
// Worklet reports come every 50 ms (playback-worklet.js): a progress ACK every fifth one
// (250 ms), every other one (100 ms) with the server's echo cancellation on. Rule 6.
export const PROGRESS_REPORTS = 5;
export const ECHO_PROGRESS_REPORTS = 2;

export class Player {
  // worklet: {live: bool, post(msg, transfer)}; view: {playback(state), played(ms)};
  // sendAck(event): hands a playback.ack to the connection; inputAt(frame): samples of input
  // sent by that context frame, or null (InputPosition.at).
  constructor({ worklet, view, sendAck, emitter, inputAt = () => null }) {
    this.worklet = worklet;
    this.inputAt = inputAt;
    this.echo = false; // rule 6: the server's echo cancellation is on
    this.sinceProgress = 0; // worklet reports since the last progress ACK
    this.view = view;
    this.sendAck = sendAck;
    this.emitter = emitter;
    // The last worklet report of a response (rule 4 compares with it). It outlives a new
    // conversation: a report of the old one may still come.
    this.lastReport = null;
    this.reset();
  }

  // A new conversation: nothing of the old one's responses carries over.
  reset() {
    this.current = null; // the latest response (response.created)
    this.items = new Map(); // rid -> its audio item id, for the ACK
    this.interrupted = new BoundedSet(REMEMBERED);
    this.heard = new BoundedSet(REMEMBERED); // played to the end and acknowledged
    this.paused = new BoundedSet(REMEMBERED); // paused now (rule 2)
  }

  started(rid) {
    this.current = rid;
  }

  item(rid, itemId) {
    this.items.set(rid, itemId);
    if (this.items.size > REMEMBERED) this.items.delete(this.items.keys().next().value);
  }

  isInterrupted(rid) {
    return this.interrupted.has(rid);
  }

  heardInFull(rid) {
    return this.heard.has(rid);
  }

  // A delta of the response's audio (base64 pcm16) to the worklet. Rules 1 and 5.
  push(rid, itemId, b64) {
    if (this.interrupted.has(rid) || !this.worklet.live) return;
    this.items.set(rid, itemId);
    const samples = b64ToInt16(b64);
    this.emitter.emit("audio", { rid, samples: samples.length });
    this.worklet.post({ type: "push", rid, samples: samples.buffer }, [samples.buffer]);
  }

  // The response's last delta came (response.done, not cancelled).
  done(rid) {
    if (!this.interrupted.has(rid) && this.worklet.live) this.worklet.post({ type: "done", rid });
  }

  // Rule 1; `trigger` names what cut it off.
  interrupt(rid, trigger) {
    if (!rid || this.interrupted.has(rid)) return;
    this.interrupted.add(rid);
    this.paused.delete(rid); // the clear ends a pause with the kept audio
    this.emitter.emit("interrupt", { rid, trigger });
    if (this.worklet.live) this.worklet.post({ type: "clear", rid });
  }

  // Rule 2.
  pause(rid) {
    if (!rid || rid !== this.current || this.interrupted.has(rid) || !this.worklet.live) return;
    this.paused.add(rid);
    this.emitter.emit("pause", { rid });
    this.worklet.post({ type: "pause", rid });
    this.view.playback("paused");
  }

  resume(rid) {
    if (!this.paused.has(rid) || this.interrupted.has(rid) || !this.worklet.live) return;
    this.paused.delete(rid);
    this.emitter.emit("resume", { rid });
    this.worklet.post({ type: "resume", rid });
    this.view.playback("playing");
  }

  // Rule 6: whether the session's echo cancellation is on (the settings the server holds): the
  // progress ACKs come every ECHO_PROGRESS_REPORTS reports then, every PROGRESS_REPORTS if not.
  acknowledgeProgress(echo) {
    this.echo = Boolean(echo);
  }

  // What the worklet reports (playback-worklet.js).
  onWorklet(msg) {
    this.emitter.emit("worklet", msg);
    if (msg.type === "stats") {
      if (msg.rid === null) return;
      const last = this.lastReport;
      this.lastReport = { rid: msg.rid, played: msg.played };
      this.view.played(Math.round(msg.played * 1000 / RATE));
      const moved = !last || last.rid !== msg.rid || last.played !== msg.played;
      const live = !this.heard.has(msg.rid) && !this.interrupted.has(msg.rid) &&
                   !this.paused.has(msg.rid);
      if (msg.paused) this.view.playback("paused");
      else if (moved && live) {
        this.view.playback("playing"); // rule 4: only a report that moved says "playing"
      }
      this.sinceProgress += 1;
      const every = this.echo ? ECHO_PROGRESS_REPORTS : PROGRESS_REPORTS;
      if (moved && live && !msg.paused && msg.played > 0 && this.sinceProgress >= every) {
        this.sinceProgress = 0;
        this.ack(msg.rid, msg.played, msg.frame); // rule 6
      }
    } else if (msg.type === "cleared") {
      this.view.playback("cleared");
      this.ack(msg.rid, msg.played, msg.frame);
    } else if (msg.type === "finished") {
      if (!this.interrupted.has(msg.rid)) {
        this.view.playback("finished");
        this.heard.add(msg.rid);
        this.ack(msg.rid, msg.played, msg.frame);
      }
    }
    // "paused" / "resumed" say where the cursor stood: for listeners only.
  }

  // Rules 3 and 6; `frame`: the context frame the worklet read `playedSamples` at, if it said.
  ack(rid, playedSamples, frame = null) {
    const event = {
      type: "playback.ack", response_id: rid, played_ms: Math.floor(playedSamples * 1000 / RATE),
    };
    if (this.items.has(rid)) event.item_id = this.items.get(rid);
    const input = this.inputAt(frame);
    if (input !== null) event.input_ms = input * 1000 / RATE;
    this.emitter.emit("ack", { event: { ...event }, samples: playedSamples });
    this.sendAck(event);
  }
}

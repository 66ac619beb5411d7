// The page's connection: one socket at a time to /v1/realtime, dialled again after a loss and
// the session resumed (REALTIME_CONTRACT, "Event sequence and session resume"). The decisions
// of the resume (the sequence check, the phases, the backoff) are reconnect.js's; this object
// carries them out on real sockets and timers. WebSocket, the timers and the clock are handed
// in (globals by default), so node tests it with a fake socket (tests/js/connection.test.mjs).
//
// Rules:
// 1. Only the current socket speaks for the connection: one given up on (Disconnect, an
//    unanswered resume) may still report, and is not heard.
// 2. Nothing goes out while the socket is down or the resume unanswered but session.resume
//    itself; the mic's audio is dropped then, not queued without bound.
// 3. A playback.ack that falls into a drop goes out once resumed (an answer that finished
//    playing while the socket was down still goes into the history); the latest per response.
// 4. A close is final after our own Disconnect, a server's normal close (1000: the session
//    ended), a refusal (1008: the key or origin will not change), a takeover, or when the
//    session announced no resume; any other loss (1001, a server shutting down, among them) is
//    dialled again with backoff until resumed or given up (but rule 7).
// 5. A resume unanswered for RESUME_ANSWER_MS is tried again on a new socket.
// 6. A deliberate close is 1000: it ends the session on the server at once. Disconnect while the
//    socket is down ends the session the server keeps for its grace: it resumes it on a socket
//    of its own and closes that at the answer (reconnect.js, farewell).
// 7. A server's restart close (4001: it drained for a deploy and kept the session where any
//    worker takes it up) is no failure and no reason to wait: the first redial goes at once
//    (0 ms, once a drop), a try that fails then waits the backoff (reconnect.js, Backoff).
//
// Emits (emitter.js): "wire" {dir, event} for each event sent (but mic audio), processed ("<")
// or only logged ("~"); "mic" {samples} for each chunk of mic audio sent; "session-start" when a session's sequence begins (Connect, a failed
// resume's new session); "lost" {code, lastSeq} at the first loss of a drop; "retry" at each
// new try; "reconnected" {outcome, replayedFrom}; "farewell" and "farewell-answer"
// {outcome, token}.

import { bytesToB64 } from "./pcm.js";
import {
  Backoff, RESTARTING_CLOSE, RESTARTING_STATUS, RESUME_FAILED, ResumeState, freshUrl, resumeUrl,
} from "./reconnect.js";

export const RESUME_ANSWER_MS = 10000;
// How long the farewell socket of a Disconnect while down waits for the resume's answer.
export const FAREWELL_MS = 5000;
const EVENT_ACK_EVERY = 50;

export class Connection {
  // hooks: {opened(), live(), newSession(), event(e), status(text), finished(text)}: what the
  // page does when a socket opens, a first connection is live (its session.update), a failed
  // resume goes on as a new session, a server event is to be processed, the connection's
  // state changes, and the connection is over for good.
  constructor({ hooks, emitter, WebSocket = globalThis.WebSocket, timers = globalThis,
                now = () => performance.now() }) {
    this.hooks = hooks;
    this.emitter = emitter;
    this.WebSocket = WebSocket;
    this.timers = timers;
    this.now = now;
    this.link = new ResumeState(); // the session's sequence, token and phase
    this.backoffOptions = {}; // reconnect.js BACKOFF overrides (the debug object sets them)
    this.ws = null;
    this.baseUrl = null; // the URL the user asked for; a resume adds the session id to it
    this.protocols = null;
    this.leaving = false; // the user pressed Disconnect: the close is final
    this.replaced = false; // another connection took the session over: do not take it back
    this.backoff = null; // set from a drop until resumed (or given up)
    this.lostAt = 0;
    this.retryTimer = null;
    this.answerTimer = null;
    this.pendingAcks = new Map(); // rule 3: rid -> playback.ack
  }

  // A first connection (Connect).
  open(url, key) {
    // Browsers cannot set an Authorization header: the key rides in a subprotocol, which the
    // server never echoes (it answers "realtime").
    this.protocols = ["realtime"];
    if (key) this.protocols.push("openai-insecure-api-key." + key);
    this.leaving = this.replaced = false;
    this.link.start();
    this.emitter.emit("session-start");
    this.pendingAcks.clear();
    try {
      this.baseUrl = freshUrl(url);
      this.dial(this.baseUrl);
    } catch (error) {
      this.finish("error: " + error.name); // a URL that is no ws:// or wss:// URL
    }
  }

  // Rule 2. Returns whether it went out.
  send(event) {
    if (!this.ws || this.ws.readyState !== this.WebSocket.OPEN) return false;
    if (!this.link.accepting() && event.type !== "session.resume") return false;
    this.ws.send(JSON.stringify(event));
    if (event.type !== "input_audio_buffer.append") this.emitter.emit("wire", { dir: ">", event });
    return true;
  }

  // 20 ms of the mic; dropped, unencoded, while the socket is down (rule 2). What went out is
  // emitted as "mic" {samples}: the server's input clock counts it (timeline-model.js).
  // Whether the chunk went out (input-position.js counts only those).
  sendAudio(buffer) {
    if (!this.link.accepting()) return false;
    if (this.send({ type: "input_audio_buffer.append", audio: bytesToB64(buffer) })) {
      this.emitter.emit("mic", { samples: buffer.byteLength / 2 });
      return true;
    }
    return false;
  }

  // Rule 3.
  sendAck(event) {
    if (this.send(event)) this.sendEventAck(true);
    else if (this.link.canResume() && !this.leaving) this.pendingAcks.set(event.response_id, event);
  }

  // Lets the server free the journal of what the page has processed (harmless if it ignores it).
  sendEventAck(force) {
    const event = this.link.eventAck(EVENT_ACK_EVERY, force);
    if (event) this.send(event);
  }

  dial(url) {
    const sock = new this.WebSocket(url, this.protocols);
    this.ws = sock;
    // Rule 1.
    sock.onopen = () => sock === this.ws && this.opened();
    sock.onmessage = (e) => sock === this.ws && this.onMessage(JSON.parse(e.data));
    sock.onclose = (e) => sock === this.ws && this.closed(e);
  }

  opened() {
    this.hooks.opened();
    if (this.link.phase === "down") {
      // The resume is the connection's first client event; the provisional session.created the
      // server may send first is ignored (reconnect.js). Rule 5.
      this.send(this.link.beginResume());
      const sock = this.ws;
      this.answerTimer = this.timers.setTimeout(
        () => sock.close(4000, "session.resume unanswered"), RESUME_ANSWER_MS);
      return;
    }
    this.hooks.status("connected");
    this.hooks.live();
  }

  // Each server event passes the sequence check first: a replay that overlaps what already came
  // is dropped there, so no event (no audio sample) is processed twice.
  onMessage(event) {
    const { process, ignored, outcome } = this.link.receive(event);
    for (const e of ignored) this.emitter.emit("wire", { dir: "~", event: e }); // never acted on
    if (outcome === "resume_failed") {
      // The session is gone; the connection goes on as a new one: start afresh on it, as a
      // first connect does (the session.update before its session.created is handled).
      this.pendingAcks.clear();
      this.emitter.emit("session-start");
      this.hooks.newSession();
    }
    for (const e of process) {
      this.emitter.emit("wire", { dir: "<", event: e });
      this.hooks.event(e);
    }
    if (outcome === "resumed" || outcome === "resume_failed") this.reconnected(outcome, event);
    if (outcome === "replaced") this.replaced = true; // the server closes this socket with 1000 next
    this.sendEventAck(false);
  }

  // Rules 4 and 7.
  closed(e) {
    this.timers.clearTimeout(this.answerTimer);
    const final = this.leaving || this.replaced || e.code === 1000 || e.code === 1008 ||
      !this.link.canResume();
    if (final) {
      // A refusal (wrong key, foreign origin, session limit) says why in its close reason.
      this.finish(this.replaced ? "disconnected (session taken over by another connection)"
        : e.code === 1000 || e.code === 1005 ? "disconnected"
        : `disconnected (${e.code}${e.reason ? ": " + e.reason : ""})`);
      return;
    }
    if (this.backoff === null) {
      // The first loss: the audio pipeline keeps running, the worklet plays what it holds.
      this.backoff = new Backoff(this.backoffOptions);
      this.lostAt = this.now();
      this.emitter.emit("lost", { code: e.code, lastSeq: this.link.lastSeq });
    }
    this.link.dropped();
    this.hooks.status(e.code === RESTARTING_CLOSE ? RESTARTING_STATUS : "reconnecting…");
    const delay = this.backoff.next(this.now() - this.lostAt, e.code);
    if (delay === null) {
      this.finish("disconnected (gave up reconnecting)");
      return;
    }
    this.retryTimer = this.timers.setTimeout(() => {
      this.retryTimer = null;
      this.emitter.emit("retry");
      this.dial(resumeUrl(this.baseUrl, this.link.sessionId));
    }, delay);
  }

  // The answer to a resume: the same session plays on, or (failed) a new one has begun.
  reconnected(outcome, event) {
    this.timers.clearTimeout(this.answerTimer);
    this.backoff = null;
    this.emitter.emit("reconnected", {
      outcome, replayedFrom: outcome === "resumed" ? event.replayed_from_seq ?? null : null,
    });
    if (outcome === "resumed") {
      this.hooks.status("connected (resumed)");
      const acks = [...this.pendingAcks.values()];
      this.pendingAcks.clear();
      for (const a of acks) this.send(a);
      if (acks.length) this.sendEventAck(true);
    } else {
      this.hooks.status("connected (new session: resume failed)");
    }
  }

  // The connection is over for good.
  finish(state) {
    this.timers.clearTimeout(this.retryTimer);
    this.timers.clearTimeout(this.answerTimer);
    this.retryTimer = this.answerTimer = null;
    this.backoff = null;
    this.link.stop();
    this.pendingAcks.clear();
    this.ws = null;
    this.hooks.finished(state);
  }

  // Rule 6.
  disconnect() {
    this.leaving = true;
    // Live, or a resume sent on this socket: the server takes the close after the resume.
    if (this.ws && this.ws.readyState === this.WebSocket.OPEN) {
      this.ws.close(1000);
      return;
    }
    const goodbye = this.link.farewell();
    if (this.ws) {
      // Still opening: its close frame never goes out (it reports 1006).
      this.ws.close(1000);
      this.ws = null;
    }
    if (goodbye) this.farewell(resumeUrl(this.baseUrl, goodbye.session_id), goodbye);
    this.finish("disconnected");
  }

  // One try, on a socket of its own: resume, then close with 1000 at the answer.
  farewell(url, event) {
    const sock = new this.WebSocket(url, this.protocols);
    this.emitter.emit("farewell");
    const timer = this.timers.setTimeout(() => sock.close(1000), FAREWELL_MS);
    sock.onopen = () => sock.send(JSON.stringify(event));
    sock.onmessage = (e) => {
      const ev = JSON.parse(e.data);
      const failed = ev.type === "error" && ev.error && ev.error.code === RESUME_FAILED;
      if (ev.type !== "session.resumed" && !failed) return;
      // The rotated token too: it is void once this socket closes.
      this.emitter.emit("farewell-answer", {
        outcome: failed ? "resume_failed" : "ended", token: ev.resume_token ?? null,
      });
      this.timers.clearTimeout(timer);
      sock.close(1000);
    };
    sock.onclose = () => this.timers.clearTimeout(timer);
  }
}

// The page's reconnect-and-resume logic (REALTIME_CONTRACT, "Event sequence and session
// resume"), free of the DOM and of WebSocket so that node tests it as it is
// (tests/js/reconnect.test.mjs) and the page imports the same file.
//
// A dropped socket does not end the session on the server: it lives on for its grace (30 s),
// its running response goes on and its events are journaled. The page dials again with
// backoff, asks for the events after the last one it processed, and plays on. Sequence numbers
// make that exact: the page processes each sequenced event once, in order, so a replay that
// overlaps what it already had can never play a sample twice.

// 250 ms doubling to 4 s; given up once the next try could only start after the server's grace,
// when the session is gone anyway.
export const BACKOFF = Object.freeze({ firstMs: 250, maxMs: 4000, giveUpMs: 30000, jitter: 0.25 });

// Our server's own close for a drain (a deploy's SIGTERM, a rolling restart) that kept the
// session where any worker takes it up (docs/protocol.md "Close codes"): the session is not over
// and waiting gains nothing, so it is dialled again at once. Its last event before the close is
// an `error` SERVER_RESTARTING, which is no failure. (1001, a drain that kept nothing, is a loss
// like any other: backoff.)
export const RESTARTING_CLOSE = 4001;
export const SERVER_RESTARTING = "server_restarting";
export const RESTARTING_STATUS = "server restarting: moving the session…";

export class Backoff {
  constructor(options = {}, random = Math.random) {
    const o = { ...BACKOFF, ...options };
    this.firstMs = o.firstMs;
    this.maxMs = o.maxMs;
    this.giveUpMs = o.giveUpMs;
    this.jitter = o.jitter;
    this.random = random;
    this.attempt = 0;
    this.immediate = false; // the drop's one try at once (a restart close) is spent
  }

  // The wait before the next try, `elapsedMs` after the drop, the socket lost with close `code`;
  // null: give up. The jitter only shortens a wait, so that pages dropped by one network blip do
  // not all dial at the same instant while none waits longer than the schedule says.
  // A restart close (RESTARTING_CLOSE) is tried again at once, once a drop, and the schedule
  // stays where it was: a try that fails waits the backoff, and a server that closed every
  // socket with 4001 would not be dialled in a tight loop.
  next(elapsedMs, code) {
    if (code === RESTARTING_CLOSE && !this.immediate) {
      this.immediate = true;
      return elapsedMs > this.giveUpMs ? null : 0;
    }
    const base = Math.min(this.firstMs * 2 ** this.attempt, this.maxMs);
    this.attempt += 1;
    const delay = Math.round(base * (1 - this.jitter * this.random()));
    if (elapsedMs + delay > this.giveUpMs) return null;
    return delay;
  }
}

// The URL of a resuming connection: `session_id` in the query lets a load balancer route it to
// the process that holds the session. The token is a secret and never goes in a URL (logs,
// proxies and the browser's history keep URLs).
export function resumeUrl(url, sessionId) {
  const u = new URL(url);
  u.searchParams.set("session_id", sessionId);
  return u.toString();
}

// The URL of a first connection: a `session_id` left from an earlier session would ask the
// load balancer for a process that may no longer hold anything of ours.
export function freshUrl(url) {
  const u = new URL(url);
  if (!u.searchParams.has("session_id")) return url;
  u.searchParams.delete("session_id");
  return u.toString();
}

export const RESUME_FAILED = "session_resume_failed";
export const REPLACED = "session_replaced";

function errorCode(event) {
  return event.type === "error" && event.error ? event.error.code : undefined;
}

// Where the page stands with its session, and what to do with each server event.
// Phases:
//   "idle"     no connection wanted
//   "fresh"    a first connection: its session.created starts the session
//   "live"     the session is ours on this socket
//   "down"     the socket is lost; the session lives on on the server (we hope)
//   "resuming" a new socket is open and session.resume sent; waiting for its answer
export class ResumeState {
  constructor() {
    this.phase = "idle";
    this.sessionId = null;
    this.token = null;
    this.lastSeq = 0; // the last sequenced event processed (0: none yet)
    this.ackedSeq = 0; // the last one acknowledged with session.event_ack
    this.provisional = null; // the session.created of a resuming socket's own new session
    this.held = []; // that provisional session's other sequenced events, until the answer
    this.duplicates = 0; // sequenced events dropped as already processed
    this.gaps = []; // [[first, last]] of sequence numbers never received
  }

  // A first connection (the Connect button): nothing of an earlier session carries over.
  start() {
    Object.assign(this, new ResumeState());
    this.phase = "fresh";
  }

  stop() {
    this.phase = "idle";
  }

  // Whether a lost socket can be resumed: the session announced a token (a server without
  // resume support announces none).
  canResume() {
    return this.sessionId !== null && this.token !== null;
  }

  // Client events other than session.resume go out only while the socket carries our session:
  // before the resume's answer they would land in the provisional session, and the resume must
  // be the connection's first client event anyway.
  accepting() {
    return this.phase === "fresh" || this.phase === "live";
  }

  dropped() {
    if (this.phase !== "idle") this.phase = "down";
  }

  // A new socket is open: the message to send first on it.
  beginResume() {
    this.phase = "resuming";
    this.provisional = null;
    this.held = [];
    return this.resumeEvent();
  }

  resumeEvent() {
    return {
      type: "session.resume",
      session_id: this.sessionId,
      resume_token: this.token,
      last_server_event_seq: this.lastSeq,
    };
  }

  // Leaving (the Disconnect button) while the socket is down: the session lives on on the
  // server for its grace, holding its key's session slot and its running response. The page
  // ends it as a deliberate close would: it resumes it on a socket of its own and closes that
  // with 1000 as soon as the answer comes (a failed resume's fresh session ends the same way).
  // The resume event to send on that socket; null when there is nothing to end.
  farewell() {
    if (this.phase !== "down" || !this.canResume()) return null;
    return this.resumeEvent();
  }

  // Sorts one server event. Returns {process, ignored, outcome}: the events to handle now, in
  // order (a failed resume releases the provisional session's held events), the events that
  // are only logged, and what the event says of the resume: null, "resumed",
  // "resume_failed" or "replaced" (another connection took the session over).
  receive(event) {
    const code = errorCode(event);
    if (code === REPLACED) return { process: [event], ignored: [], outcome: "replaced" };
    if (this.phase === "resuming") return this._whileResuming(event, code);
    if (event.type === "session.created" && this.phase === "fresh") {
      this.sessionId = (event.session && event.session.id) || null;
      this.token = event.resume_token ?? null;
      this.phase = "live";
    } else if (event.type === "session.resumed" || code === RESUME_FAILED) {
      // An answer to no resume of ours: nothing to act on.
      return { process: [], ignored: [event], outcome: null };
    }
    return this._sequenced(event);
  }

  _whileResuming(event, code) {
    if (event.type === "session.resumed") {
      // The old token is void from now on: a later drop resumes with this one.
      this.token = event.resume_token ?? this.token;
      this.sessionId = event.session_id ?? this.sessionId;
      const from = event.replayed_from_seq;
      if (typeof from === "number" && from > this.lastSeq + 1) {
        this.gaps.push([this.lastSeq + 1, from - 1]);
      }
      // The provisional session is discarded by the server; so is what we held of it.
      const ignored = this.provisional ? [this.provisional, ...this.held] : [...this.held];
      this.provisional = null;
      this.held = [];
      this.phase = "live";
      return { process: [event], ignored, outcome: "resumed" };
    }
    if (code === RESUME_FAILED) {
      // The connection goes on as the provisional session: it becomes ours, from its start.
      const provisional = this.provisional;
      const held = this.held;
      this.provisional = null;
      this.held = [];
      this.lastSeq = 0;
      this.ackedSeq = 0;
      this.sessionId = null;
      this.token = null;
      this.phase = "fresh";
      const process = [event];
      for (const e of provisional ? [provisional, ...held] : held) {
        process.push(...this.receive(e).process);
      }
      return { process, ignored: [], outcome: "resume_failed" };
    }
    if (event.server_event_seq === undefined) return { process: [event], ignored: [], outcome: null };
    if (event.type === "session.created" && this.provisional === null) {
      this.provisional = event;
    } else {
      this.held.push(event);
    }
    return { process: [], ignored: [], outcome: null };
  }

  // Events about the connection carry no sequence number and always pass; a sequenced event
  // at or below the last one processed is a duplicate (a replay overlapping what came live).
  _sequenced(event) {
    const seq = event.server_event_seq;
    if (typeof seq !== "number") return { process: [event], ignored: [], outcome: null };
    if (seq <= this.lastSeq) {
      this.duplicates += 1;
      return { process: [], ignored: [event], outcome: null };
    }
    if (seq > this.lastSeq + 1) this.gaps.push([this.lastSeq + 1, seq - 1]);
    this.lastSeq = seq;
    return { process: [event], ignored: [], outcome: null };
  }

  // session.event_ack lets the server free its journal; sent now and then (every `every`
  // events) and with each playback.ack (`force`). Null when there is nothing new to ack.
  eventAck(every = 50, force = false) {
    if (this.phase !== "live" || this.lastSeq <= this.ackedSeq) return null;
    if (!force && this.lastSeq - this.ackedSeq < every) return null;
    this.ackedSeq = this.lastSeq;
    return { type: "session.event_ack", server_event_seq: this.lastSeq };
  }
}

// What the turn-taking timeline shows (timeline.js draws it): two lanes, the user's and the
// assistant's, of spans and marks in ms of page time (performance.now, the clock of the event
// log's timestamps). Fed with the server events the page processed, the microphone audio it
// sent, the player's cuts and the playback worklet's reports, all through the page's emitter
// (emitter.js). Pure: the clock is handed in, so node tests it (tests/js/timeline-model.test.mjs).
//
// Rules:
// 1. The user's speech is where the VAD heard it: audio_start_ms / audio_end_ms are on the
//    input clock (ms of microphone audio the server received), which maps to page time through
//    the audio this page sent: the last chunk sent is "now" on that clock. A new session
//    starts its clock at 0.
// 2. The assistant's audio is where it was heard: a span opens where the worklet's first report
//    of a response puts its first sample (the report's time less what it had played), and
//    ends where the worklet said it finished, paused or went silent at a clear, or where its
//    reports' cursor stood still (the queue starved). Nothing of the server's pace is drawn
//    as heard.
// 3. Speech that starts while the assistant's audio is playing or paused is an overlap. It
//    becomes a barge-in when the answer is cut off (the page at speech onset in immediate mode,
//    the server's clear or interrupt decision in pause mode) and a backchannel when the server
//    resumes the answer. A cut is drawn where the playback stopped, with what had been played.
// 4. A decision carries its reason and its latency as the page saw it: an overlap decision
//    its reason and the time from the speech onset to the decision's arrival; an end of turn
//    (the commit) its cause, from the turn detection the server holds: the silence waited
//    (server_vad) or the model (semantic_vad). speech_stopped's audio_end_ms is the point of
//    that decision, not where the voice fell silent, so the turn's latency is drawn as the
//    answer's: from there to the answer's first sample heard.
// 5. Bounded: what ended more than HISTORY_MS ago goes, and at most MAX_ITEMS are kept (the
//    oldest go first); of the responses and of which response each assistant item belongs to,
//    the RECENT_RESPONSES newest (a truncate names one of the last few).
// 6. The worklet's reports are dated by the audio clock, not by when the page took them: a
//    busy page takes a report late, and a span drawn then would be longer than what was heard
//    by the delay (FrameClock). A report whose cursor moved less than the frames that passed
//    since the one before (by a render quantum or more) ran dry meanwhile: the span ends where
//    what moved was heard, so the spans add up to what was played.

export const RATE = 24000; // the wire's pcm16 rate (player.js), kept here to stay DOM-free
const QUANTUM = 128; // frames of one render quantum (Web Audio)
const CLOCK_WINDOW = 64; // reports the frame clock remembers (rule 6): ~3 s of stats

// Rule 6: page time (ms) of a context frame. The AudioContext runs at RATE (audio.js), so a
// frame is a sample. A report taken at page time t was made at t or before, so the page time
// of frame 0 is at most t - frame / RATE: its least over the last CLOCK_WINDOW reports (the
// one the page took soonest) is the estimate, and the window follows a clock that drifts. A
// frame that goes back is a new context: a new clock.
export class FrameClock {
  constructor(window = CLOCK_WINDOW) {
    this.window = window;
    this.origins = []; // page time of frame 0 as each recent report implies it
    this.lastFrame = -1;
  }

  // The page time of `frame`, a report taken at page time `t`; `t` for a report without one.
  at(frame, t) {
    if (typeof frame !== "number") return t;
    if (frame < this.lastFrame) this.origins = [];
    this.lastFrame = frame;
    const ms = frame * 1000 / RATE;
    this.origins.push(t - ms);
    if (this.origins.length > this.window) this.origins.shift();
    return Math.min(...this.origins) + ms;
  }
}
export const HISTORY_MS = 120000;
export const MAX_ITEMS = 400;
export const RECENT_RESPONSES = 64;

const CAUSES = Object.freeze({ server_vad: "silence", semantic_vad: "model" });

// An item: {lane: "user"|"assistant", kind, start, end (null while open; a mark's end is its
// start), label (text or ""), rid?}.
//   user spans:      speech, overlap (undecided), barge-in, backchannel
//   user marks:      end-of-turn, decision
//   assistant spans: audio, paused
//   assistant marks: cut, finished
export class TimelineModel {
  constructor(now, { historyMs = HISTORY_MS, maxItems = MAX_ITEMS } = {}) {
    this.now = now;
    this.historyMs = historyMs;
    this.maxItems = maxItems;
    this.items = [];
    this.version = 0; // bumped on every change of what is listed (not on an open span growing)
    this.cause = "silence";
    this.clock = new FrameClock(); // rule 6: the context outlives a session
    this.newSession();
  }

  // Rule 1: a new session, a new input clock; what was open is over.
  newSession() {
    const t = this.now();
    for (const item of this.items) if (item.end === null) item.end = t;
    this.inputMs = 0;
    this.inputAt = null;
    this.speech = null; // the user's open speech span
    this.overlap = null; // the latest overlap not yet decided
    this.lastSpeechEnd = null; // for the end of turn and the answer's latency
    this.answerFrom = null; // the end of speech the next answer answers
    this.responses = new Map(); // rid -> {span (open audio or paused), started, cut}
    this.itemRid = new Map(); // assistant item id -> rid
    this.changed();
  }

  // The page sent `samples` of microphone audio (rule 1).
  sent(samples) {
    this.inputMs += samples * 1000 / RATE;
    this.inputAt = this.now();
  }

  // The page time of `ms` on the input clock; never later than now.
  pageTime(ms) {
    const t = this.now();
    if (this.inputAt === null || typeof ms !== "number") return t;
    return Math.min(t, this.inputAt - (this.inputMs - ms));
  }

  add(item) {
    this.items.push(item);
    this.prune();
    this.changed();
    return item;
  }

  changed() {
    this.version += 1;
  }

  // Rule 5.
  prune() {
    const before = this.now() - this.historyMs;
    this.items = this.items.filter((i) => i.end === null || i.end >= before);
    if (this.items.length > this.maxItems) this.items.splice(0, this.items.length - this.maxItems);
  }

  // An answer is sounding from its first sample to its end or cut: also while paused, or
  // starved for a moment (the user is talking over an answer that is not over).
  assistantSounding() {
    for (const r of this.responses.values()) if (r.started && !r.cut && !r.finished) return true;
    return false;
  }

  response(rid) {
    if (!this.responses.has(rid)) {
      this.responses.set(rid, {
        span: null, started: false, cut: false, finished: false, lastPlayed: 0, lastAt: null, lastFrame: null,
      });
      if (this.responses.size > RECENT_RESPONSES) {
        this.responses.delete(this.responses.keys().next().value);
      }
    }
    return this.responses.get(rid);
  }

  // A server event the page processed.
  server(event) {
    const t = this.now();
    switch (event.type) {
      case "session.created":
      case "session.updated": {
        const td = event.session && event.session.audio && event.session.audio.input &&
          event.session.audio.input.turn_detection;
        if (td && CAUSES[td.type]) {
          this.cause = CAUSES[td.type];
          if (td.type === "server_vad" && td.silence_duration_ms !== undefined) {
            this.cause += ` ${td.silence_duration_ms} ms`;
          }
        }
        break;
      }
      case "input_audio_buffer.speech_started": {
        if (this.speech && this.speech.end === null) break;
        // A second speech_started of one overlap (pause mode: the same item_id) goes on with
        // the overlap's span.
        if (this.overlap && event.item_id && this.overlap.itemId === event.item_id) {
          this.overlap.end = null;
          this.speech = this.overlap;
          this.changed();
          break;
        }
        const overlap = this.assistantSounding();
        this.speech = this.add({
          lane: "user", kind: overlap ? "overlap" : "speech", itemId: event.item_id,
          start: this.pageTime(event.audio_start_ms), end: null, label: "",
        });
        if (overlap) this.overlap = this.speech;
        break;
      }
      case "input_audio_buffer.speech_stopped":
        if (this.speech && this.speech.end === null) {
          this.speech.end = Math.max(this.speech.start, this.pageTime(event.audio_end_ms));
          this.lastSpeechEnd = this.speech.end;
          this.changed();
        }
        break;
      case "input_audio_buffer.committed": {
        if (this.speech && this.speech.end === null) {
          this.speech.end = t; // a commit ends the speech it takes
          this.lastSpeechEnd = t;
        }
        const from = this.lastSpeechEnd;
        this.add({
          lane: "user", kind: "end-of-turn", start: t, end: t,
          label: from === null ? "commit" : `end of turn: ${this.cause}`,
        });
        this.answerFrom = from;
        this.lastSpeechEnd = null;
        break;
      }
      case "overlap.decision":
        this.decision(event, t);
        break;
      case "output_audio_buffer.cleared":
        this.bargeIn(event.response_id);
        break;
      case "response.output_item.added":
        if (event.item && event.response_id) {
          this.itemRid.set(event.item.id, event.response_id);
          // Rule 5: was one entry per response for the whole session.
          if (this.itemRid.size > RECENT_RESPONSES) {
            this.itemRid.delete(this.itemRid.keys().next().value);
          }
        }
        break;
      case "conversation.item.truncated": {
        const rid = this.itemRid.get(event.item_id);
        const cut = rid && this.items.find((i) => i.kind === "cut" && i.rid === rid);
        if (cut) {
          cut.label += `, server kept ${event.audio_end_ms} ms`;
          this.changed();
        }
        break;
      }
      default:
    }
  }

  // Rule 4: an overlap decision, on the overlap it decides.
  decision(event, t) {
    const span = this.overlap || this.speech;
    const latency = span ? ` +${Math.round(t - span.start)} ms` : "";
    this.add({
      lane: "user", kind: "decision", start: t, end: t, rid: event.response_id,
      label: `${event.decision}: ${event.reason}, ${event.speech_ms} ms speech${latency}`,
    });
    if (event.decision === "resume" && span) {
      span.kind = "backchannel";
      this.overlap = null;
    } else if (event.decision === "interrupt") this.bargeIn(event.response_id);
  }

  // Rule 3: the overlap cut the answer off.
  bargeIn() {
    if (this.overlap) {
      this.overlap.kind = "barge-in";
      this.overlap = null;
      this.changed();
    }
  }

  // The player cut a response off (player.js "interrupt"): at speech onset, it is the barge-in.
  interrupt(rid, trigger) {
    if (trigger === "speech_started") this.bargeIn(rid);
  }

  // A playback worklet report (playback-worklet.js). Rule 2.
  worklet(msg) {
    if (!msg.rid) return;
    const t = this.clock.at(msg.frame, this.now()); // rule 6
    const r = this.response(msg.rid);
    const playedMs = (msg.played || 0) * 1000 / RATE;
    if (msg.type === "stats") {
      if (r.cut || r.finished || msg.played <= 0) return;
      if (!r.started) {
        r.started = true;
        const start = t - playedMs;
        const from = this.answerFrom;
        this.answerFrom = null;
        r.span = this.add({
          lane: "assistant", kind: "audio", start, end: null, rid: msg.rid,
          label: from !== null && start > from ? `answer +${Math.round(start - from)} ms` : "",
        });
        if (msg.paused) this.switchSpan(r, "paused", t);
      } else if (!msg.paused && (!r.span || r.span.kind === "audio")) {
        this.starved(r, msg, t);
      }
      r.lastPlayed = msg.played;
      r.lastAt = t;
      r.lastFrame = msg.frame;
    } else if (msg.type === "paused" && msg.applied) {
      if (r.span && r.span.kind === "audio") this.switchSpan(r, "paused", t);
      else if (!r.span && r.started) r.span = this.newSpan(msg.rid, "paused", t);
    } else if (msg.type === "resumed" && msg.applied) {
      if (r.span && r.span.kind === "paused") this.switchSpan(r, "audio", t);
      r.lastPlayed = msg.played;
      r.lastAt = t;
      r.lastFrame = msg.frame;
    } else if (msg.type === "cleared") {
      if (r.cut) return;
      r.cut = true;
      this.close(r, t);
      this.add({
        lane: "assistant", kind: "cut", start: t, end: t, rid: msg.rid,
        label: `cut at ${(playedMs / 1000).toFixed(2)} s of the answer`,
      });
    } else if (msg.type === "finished") {
      if (r.cut) return;
      r.finished = true;
      this.close(r, t);
      this.add({
        lane: "assistant", kind: "finished", start: t, end: t, rid: msg.rid,
        label: `heard in full, ${(playedMs / 1000).toFixed(2)} s`,
      });
    }
  }

  // Rule 2: an answer whose audio ran out before its end (the queue starved: the deltas came
  // slower than it played) is silent meanwhile, and drawn so: a report whose cursor stood
  // still ends the span at the report before; one whose cursor moved again opens the next
  // where that audio began. Rule 6: one whose cursor moved less than the frames that passed
  // ran dry in between; where in between is not known, so the span ends where what moved
  // was heard, and the next report that moves opens the next.
  starved(r, msg, t) {
    const moved = msg.played - r.lastPlayed;
    const passed = typeof msg.frame === "number" && typeof r.lastFrame === "number"
      ? msg.frame - r.lastFrame : null;
    if (moved === 0 && r.span) {
      this.close(r, r.lastAt);
    } else if (moved > 0 && !r.span) {
      r.span = this.newSpan(msg.rid, "audio", t - moved * 1000 / RATE);
    } else if (moved > 0 && r.span && passed !== null && passed - moved >= QUANTUM) {
      this.close(r, r.lastAt + moved * 1000 / RATE);
    }
  }

  newSpan(rid, kind, start) {
    return this.add({ lane: "assistant", kind, start, end: null, rid, label: "" });
  }

  close(r, t) {
    if (r.span && r.span.end === null) r.span.end = Math.max(r.span.start, t);
    r.span = null;
  }

  switchSpan(r, kind, t) {
    const rid = r.span.rid;
    this.close(r, t);
    r.span = this.newSpan(rid, kind, t);
  }
}

// An item in words, for the list that stands for the canvas to a screen reader (timeline.js):
// "user barge-in from 12.346 s to 13.500 s", "assistant cut at 15.120 s: cut at 2.34 s of
// the answer". Seconds of page time, as the event log's timestamps.
export function describe(item) {
  const s = (t) => `${(t / 1000).toFixed(3)} s`;
  const when = item.end === item.start ? `at ${s(item.start)}`
    : `from ${s(item.start)}${item.end === null ? ", ongoing" : ` to ${s(item.end)}`}`;
  return `${item.lane} ${item.kind} ${when}${item.label ? ": " + item.label : ""}`;
}

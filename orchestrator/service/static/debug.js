// The page's debug record: `window.turntaker`, for the browser tests (tests/browser/) and the
// curious (open the console). It only listens to what the page's parts emit (emitter.js) and
// reads their state through getters: no production path writes into it, and the page runs the
// same without it. Node tests it (tests/js/debug.test.mjs).
//
// What it holds (bounded: the oldest entries go):
//   state, inputState, responseState, playbackState  what the state fields show (view.js)
//   interruptResponse, interruption   the settings the page acts on (settings.js)
//   audio            "running" through a drop, "stopped" once given up (audio.js)
//   resume           the live ResumeState (reconnect.js): session id, token, last seq, gaps
//   backoff          reconnect.js BACKOFF overrides; a test may set it to shorten the schedule
//   send(event)      sends a client event as the page would (connection.js)
//   events   [{t, dir, type, seq?, response_id?, turn_detection?, status?, reason?}]
//            (event-summary.js; dir ">" sent, "<" processed, "~" only logged)
//   seqs     server_event_seq of each event processed in this session, in order
//   played_ms          rendered ms of the response reported last by the worklet
//   playedBy           rid -> rendered ms (worklet reports, clear and finish)
//   statsLog           [{t, rid, played, paused}] worklet reports (samples)
//   received           rid -> samples of audio deltas handed to the worklet
//   acks               playback.ack events made: {...event, samples, t}
//   acknowledged       playback.acknowledged events: what the server holds of each reply
//   clears   rid -> {trigger, t_trigger, t_cleared_msg, t_silent, played, dropped}: the page
//            cut it off (trigger), the server's output_audio_buffer.cleared came, the worklet
//            went silent (and where its cursor stood, samples)
//   pauses   rid -> its latest pause: {t_paused_msg, t_paused, paused_played, paused_queued,
//            paused_applied, t_resumed_msg, t_resumed, resumed_played, resumed_applied, ended}:
//            *_msg when the page took the server's event, the others when the worklet took it
//            and where its cursor (samples) stood then; ended: "resumed" or what cut it off
//   decisions          overlap.decision events: [{t, response_id, decision, reason, speech_ms,
//                      transcript}]
//   drops    one per lost socket: {t_lost, code, attempts, t_resumed, outcome, last_seq,
//            replayed_from_seq}
//   farewell           the Disconnect-while-down socket: {t, outcome, token}

import { responseId, summarize } from "./event-summary.js";
import { RATE } from "./player.js";

// Keeps `list` under `limit` by dropping its oldest `drop`.
function bound(list, limit, drop) {
  if (list.length > limit) list.splice(0, drop);
}

// Keeps at most `limit` keys in `record` (insertion order: the first is the oldest).
function boundKeys(record, limit) {
  const keys = Object.keys(record);
  if (keys.length > limit) delete record[keys[0]];
}

// parts: {emitter, connection, settings, view, audio}; now: the clock (ms).
export function debugRecord({ emitter, connection, settings, view, audio },
                            now = () => performance.now()) {
  const tt = {
    send: (event) => connection.send(event),
    get state() { return view.statuses.state; },
    get inputState() { return view.statuses.inputState; },
    get responseState() { return view.statuses.responseState; },
    get playbackState() { return view.statuses.playbackState; },
    get interruptResponse() { return settings.interruptResponse; },
    get interruption() { return settings.interruption; },
    get audio() { return audio.state; },
    get resume() { return connection.link; },
    get backoff() { return connection.backoffOptions; },
    set backoff(options) { connection.backoffOptions = options; },
    played_ms: 0,
    playedBy: {},
    events: [],
    acks: [],
    clears: {},
    statsLog: [],
    received: {},
    acknowledged: [],
    pauses: {},
    decisions: [],
    seqs: [],
    drops: [],
    farewell: undefined,
  };

  emitter.on("session-start", () => { tt.seqs = []; });

  emitter.on("wire", ({ dir, event }) => {
    const t = now();
    if (dir === "<" && event.server_event_seq !== undefined) {
      tt.seqs.push(event.server_event_seq);
      bound(tt.seqs, 20000, 5000);
    }
    tt.events.push(summarize(dir, event, t));
    bound(tt.events, 5000, 1000);
    if (dir !== "<") return;
    if (event.type === "overlap.decision") {
      tt.decisions.push({
        t, response_id: event.response_id, decision: event.decision, reason: event.reason,
        speech_ms: event.speech_ms, transcript: event.transcript ?? null,
      });
      bound(tt.decisions, 64, 16);
    } else if (event.type === "playback.acknowledged") {
      tt.acknowledged.push({
        response_id: event.response_id, played_ms: event.played_ms,
        committed_ms: event.committed_ms, history_committed: event.history_committed,
      });
      bound(tt.acknowledged, 256, 64);
    } else if (event.type === "output_audio_buffer.cleared") {
      // For a response cut off before (speech): when the server's word came. One cut off by
      // this very event gets it from its "interrupt" below.
      const c = tt.clears[responseId(event)];
      if (c && c.t_cleared_msg === null) c.t_cleared_msg = t;
    }
  });

  emitter.on("interrupt", ({ rid, trigger }) => {
    const t = now();
    tt.clears[rid] = {
      trigger, t_trigger: t, t_cleared_msg: trigger === "output_audio_buffer.cleared" ? t : null,
      t_silent: null,
    };
    boundKeys(tt.clears, 64);
    const p = tt.pauses[rid];
    if (p && p.ended === null) p.ended = trigger;
  });

  emitter.on("pause", ({ rid }) => {
    tt.pauses[rid] = {
      t_paused_msg: now(), paused_played: null, paused_queued: null,
      t_paused: null, t_resumed_msg: null, t_resumed: null, resumed_played: null, ended: null,
    };
    boundKeys(tt.pauses, 64);
  });

  emitter.on("resume", ({ rid }) => {
    const p = tt.pauses[rid];
    if (p) Object.assign(p, { t_resumed_msg: now(), ended: "resumed" });
  });

  emitter.on("audio", ({ rid, samples }) => {
    if (!(rid in tt.received)) {
      const keys = Object.keys(tt.received);
      if (keys.length >= 64) delete tt.received[keys[0]];
    }
    tt.received[rid] = (tt.received[rid] || 0) + samples;
  });

  emitter.on("worklet", (msg) => {
    const t = now();
    if (msg.type === "stats") {
      if (msg.rid === null) return;
      const ms = msg.played * 1000 / RATE;
      tt.playedBy[msg.rid] = ms;
      tt.played_ms = ms;
      tt.statsLog.push({ t, rid: msg.rid, played: msg.played, paused: msg.paused });
      bound(tt.statsLog, 4000, 1000);
    } else if (msg.type === "paused" || msg.type === "resumed") {
      const p = tt.pauses[msg.rid];
      if (p && msg.type === "paused") {
        Object.assign(p, {
          t_paused: t, paused_played: msg.played, paused_queued: msg.queued,
          paused_applied: msg.applied,
        });
      }
      if (p && msg.type === "resumed") {
        Object.assign(p, { t_resumed: t, resumed_played: msg.played, resumed_applied: msg.applied });
      }
    } else if (msg.type === "cleared") {
      const c = tt.clears[msg.rid];
      if (c) Object.assign(c, { t_silent: t, played: msg.played, dropped: msg.dropped });
      tt.playedBy[msg.rid] = msg.played * 1000 / RATE;
    } else if (msg.type === "finished") {
      tt.playedBy[msg.rid] = msg.played * 1000 / RATE;
    }
  });

  emitter.on("ack", ({ event, samples }) => {
    tt.acks.push({ ...event, samples, t: now() });
    bound(tt.acks, 256, 64);
  });

  emitter.on("lost", ({ code, lastSeq }) => {
    tt.drops.push({
      t_lost: now(), code, attempts: 0, t_resumed: null, outcome: null, last_seq: lastSeq,
      replayed_from_seq: null,
    });
    bound(tt.drops, 64, 16);
  });

  emitter.on("retry", () => {
    const drop = tt.drops[tt.drops.length - 1];
    if (drop) drop.attempts += 1;
  });

  emitter.on("reconnected", ({ outcome, replayedFrom }) => {
    const drop = tt.drops[tt.drops.length - 1];
    if (!drop) return;
    Object.assign(drop, { t_resumed: now(), outcome });
    if (outcome === "resumed") drop.replayed_from_seq = replayedFrom;
  });

  emitter.on("farewell", () => { tt.farewell = { t: now(), outcome: null }; });
  emitter.on("farewell-answer", ({ outcome, token }) => {
    if (tt.farewell) Object.assign(tt.farewell, { outcome, token });
  });

  return tt;
}

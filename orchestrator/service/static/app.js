// The Turntaker page: microphone -> input_audio_buffer.append, output audio -> playback worklet,
// barge-in handled where it is heard (the worklet drops the interrupted response's audio and the
// page reports exactly what was played with playback.ack). In the interruption policy's pause
// mode the worklet holds the answer on `output_audio_buffer.paused` and plays on from the same
// sample on `output_audio_buffer.resumed`; the ACK's cursor stands still meanwhile.
// A lost socket is dialled again and the session resumed (reconnect.js): the audio pipeline runs
// on meanwhile and the replayed events play on where the page left off.
import { BoundedSet } from "./playback-core.js";
import { Backoff, RESUME_FAILED, ResumeState, freshUrl, resumeUrl } from "./reconnect.js";

const RATE = 24000;
const $ = (id) => document.getElementById(id);

// Counters for tests and the curious.
const tt = {
  send: (event) => send(event),
  state: "disconnected",
  inputState: "-",
  responseState: "-",
  played_ms: 0, // rendered ms of the response playing last
  playedBy: {}, // rid -> rendered ms (from worklet stats and clear/finish reports)
  events: [], // [{t, dir, type, response_id?}]
  acks: [], // playback.ack events sent
  clears: {}, // rid -> {trigger, t_trigger, t_cleared_msg, t_silent, played, dropped}
  statsLog: [], // [{t, rid, played, paused}]
  interruptResponse: true,
  interruption: "immediate", // the mode the server holds (from session.created / updated)
  playbackState: "-",
  received: {}, // rid -> samples of audio deltas handed to the worklet
  acknowledged: [], // playback.acknowledged events: what the server holds of each reply
  // rid -> its latest pause (a response can be paused again after a resume): {t_paused_msg, t_paused, paused_played, paused_queued, t_resumed_msg, t_resumed,
  //         resumed_played, ended}: *_msg when the server's event came, the others when the
  //         worklet took it and where its cursor (samples) stood then
  pauses: {},
  decisions: [], // overlap.decision events: [{t, response_id, decision, reason, speech_ms}]
  seqs: [], // server_event_seq of each event processed in this session, in order
  // One per lost socket: {t_lost, code, attempts, t_resumed, outcome, last_seq, replayed_from_seq}
  drops: [],
  resume: null, // the ResumeState (session id, last seq, duplicates dropped, gaps)
  backoff: {}, // Backoff options (reconnect.js BACKOFF): a test may shorten the schedule
  get audio() { // the audio pipeline: "running" through a drop, "stopped" once given up
    return ctx ? ctx.state : "stopped";
  },
};
window.turntaker = tt;

let ws = null;
let ctx = null;
let stream = null;
let playback = null;
let capture = null;
let interrupted = new BoundedSet(64);
const items = new Map(); // rid -> audio item id
let finishedOnWire = new BoundedSet(64); // rids whose response.done was completed
let fullyPlayed = new BoundedSet(64); // rids played to the end and acknowledged
let currentRid = null;

// --- connection and resume ------------------------------------------------------------------
const link = new ResumeState(); // the session's sequence, token and phase (reconnect.js)
tt.resume = link;
let baseUrl = null; // the URL the user asked for; a resume adds the session id to it
let protocols = null;
let leaving = false; // the user pressed Disconnect: the close is final
let replaced = false; // another connection took the session over: do not take it back
let backoff = null; // set from a drop until resumed (or given up)
let lostAt = 0;
let retryTimer = null;
let answerTimer = null; // a resume unanswered this long is tried again on a new socket
const RESUME_ANSWER_MS = 10000;
// How long the farewell socket of a Disconnect while down waits for the resume's answer.
const FAREWELL_MS = 5000;
// playback.acks that fell into a drop, sent once resumed: an answer that finished playing
// while the socket was down still goes into the history. rid -> event; the latest wins.
const pendingAcks = new Map();

function log(dir, event) {
  const entry = { t: performance.now(), dir, type: event.type };
  if (event.server_event_seq !== undefined) entry.seq = event.server_event_seq;
  if (event.response_id) entry.response_id = event.response_id;
  else if (event.response && event.response.id) entry.response_id = event.response.id;
  const input = event.session && event.session.audio && event.session.audio.input;
  if (input && input.turn_detection) entry.turn_detection = input.turn_detection;
  if (event.type === "response.done") {
    entry.status = event.response.status;
    const details = event.response.status_details;
    if (details && details.reason) entry.reason = details.reason;
  }
  tt.events.push(entry);
  if (tt.events.length > 5000) tt.events.splice(0, 1000);
  if (event.type.endsWith(".delta") && event.type.includes("audio.delta")) return;
  let line = `${(entry.t / 1000).toFixed(3)} ${dir} ${event.type}` +
    (entry.response_id ? ` ${entry.response_id}` : "");
  if (event.type === "overlap.decision") {
    line += ` ${event.decision} reason=${event.reason} speech_ms=${event.speech_ms}` +
      (event.transcript ? ` heard=${JSON.stringify(event.transcript)}` : "");
  }
  const box = $("log");
  box.textContent += line + "\n";
  if (box.textContent.length > 40000) box.textContent = box.textContent.slice(-30000);
  box.scrollTop = box.scrollHeight;
}

// Returns whether it went out. While the socket is down or the resume unanswered nothing does
// (mic audio included: it is dropped, not queued without bound), but session.resume itself.
function send(event) {
  if (!ws || ws.readyState !== WebSocket.OPEN) return false;
  if (!link.accepting() && event.type !== "session.resume") return false;
  ws.send(JSON.stringify(event));
  if (event.type !== "input_audio_buffer.append") log(">", event);
  return true;
}

function setState(which, value) {
  tt[which] = value;
  const id = {
    state: "conn-state", inputState: "input-state", responseState: "response-state",
    playbackState: "playback-state",
  }[which];
  $(id).textContent = value;
  if (which === "playbackState") $(id).classList.toggle("paused", value.startsWith("paused"));
}

// --- transcript ---------------------------------------------------------------------------
const lines = new Map(); // key -> element
function line(key, cls) {
  let el = lines.get(key);
  if (!el) {
    el = document.createElement("div");
    el.className = cls;
    el.textContent = cls === "user" ? "You: " : "Assistant: ";
    $("transcript").appendChild(el);
    lines.set(key, el);
    if (lines.size > 200) lines.delete(lines.keys().next().value);
  }
  return el;
}
function appendText(key, cls, text, replace = false) {
  const el = line(key, cls);
  const prefix = cls === "user" ? "You: " : "Assistant: ";
  el.textContent = replace ? prefix + text : el.textContent + text;
  $("transcript").scrollTop = $("transcript").scrollHeight;
}

// --- audio --------------------------------------------------------------------------------
function b64ToInt16(b64) {
  const bin = atob(b64);
  const bytes = new Uint8Array(bin.length & ~1);
  for (let i = 0; i < bytes.length; i++) bytes[i] = bin.charCodeAt(i);
  return new Int16Array(bytes.buffer);
}
function bytesToB64(buffer) {
  const bytes = new Uint8Array(buffer);
  let bin = "";
  for (let i = 0; i < bytes.length; i += 0x8000) {
    bin += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  }
  return btoa(bin);
}

function ack(rid, playedSamples) {
  const event = { type: "playback.ack", response_id: rid, played_ms: Math.floor(playedSamples * 1000 / RATE) };
  if (items.has(rid)) event.item_id = items.get(rid);
  tt.acks.push({ ...event, samples: playedSamples, t: performance.now() });
  if (tt.acks.length > 256) tt.acks.splice(0, 64);
  if (send(event)) sendEventAck(true);
  else if (link.canResume() && !leaving) pendingAcks.set(rid, event);
}

// Lets the server free the journal of what the page has processed (harmless if it ignores it).
function sendEventAck(force) {
  const event = link.eventAck(50, force);
  if (event) send(event);
}

function interrupt(rid, trigger) {
  if (!rid || interrupted.has(rid)) return;
  interrupted.add(rid);
  tt.clears[rid] = { trigger, t_trigger: performance.now(), t_cleared_msg: null, t_silent: null };
  const keys = Object.keys(tt.clears);
  if (keys.length > 64) delete tt.clears[keys[0]];
  if (playback) playback.port.postMessage({ type: "clear", rid });
  const p = tt.pauses[rid];
  if (p && p.ended === null) p.ended = trigger;
}

function pause(rid) {
  // Only the latest response can be paused; a pause naming another is stale (rule 4's spirit).
  if (!rid || rid !== currentRid || interrupted.has(rid) || !playback) return;
  tt.pauses[rid] = {
    t_paused_msg: performance.now(), paused_played: null, paused_queued: null,
    t_paused: null, t_resumed_msg: null, t_resumed: null, resumed_played: null, ended: null,
  };
  const keys = Object.keys(tt.pauses);
  if (keys.length > 64) delete tt.pauses[keys[0]];
  playback.port.postMessage({ type: "pause", rid });
  setState("playbackState", "paused");
}

function resume(rid) {
  const p = tt.pauses[rid];
  if (!p || p.ended !== null || interrupted.has(rid) || !playback) return;
  p.t_resumed_msg = performance.now();
  p.ended = "resumed";
  playback.port.postMessage({ type: "resume", rid });
  setState("playbackState", "playing");
}

function showDecision(event) {
  const d = {
    t: performance.now(), response_id: event.response_id, decision: event.decision,
    reason: event.reason, speech_ms: event.speech_ms, transcript: event.transcript ?? null,
  };
  tt.decisions.push(d);
  if (tt.decisions.length > 64) tt.decisions.splice(0, 16);
  $("overlap-decision").textContent =
    `${d.decision} (${d.reason}, ${d.speech_ms} ms of speech` +
    (d.transcript ? `, heard "${d.transcript}"` : "") + `) for ${d.response_id}`;
}

function onWorklet(msg) {
  if (msg.type === "stats") {
    if (msg.rid !== null) {
      const ms = msg.played * 1000 / RATE;
      tt.playedBy[msg.rid] = ms;
      tt.played_ms = ms;
      const last = tt.statsLog[tt.statsLog.length - 1];
      tt.statsLog.push({ t: performance.now(), rid: msg.rid, played: msg.played, paused: msg.paused });
      if (tt.statsLog.length > 4000) tt.statsLog.splice(0, 1000);
      $("played").textContent = Math.round(ms);
      if (msg.paused) setState("playbackState", "paused");
      else if ((!last || last.rid !== msg.rid || last.played !== msg.played) &&
               !fullyPlayed.has(msg.rid) && !interrupted.has(msg.rid)) {
        // A report can trail the end (or the clear) it covers: it must not undo that state.
        setState("playbackState", "playing");
      }
    }
  } else if (msg.type === "paused" || msg.type === "resumed") {
    // Where the worklet's cursor stood when it took the message: the test of "plays on from
    // where it stopped" compares the two.
    const p = tt.pauses[msg.rid];
    const at = performance.now();
    if (p && msg.type === "paused") {
      Object.assign(p, { t_paused: at, paused_played: msg.played, paused_queued: msg.queued, paused_applied: msg.applied });
    }
    if (p && msg.type === "resumed") {
      Object.assign(p, { t_resumed: at, resumed_played: msg.played, resumed_applied: msg.applied });
    }
  } else if (msg.type === "cleared") {
    setState("playbackState", "cleared");
    const c = tt.clears[msg.rid];
    if (c) Object.assign(c, { t_silent: performance.now(), played: msg.played, dropped: msg.dropped });
    tt.playedBy[msg.rid] = msg.played * 1000 / RATE;
    ack(msg.rid, msg.played);
  } else if (msg.type === "finished") {
    tt.playedBy[msg.rid] = msg.played * 1000 / RATE;
    if (!interrupted.has(msg.rid)) {
      setState("playbackState", "finished");
      fullyPlayed.add(msg.rid);
      ack(msg.rid, msg.played);
    }
  }
}

function newPlayback() {
  const node = new AudioWorkletNode(ctx, "turntaker-playback", { numberOfInputs: 0, outputChannelCount: [1] });
  node.port.onmessage = (e) => {
    // A replaced node's last reports (a new session started) are of a session that is gone.
    if (node === playback) onWorklet(e.data);
  };
  node.connect(ctx.destination);
  return node;
}

async function startAudio() {
  ctx = new AudioContext({ sampleRate: RATE });
  await ctx.audioWorklet.addModule("/static/capture-worklet.js");
  await ctx.audioWorklet.addModule("/static/playback-worklet.js");
  playback = newPlayback();
  stream = await navigator.mediaDevices.getUserMedia({
    audio: { channelCount: 1, echoCancellation: false, noiseSuppression: false, autoGainControl: false },
  });
  const source = ctx.createMediaStreamSource(stream);
  capture = new AudioWorkletNode(ctx, "turntaker-capture", { outputChannelCount: [1] });
  capture.port.onmessage = (e) => {
    // While the socket is down the mic's audio is dropped (send would drop it too), unencoded.
    if (link.accepting()) send({ type: "input_audio_buffer.append", audio: bytesToB64(e.data) });
  };
  const mute = ctx.createGain();
  mute.gain.value = 0;
  source.connect(capture).connect(mute).connect(ctx.destination);
  await ctx.resume();
}

function stopAudio() {
  if (stream) stream.getTracks().forEach((t) => t.stop());
  if (ctx) ctx.close();
  stream = ctx = playback = capture = null;
}

// --- session ------------------------------------------------------------------------------
function sessionUpdate() {
  tt.interruptResponse = $("interrupt").checked;
  const mode = $("interruption").value;
  const interruption = { mode };
  if (mode === "pause") {
    interruption.min_speech_ms = Number($("min-speech").value);
    interruption.resume_after_ms = Number($("resume-after").value);
  }
  send({
    type: "session.update",
    session: {
      type: "realtime",
      output_modalities: ["audio"],
      audio: {
        input: {
          transcription: { model: "whisper" },
          turn_detection: turnDetection(interruption),
        },
      },
    },
  });
}

// server_vad takes the silence knobs, semantic_vad its eagerness (the server refuses the
// other type's knobs by name rather than ignore them).
function turnDetection(interruption) {
  const type = $("turn-type").value;
  const common = {
    type,
    interrupt_response: tt.interruptResponse,
    interruption,
    preemptive_response: $("preemptive").checked,
  };
  if (type === "semantic_vad") return { ...common, eagerness: $("eagerness").value };
  return {
    ...common,
    threshold: Number($("threshold").value),
    silence_duration_ms: Number($("silence").value),
  };
}

// Each server event passes the sequence check first: a replay that overlaps what already came
// is dropped there, so no event (no audio sample) is processed twice.
function onMessage(event) {
  const { process, ignored, outcome } = link.receive(event);
  for (const e of ignored) log("~", e); // in the log, never acted on
  if (outcome === "resume_failed") {
    // The session is gone; the connection goes on as a new one: start afresh on it, as a first
    // connect does (the session.update before its session.created is handled).
    newConversation();
    sessionUpdate();
  }
  for (const e of process) {
    if (e.server_event_seq !== undefined) {
      tt.seqs.push(e.server_event_seq);
      if (tt.seqs.length > 20000) tt.seqs.splice(0, 5000);
    }
    onServer(e);
  }
  if (outcome === "resumed" || outcome === "resume_failed") reconnected(outcome, event);
  if (outcome === "replaced") replaced = true; // the server closes this socket with 1000 next
  sendEventAck(false);
}

function onServer(event) {
  log("<", event);
  const rid = event.response_id || (event.response && event.response.id);
  switch (event.type) {
    case "session.created":
    case "session.updated": {
      const td = event.session && event.session.audio && event.session.audio.input.turn_detection;
      tt.interruptResponse = !td || td.interrupt_response !== false;
      if (td) {
        $("turn-type").value = td.type;
        if (td.type === "semantic_vad") $("eagerness").value = td.eagerness;
        else {
          $("threshold").value = td.threshold;
          $("silence").value = td.silence_duration_ms;
        }
        $("preemptive").checked = td.preemptive_response === true;
      }
      showTurnKnobs();
      $("interrupt").checked = tt.interruptResponse;
      // The page shows (and acts on) the mode the server holds: a server that does not know
      // the policy echoes none and interrupts at once, and so does the page.
      const policy = td && td.interruption;
      tt.interruption = (policy && policy.mode) || "immediate";
      $("interruption").value = tt.interruption;
      showPolicyKnobs();
      if (policy && policy.min_speech_ms !== undefined) $("min-speech").value = policy.min_speech_ms;
      if (policy && policy.resume_after_ms !== undefined) $("resume-after").value = policy.resume_after_ms;
      break;
    }
    case "input_audio_buffer.speech_started":
      setState("inputState", "speaking");
      // In pause mode the server says what to do (paused, then one overlap.decision); dropping
      // the answer here would lose what a "yeah" must not cost.
      if (tt.interruptResponse && tt.interruption === "immediate" && currentRid &&
          !finishedPlaying(currentRid)) {
        interrupt(currentRid, "speech_started");
      }
      break;
    case "input_audio_buffer.speech_stopped":
      setState("inputState", "silent");
      break;
    case "input_audio_buffer.committed":
      setState("inputState", "committed");
      break;
    case "conversation.item.input_audio_transcription.delta":
      appendText(event.item_id, "user", event.delta);
      break;
    case "conversation.item.input_audio_transcription.completed":
      appendText(event.item_id, "user", event.transcript, true);
      break;
    case "response.created":
      currentRid = rid;
      setState("responseState", "in_progress");
      break;
    case "response.output_item.added":
      items.set(rid, event.item.id);
      if (items.size > 64) items.delete(items.keys().next().value);
      break;
    case "response.output_audio.delta":
      if (interrupted.has(rid) || !playback) break; // a late delta of an interrupted response
      items.set(rid, event.item_id);
      {
        const samples = b64ToInt16(event.delta);
        if (!(rid in tt.received)) {
          const keys = Object.keys(tt.received);
          if (keys.length >= 64) delete tt.received[keys[0]];
        }
        tt.received[rid] = (tt.received[rid] || 0) + samples.length;
        playback.port.postMessage({ type: "push", rid, samples: samples.buffer }, [samples.buffer]);
      }
      break;
    case "response.output_audio_transcript.delta":
    case "response.output_text.delta":
      if (!interrupted.has(rid)) appendText(rid, "assistant", event.delta);
      break;
    case "output_audio_buffer.paused":
      pause(rid);
      break;
    case "output_audio_buffer.resumed":
      resume(rid);
      break;
    case "overlap.decision":
      showDecision(event);
      break;
    case "output_audio_buffer.cleared":
      interrupt(rid, "output_audio_buffer.cleared"); // no-op if already interrupted
      if (tt.clears[rid] && tt.clears[rid].t_cleared_msg === null) {
        tt.clears[rid].t_cleared_msg = performance.now();
      }
      markCut(rid);
      break;
    case "response.done": {
      const status = event.response.status;
      setState("responseState", status);
      if (status === "cancelled") {
        interrupt(rid, "response.done");
        markCut(rid);
      } else if (status === "completed" && !interrupted.has(rid)) {
        finishedOnWire.add(rid);
        if (playback) playback.port.postMessage({ type: "done", rid });
      }
      break;
    }
    case "playback.acknowledged":
      tt.acknowledged.push({
        response_id: event.response_id, played_ms: event.played_ms,
        committed_ms: event.committed_ms, history_committed: event.history_committed,
      });
      if (tt.acknowledged.length > 256) tt.acknowledged.splice(0, 64);
      break;
    case "error":
      console.warn("server error", event.error);
      break;
  }
}

function finishedPlaying(rid) {
  return fullyPlayed.has(rid);
}

function markCut(rid) {
  const el = lines.get(rid);
  if (el) el.classList.add("cut");
}

async function connect() {
  $("connect").disabled = true;
  setState("state", "connecting");
  try {
    await startAudio();
  } catch (error) {
    setState("state", "error: " + error.name);
    $("connect").disabled = false;
    return;
  }
  // Browsers cannot set an Authorization header: the key rides in a subprotocol, which the
  // server never echoes (it answers "realtime").
  protocols = ["realtime"];
  const key = $("key").value.trim();
  if (key) protocols.push("openai-insecure-api-key." + key);
  leaving = replaced = false;
  link.start();
  tt.seqs = [];
  pendingAcks.clear();
  try {
    baseUrl = freshUrl($("url").value);
    dial(baseUrl);
  } catch (error) {
    finish("error: " + error.name); // a URL that is no ws:// or wss:// URL
  }
}

function dial(url) {
  const sock = new WebSocket(url, protocols);
  ws = sock;
  // A socket given up on (Disconnect, an unanswered resume) may still report: only the
  // current one speaks for the connection.
  sock.onopen = () => sock === ws && opened();
  sock.onmessage = (e) => sock === ws && onMessage(JSON.parse(e.data));
  sock.onclose = (e) => sock === ws && closed(e);
}

function opened() {
  $("disconnect").disabled = false;
  if (link.phase === "down") {
    // The resume is the connection's first client event; the provisional session.created the
    // server may send first is ignored (reconnect.js).
    send(link.beginResume());
    const sock = ws;
    answerTimer = setTimeout(() => sock.close(4000, "session.resume unanswered"), RESUME_ANSWER_MS);
    return;
  }
  setState("state", "connected");
  sessionUpdate();
}

function closed(e) {
  clearTimeout(answerTimer);
  // Nothing to resume after our own Disconnect, a server's normal close (the session ended),
  // a refusal (1008: the key or origin will not change), a takeover, or before the session began.
  const final = leaving || replaced || e.code === 1000 || e.code === 1008 || !link.canResume();
  if (final) {
    // A refusal (wrong key, foreign origin, session limit) says why in its close reason.
    finish(replaced ? "disconnected (session taken over by another connection)"
      : e.code === 1000 || e.code === 1005 ? "disconnected"
      : `disconnected (${e.code}${e.reason ? ": " + e.reason : ""})`);
    return;
  }
  if (backoff === null) {
    // The first loss: the audio pipeline keeps running, the worklet plays what it holds.
    backoff = new Backoff(tt.backoff);
    lostAt = performance.now();
    tt.drops.push({
      t_lost: lostAt, code: e.code, attempts: 0, t_resumed: null, outcome: null,
      last_seq: link.lastSeq, replayed_from_seq: null,
    });
    if (tt.drops.length > 64) tt.drops.splice(0, 16);
  }
  link.dropped();
  setState("state", "reconnecting…");
  const delay = backoff.next(performance.now() - lostAt);
  if (delay === null) {
    finish("disconnected (gave up reconnecting)");
    return;
  }
  retryTimer = setTimeout(() => {
    retryTimer = null;
    tt.drops[tt.drops.length - 1].attempts += 1;
    dial(resumeUrl(baseUrl, link.sessionId));
  }, delay);
}

// The answer to a resume: the same session plays on, or (failed) a new one has begun.
function reconnected(outcome, event) {
  clearTimeout(answerTimer);
  backoff = null;
  const drop = tt.drops[tt.drops.length - 1];
  if (drop) {
    Object.assign(drop, { t_resumed: performance.now(), outcome });
    if (outcome === "resumed") drop.replayed_from_seq = event.replayed_from_seq ?? null;
  }
  if (outcome === "resumed") {
    setState("state", "connected (resumed)");
    const acks = [...pendingAcks.values()];
    pendingAcks.clear();
    for (const a of acks) send(a);
    if (acks.length) sendEventAck(true);
  } else {
    setState("state", "connected (new session: resume failed)");
  }
}

// A new session on the same page: the old one's conversation, queued audio and ACKs are gone.
function newConversation() {
  tt.seqs = [];
  pendingAcks.clear();
  lines.clear();
  $("transcript").textContent = "";
  items.clear();
  interrupted = new BoundedSet(64);
  finishedOnWire = new BoundedSet(64);
  fullyPlayed = new BoundedSet(64);
  currentRid = null;
  if (playback) {
    playback.disconnect();
    playback = newPlayback();
  }
  setState("inputState", "-");
  setState("responseState", "-");
  setState("playbackState", "-");
}

// The connection is over for good: the audio stops only here.
function finish(state) {
  clearTimeout(retryTimer);
  clearTimeout(answerTimer);
  retryTimer = answerTimer = null;
  backoff = null;
  link.stop();
  pendingAcks.clear();
  ws = null;
  setState("state", state);
  stopAudio();
  $("connect").disabled = false;
  $("disconnect").disabled = true;
}

// A deliberate close is 1000: it ends the session on the server at once (no grace, no resume).
function disconnect() {
  leaving = true;
  // Live, or a resume sent on this socket: the server takes the close after the resume.
  if (ws && ws.readyState === WebSocket.OPEN) {
    ws.close(1000);
    return;
  }
  const goodbye = link.farewell();
  if (ws) {
    // Still opening: its close frame never goes out (it reports 1006).
    ws.close(1000);
    ws = null;
  }
  // Down: the server keeps the session for its grace; end it now.
  if (goodbye) farewell(resumeUrl(baseUrl, goodbye.session_id), goodbye);
  finish("disconnected");
}

// One try, on a socket of its own: resume, then close with 1000 at the answer (reconnect.js).
function farewell(url, event) {
  const sock = new WebSocket(url, protocols);
  tt.farewell = { t: performance.now(), outcome: null };
  const timer = setTimeout(() => sock.close(1000), FAREWELL_MS);
  sock.onopen = () => sock.send(JSON.stringify(event));
  sock.onmessage = (e) => {
    const ev = JSON.parse(e.data);
    const failed = ev.type === "error" && ev.error && ev.error.code === RESUME_FAILED;
    if (ev.type !== "session.resumed" && !failed) return;
    // The rotated token too (as tt.resume holds the live one): a test checks it is void.
    const outcome = failed ? "resume_failed" : "ended";
    Object.assign(tt.farewell, { outcome, token: ev.resume_token ?? null });
    clearTimeout(timer);
    sock.close(1000);
  };
  sock.onclose = () => clearTimeout(timer);
}

$("url").value = `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/v1/realtime`;
// `/?interruption=pause` opens the page as the demo of pause mode; otherwise it asks for what
// the server does by default (and what an OpenAI client gets): immediate.
const wanted = new URLSearchParams(location.search).get("interruption");
if (wanted === "pause" || wanted === "immediate") $("interruption").value = wanted;
// The two knobs mean something only in pause mode.
function showPolicyKnobs() {
  const pause = $("interruption").value === "pause";
  $("min-speech").disabled = !pause;
  $("resume-after").disabled = !pause;
}
$("interruption").onchange = showPolicyKnobs;
showPolicyKnobs();
// Each turn-end type has its own knobs.
function showTurnKnobs() {
  const semantic = $("turn-type").value === "semantic_vad";
  $("eagerness").disabled = !semantic;
  $("threshold").disabled = semantic;
  $("silence").disabled = semantic;
}
$("turn-type").onchange = showTurnKnobs;
showTurnKnobs();
$("connect").onclick = connect;
$("disconnect").onclick = disconnect;
$("apply").onclick = sessionUpdate;

// The page's DOM (index.html): the state fields, the transcript, the event log, the last
// overlap decision and the settings form. It shows what it is told and reads the form; it
// decides nothing.

import { logLine, summarize } from "./event-summary.js";

const STATUS_IDS = Object.freeze({
  state: "conn-state",
  inputState: "input-state",
  responseState: "response-state",
  playbackState: "playback-state",
});
const TRANSCRIPT_LINES = 200;
const LOG_CHARS = 40000; // trimmed to the last LOG_KEPT when longer
const LOG_KEPT = 30000;

export class View {
  constructor(doc = document) {
    this.doc = doc;
    // What each state field shows, as text (the debug object reads it: debug.js).
    this.statuses = { state: "disconnected", inputState: "-", responseState: "-", playbackState: "-" };
    this.lines = new Map(); // transcript key (item or response id) -> its element
  }

  $(id) {
    return this.doc.getElementById(id);
  }

  status(which, value) {
    this.statuses[which] = value;
    const el = this.$(STATUS_IDS[which]);
    el.textContent = value;
    if (which === "playbackState") el.classList.toggle("paused", value.startsWith("paused"));
  }

  // The player's view (player.js).
  playback(state) {
    this.status("playbackState", state);
  }

  played(ms) {
    this.$("played").textContent = ms;
  }

  // --- connection --------------------------------------------------------------------------
  connecting() {
    this.$("connect").disabled = true;
    this.status("state", "connecting");
  }

  opened() {
    this.$("disconnect").disabled = false;
  }

  // The connection is over (or never began): Connect again.
  closed(state) {
    this.status("state", state);
    this.$("connect").disabled = false;
    this.$("disconnect").disabled = true;
  }

  url() {
    return this.$("url").value;
  }

  key() {
    return this.$("key").value.trim();
  }

  // --- transcript --------------------------------------------------------------------------
  transcript(key, cls, text, replace = false) {
    const el = this.line(key, cls);
    const prefix = cls === "user" ? "You: " : "Assistant: ";
    el.textContent = replace ? prefix + text : el.textContent + text;
    this.$("transcript").scrollTop = this.$("transcript").scrollHeight;
  }

  line(key, cls) {
    let el = this.lines.get(key);
    if (!el) {
      el = this.doc.createElement("div");
      el.className = cls;
      el.textContent = cls === "user" ? "You: " : "Assistant: ";
      this.$("transcript").appendChild(el);
      this.lines.set(key, el);
      if (this.lines.size > TRANSCRIPT_LINES) this.lines.delete(this.lines.keys().next().value);
    }
    return el;
  }

  cut(key) {
    const el = this.lines.get(key);
    if (el) el.classList.add("cut");
  }

  // A new conversation: the old one's transcript and states go.
  newConversation() {
    this.lines.clear();
    this.$("transcript").textContent = "";
    this.status("inputState", "-");
    this.status("responseState", "-");
    this.status("playbackState", "-");
  }

  // --- what happened -----------------------------------------------------------------------
  log(dir, event) {
    const line = logLine(summarize(dir, event, performance.now()), event);
    if (line === null) return;
    const box = this.$("log");
    box.textContent += line + "\n";
    if (box.textContent.length > LOG_CHARS) box.textContent = box.textContent.slice(-LOG_KEPT);
    box.scrollTop = box.scrollHeight;
  }

  decision(event) {
    this.$("overlap-decision").textContent =
      `${event.decision} (${event.reason}, ${event.speech_ms} ms of speech` +
      (event.transcript ? `, heard "${event.transcript}"` : "") + `) for ${event.response_id}`;
  }

  // --- the settings form -------------------------------------------------------------------
  // Its values, as settings.js takes them.
  form() {
    return {
      interrupt: this.$("interrupt").checked,
      interruption: this.$("interruption").value,
      minSpeech: this.$("min-speech").value,
      resumeAfter: this.$("resume-after").value,
      turnType: this.$("turn-type").value,
      eagerness: this.$("eagerness").value,
      threshold: this.$("threshold").value,
      silence: this.$("silence").value,
      preemptive: this.$("preemptive").checked,
      echo: this.$("echo").checked,
      noise: this.$("noise").value,
      voice: this.$("voice").value,
    };
  }

  // What the server holds (settings.heldSettings).
  showSettings({ turnDetection: td, interruptResponse, interruption, policy, echo, noise, voice }) {
    this.$("echo").checked = echo;
    this.$("noise").value = noise;
    // A name the list does not hold (OpenAI's "alloy", the session's default) is spoken in the
    // server's default voice, the list's first.
    const known = [...this.$("voice").options].some((o) => o.value === voice);
    this.$("voice").value = known ? voice : this.$("voice").options[0].value;
    if (td) {
      this.$("turn-type").value = td.type;
      if (td.type === "semantic_vad") this.$("eagerness").value = td.eagerness;
      else {
        this.$("threshold").value = td.threshold;
        this.$("silence").value = td.silence_duration_ms;
      }
      this.$("preemptive").checked = td.preemptive_response === true;
    }
    this.showTurnKnobs();
    this.$("interrupt").checked = interruptResponse;
    this.$("interruption").value = interruption;
    this.showPolicyKnobs();
    if (policy && policy.min_speech_ms !== undefined) this.$("min-speech").value = policy.min_speech_ms;
    if (policy && policy.resume_after_ms !== undefined) this.$("resume-after").value = policy.resume_after_ms;
  }

  // The two knobs mean something only in pause mode.
  showPolicyKnobs() {
    const pause = this.$("interruption").value === "pause";
    this.$("min-speech").disabled = !pause;
    this.$("resume-after").disabled = !pause;
  }

  // Each turn-end type has its own knobs.
  showTurnKnobs() {
    const semantic = this.$("turn-type").value === "semantic_vad";
    this.$("eagerness").disabled = !semantic;
    this.$("threshold").disabled = semantic;
    this.$("silence").disabled = semantic;
  }

  // The page as it opens: the server it came from, the mode `/?interruption=` asks for (pause:
  // the demo of pause mode; otherwise what the server does by default, and what an OpenAI
  // client gets: immediate), and the buttons.
  init(location, { connect, disconnect, apply }) {
    this.$("url").value = `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/v1/realtime`;
    const wanted = new URLSearchParams(location.search).get("interruption");
    if (wanted === "pause" || wanted === "immediate") this.$("interruption").value = wanted;
    this.$("interruption").onchange = () => this.showPolicyKnobs();
    this.showPolicyKnobs();
    this.$("turn-type").onchange = () => this.showTurnKnobs();
    this.showTurnKnobs();
    this.$("connect").onclick = connect;
    this.$("disconnect").onclick = disconnect;
    this.$("apply").onclick = apply;
  }
}

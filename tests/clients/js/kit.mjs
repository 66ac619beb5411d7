// What tests/clients/kit.py is for the Python clients, for the JavaScript one: a real-time
// microphone, the conversation every client holds and the report the pytest side checks.
import { readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join, basename } from "node:path";
import { parseArgs } from "node:util";

export const RATE = 24000;
const CHUNK_MS = 100;
const CHUNK_BYTES = (RATE * 2 * CHUNK_MS) / 1000;
export const INSTRUCTIONS = "You are a helpful voice assistant. Answer in one short sentence.";
export const MAX_OUTPUT_TOKENS = 24;
export const WEATHER = "Sunny.";

const now = () => performance.now() / 1000;
const sleep = (s) => new Promise((resolve) => setTimeout(resolve, Math.max(0, s) * 1000));

export function args() {
  const { values } = parseArgs({
    options: {
      url: { type: "string" },
      speech: { type: "string" },
      report: { type: "string" },
      timeout: { type: "string", default: "120" },
    },
  });
  return { ...values, timeout: Number(values.timeout) };
}

export function speech(folder) {
  const said = {};
  for (const name of readdirSync(folder).filter((n) => n.endsWith(".pcm"))) {
    said[basename(name, ".pcm")] = readFileSync(join(folder, name));
  }
  return said;
}

/** 100 ms of pcm16 every 100 ms, silence when nobody speaks. */
export class Microphone {
  #send;
  #pending = Buffer.alloc(0);
  #spoken = null;
  #running = false;

  constructor(send) {
    this.#send = send;
  }

  say(pcm) {
    this.#pending = Buffer.concat([this.#pending, pcm]);
    return new Promise((resolve) => (this.#spoken = resolve));
  }

  async run() {
    this.#running = true;
    const began = now();
    for (let n = 0; this.#running; n++) {
      await sleep(began + (n * CHUNK_MS) / 1000 - now());
      const chunk = Buffer.alloc(CHUNK_BYTES);
      this.#pending.copy(chunk, 0, 0, Math.min(CHUNK_BYTES, this.#pending.length));
      this.#pending = this.#pending.subarray(CHUNK_BYTES);
      if (this.#pending.length === 0 && this.#spoken) {
        this.#spoken();
        this.#spoken = null;
      }
      // An ArrayBuffer of exactly this chunk.
      this.#send(chunk.buffer.slice(chunk.byteOffset, chunk.byteOffset + chunk.length));
    }
  }

  stop() {
    this.#running = false;
  }
}

class Reply {
  constructor(key, phase) {
    Object.assign(this, { key, phase, itemId: null, firstAudio: null, lastAudio: 0, audioBytes: 0, transcript: "" });
    Object.assign(this, { done: false, interrupted: null, audioAfterInterrupt: 0 });
  }
  get seconds() {
    return this.audioBytes / 2 / RATE;
  }
  get playing() {
    if (this.firstAudio === null) return false;
    const t = now();
    return !this.done || t < this.firstAudio + this.seconds || t < this.lastAudio + 0.3;
  }
  // Seconds of it the app had but had not yet played (in real time from its first audio)
  // when the library said it was interrupted.
  get unplayedAtInterrupt() {
    if (this.interrupted === null || this.firstAudio === null) return 0;
    return Math.max(0, this.seconds - (this.interrupted - this.firstAudio));
  }
  asDict() {
    return {
      key: this.key,
      phase: this.phase,
      item_id: this.itemId,
      audio_bytes: this.audioBytes,
      transcript: this.transcript,
      done: this.done,
      interrupted: this.interrupted !== null,
      unplayed_at_interrupt: this.unplayedAtInterrupt,
      audio_after_interrupt: this.audioAfterInterrupt,
    };
  }
}

export class Conversation {
  phase = "connect";
  replies = [];
  interruptions = [];
  toolCalls = [];
  context = null;
  errors = [];
  serverErrors = [];
  // kit.py `late_cancels`: a response.cancel that crossed the server's own cancel on the wire.
  lateCancels = [];
  lastDoneStatus = null;
  emptyReplies = []; // phases in which a response completed with nothing said
  log = [];
  began = now();

  note(text) {
    this.log.push(`${(now() - this.began).toFixed(2).padStart(7)} ${this.phase.padEnd(8)} ${text}`);
  }

  #reply(key) {
    if (key === undefined || key === null) return this.replies.at(-1) ?? null;
    return this.replies.find((r) => r.key === key) ?? null;
  }

  replyStarted(key) {
    const found = key ? this.#reply(key) : null;
    if (found) return found;
    const reply = new Reply(key ?? `reply${this.replies.length}`, this.phase);
    this.replies.push(reply);
    this.note(`reply started ${reply.key}`);
    return reply;
  }

  audio(bytes, key) {
    const reply = this.#reply(key) ?? this.replyStarted(key);
    if (reply.interrupted !== null) {
      reply.audioAfterInterrupt += bytes;
      this.note(`audio AFTER interrupt ${reply.key} ${bytes} bytes`);
      return;
    }
    if (reply.firstAudio === null) {
      reply.firstAudio = now();
      this.note(`first audio ${reply.key}`);
    }
    reply.audioBytes += bytes;
    reply.lastAudio = now();
  }

  transcript(delta, key) {
    const reply = this.#reply(key) ?? this.replyStarted(key);
    if (reply.interrupted === null) reply.transcript += delta;
  }

  replyDone(key) {
    const reply = this.#reply(key);
    if (reply && !reply.done) {
      reply.done = true;
      this.note(`reply done ${reply.key} ${reply.seconds.toFixed(2)} s ${JSON.stringify(reply.transcript)}`);
    }
  }

  interrupted(how, key) {
    this.interruptions.push(how);
    const reply = this.#reply(key);
    if (reply && reply.interrupted === null && reply.playing) {
      reply.interrupted = now();
      this.note(`interrupted ${reply.key} (${how})`);
    } else {
      this.note(`interruption event ${how} (no reply playing)`);
    }
  }

  toolCall(name, args) {
    this.toolCalls.push({ name, arguments: args, phase: this.phase });
    this.note(`tool call ${name}(${JSON.stringify(args)})`);
    return WEATHER;
  }

  serverEvent(event) {
    if (process.env.CLIENT_DUMP && !event.type.includes("delta")) {
      this.note(`<- ${JSON.stringify(event).slice(0, 300)}`);
    }
    if (event.type === "error") {
      if (event.error?.code === "response_cancel_not_active" && this.lastDoneStatus === "cancelled") {
        this.lateCancels.push(event.error);
        this.note(`late cancel answered ${event.error.code}`);
      } else {
        this.serverErrors.push(event.error);
        this.note(`server error ${JSON.stringify(event.error)}`);
      }
    } else if (event.type === "response.created") {
      // A late cancel is one that crossed the cancelled response's done, before the next.
      this.lastDoneStatus = null;
    } else if (event.type === "response.done") {
      this.lastDoneStatus = event.response.status;
      const output = (event.response.output ?? []).map(
        (o) => `${o.type}:${JSON.stringify(o.name ?? (o.content ?? []).map((c) => c.transcript ?? c.text ?? "").join(""))}`,
      );
      this.note(`response.done ${event.response.id} ${event.response.status} [${output.join(", ")}]`);
      const out = event.response.output ?? [];
      const said = out.filter((o) => o.type === "message");
      const reply = this.replies.find((r) => r.key === event.response.id);
      if (reply && said.length) reply.itemId = said[0].id;
      const text = (o) => (o.content ?? []).map((c) => c.transcript ?? c.text ?? "").join("");
      if (event.response.status === "completed" && said.length === out.length && !said.some(text)) {
        this.emptyReplies.push(this.phase);
      }
    } else if (["conversation.item.truncated", "output_audio_buffer.cleared"].includes(event.type)) {
      this.note(`${event.type} ${JSON.stringify(event)}`);
    } else if (event.type === "conversation.context") {
      this.context = event;
    }
  }

  error(text) {
    this.errors.push(text);
    this.note(`error ${text}`);
  }

  async until(what, ready, timeoutS = 30) {
    const deadline = now() + timeoutS;
    for (;;) {
      const value = ready();
      if (value) return value;
      if (now() > deadline) throw new Error(`${what} not within ${timeoutS} s`);
      await sleep(0.02);
    }
  }

  spoken(phase) {
    return this.replies.filter((r) => r.phase === phase && r.audioBytes > 0);
  }

  async replyPlayed(phase, timeoutS = 30) {
    const reply = await this.until(
      `a spoken reply in ${phase} played out`,
      () => {
        if (this.emptyReplies.includes(phase)) throw new Error(`a reply in ${phase} completed with nothing said`);
        return this.spoken(phase).find((r) => r.done && !r.playing);
      },
      timeoutS,
    );
    await sleep(0.3); // the server's own idea of the playout may lag ours a little
    return reply;
  }

  report() {
    return {
      replies: this.replies.map((r) => r.asDict()),
      interruptions: this.interruptions,
      tool_calls: this.toolCalls,
      context: this.context,
      errors: this.errors,
      server_errors: this.serverErrors,
      late_cancels: this.lateCancels,
      log: this.log,
    };
  }
}

/** The same conversation as kit.converse in kit.py (its docstring says what each step is). */
export async function converse(conv, mic, said, hooks) {
  conv.phase = "question";
  await mic.say(said.question);
  await conv.replyPlayed("question");

  conv.phase = "story";
  await mic.say(said.story);
  const story = await conv.until("the story's first audio", () => conv.spoken("story")[0]);
  await hooks.requireToolCall();
  await sleep(1.0);
  conv.phase = "weather";
  await mic.say(said.weather);
  const history = async () => {
    conv.phase = "context";
    await hooks.retrieveContext();
    await conv.until("conversation.context", () => conv.context, 10);
  };
  try {
    await conv.until("an interruption of the story", () => story.interrupted, 10);
    await conv.until("a get_weather call", () => conv.toolCalls.length, 30);
    await conv.replyPlayed("weather");
  } catch (error) {
    // Even when a step failed, the history says what the server made of it.
    await history().catch(() => {});
    throw error;
  }
  await history();
}

/** Runs `main` under the hard timeout and writes the report whatever happens. */
export async function run(conv, options, main) {
  // A library that throws inside its socket's message handler would end the process: the
  // report says what it threw, and the conversation goes on to find what else differs.
  process.on("uncaughtException", (error) => conv.error(`uncaught: ${String(error?.stack ?? error).slice(0, 1500)}`));
  let status = 0;
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${options.timeout} s`)), options.timeout * 1000);
  });
  try {
    await Promise.race([main(), timeout]);
  } catch (error) {
    conv.error(`client failed: ${error?.stack ?? error}`);
    status = 1;
  } finally {
    clearTimeout(timer);
    writeFileSync(options.report, JSON.stringify(conv.report(), null, 1));
  }
  return status;
}

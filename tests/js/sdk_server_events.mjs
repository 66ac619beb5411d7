// Server events checked against the OpenAI Agents SDK for JavaScript (@openai/agents-realtime,
// installed under tests/clients/js by `make test`), the way a node app using it would meet them:
//
// 1. OpenAI's events must parse with the SDK's own zod schema (`realtimeServerEventSchema`); one
//    that fails is dropped by the SDK as a "generic" event, so its handler never runs.
// 2. Strict keys: a key the SDK's schema does not name is an error, except the fields OpenAI
//    sends that the SDK leaves out (they are in the openai Python SDK's GA models) and our
//    documented extensions (docs/protocol.md), both listed below.
// 3. What the SDK's transport handler (`OpenAIRealtimeBase._onMessage`) parses with its item
//    schemas must parse: a ZodError there is uncaught in the app and kills it. The handler itself
//    runs on every event when the SDK can be loaded whole (it cannot without its optional
//    dependency @modelcontextprotocol/client); its item parses are repeated here regardless,
//    with the SDK's own item schemas.
// 4. Our extension events (not OpenAI's) have exactly their documented keys.
//
// As a program it reads JSON events, one per line, on stdin and prints
// {"checked": N, "failures": [{"index", "type", "problems"}]}; it exits 1 when any failed.
// tests/e2e/test_wire_parity_e2e.py feeds it the e2e suite's events; sdk_server_events.test.mjs
// shows it fails.

import { existsSync, readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const HERE = path.dirname(fileURLToPath(import.meta.url));
export const SDK_DIR = path.resolve(HERE, "../clients/js/node_modules/@openai/agents-realtime");

// Every event may carry these (docs/protocol.md "Session resume": the event's sequence number).
const ENVELOPE = ["type", "event_id", "server_event_seq"];

// Keys the SDK's schemas do not name, allowed where they appear: [event type or "*", path of
// the object holding them ("" for the event itself, "[]" for array elements), keys].
const ALLOWED_KEYS = [
  // Our extensions on OpenAI's events.
  ["*", "", ["server_event_seq"]],
  ["session.created", "", ["resume_token"]],
  // OpenAI's own fields that the SDK's schemas leave out (the Python SDK's models have them).
  ["*", "item", ["object"]],
  ["output_audio_buffer.cleared", "", ["response_id"]],
  ["response.function_call_arguments.done", "", ["name"]],
  ["response.created", "response.usage", ["total_tokens"]],
  ["response.done", "response.usage", ["total_tokens"]],
];

// Our extension events: every key they may carry, and those they must.
const EXTENSION_EVENTS = {
  "session.resumed": { required: ["session_id", "resume_token", "replayed_from_seq"] },
  "playback.acknowledged": {
    required: ["response_id", "item_id", "played_ms", "committed_ms", "history_committed"],
  },
  "conversation.context": { required: ["items", "audio_inputs", "images", "bytes"] },
  "output_audio_buffer.paused": { required: ["response_id"] },
  "output_audio_buffer.resumed": { required: ["response_id"] },
  "overlap.decision": {
    required: ["response_id", "decision", "reason", "speech_ms", "transcript"],
  },
};

// OpenAI's events that the SDK does not model (it treats them as generic events): their keys
// as the openai Python SDK's GA models give them.
const UNMODELLED_OPENAI_EVENTS = {
  "input_audio_buffer.timeout_triggered": {
    required: ["audio_start_ms", "audio_end_ms", "item_id"],
  },
};

// OpenAI shapes the SDK does not model, left out before checking: a user message's
// `input_image` parts (OpenAI echoes them too; the SDK's content schema has no such type, so it
// would drop the whole event as generic, against OpenAI as against us).
function withoutSdkGaps(raw) {
  const strip = (item) =>
    item !== null && typeof item === "object" && Array.isArray(item.content)
      ? { ...item, content: item.content.filter((part) => part?.type !== "input_image") }
      : item;
  const out = { ...raw };
  if (Object.hasOwn(raw, "item")) out.item = strip(raw.item);
  if (Array.isArray(raw.items)) out.items = raw.items.map(strip);
  return out;
}

function allowedExtra(type, at) {
  return ALLOWED_KEYS.filter(([t, p]) => (t === "*" || t === type) && p === at).flatMap(
    ([, , keys]) => keys,
  );
}

function unwrap(schema) {
  for (;;) {
    const def = schema.def;
    if (["optional", "nullable", "default", "readonly", "catch"].includes(def.type)) {
      schema = def.innerType;
    } else if (def.type === "pipe") {
      schema = def.in;
    } else if (def.type === "lazy") {
      schema = def.getter();
    } else {
      return schema;
    }
  }
}

// Unknown keys anywhere under `value`, walking the schema that accepted it.
function unknownKeys(schema, value, type, at, problems) {
  const s = unwrap(schema);
  if (value === null || value === undefined) return;
  const kind = s.def.type;
  if (kind === "object") {
    if (typeof value !== "object" || Array.isArray(value)) return;
    const shape = s.def.shape;
    const extra = new Set(allowedExtra(type, at));
    for (const key of Object.keys(value)) {
      const where = at ? `${at}.${key}` : key;
      if (Object.hasOwn(shape, key)) {
        unknownKeys(shape[key], value[key], type, where, problems);
      } else if (!extra.has(key)) {
        problems.push(`unknown key '${where}' (not in the SDK's schema)`);
      }
    }
  } else if (kind === "array") {
    if (Array.isArray(value)) {
      for (const element of value) unknownKeys(s.def.element, element, type, `${at}[]`, problems);
    }
  } else if (kind === "union") {
    const option = s.def.options.find((o) => o.safeParse(value).success);
    if (option !== undefined) unknownKeys(option, value, type, at, problems);
  }
}

function exactKeys(spec, raw) {
  const problems = [];
  const allowed = new Set([...ENVELOPE, ...spec.required, ...(spec.optional ?? [])]);
  for (const key of [...spec.required, "event_id"]) {
    if (!Object.hasOwn(raw, key)) problems.push(`missing key '${key}'`);
  }
  for (const key of Object.keys(raw)) {
    if (!allowed.has(key)) problems.push(`unknown key '${key}'`);
  }
  return problems;
}

function zodProblems(error) {
  return error.issues.map((issue) => `${issue.path.join(".") || "(event)"}: ${issue.message}`);
}

export async function loadChecker(sdkDir = SDK_DIR) {
  const dist = path.join(sdkDir, "dist");
  if (!existsSync(path.join(dist, "openaiRealtimeEvents.mjs"))) {
    throw new Error(`@openai/agents-realtime is not installed under ${sdkDir}`);
  }
  const events = await import(pathToFileURL(path.join(dist, "openaiRealtimeEvents.mjs")).href);
  const items = await import(pathToFileURL(path.join(dist, "items.mjs")).href);
  const union = events.realtimeServerEventSchema;
  const byType = new Map(union.def.options.map((o) => [o.shape.type.def.values[0], o]));

  const transport = await loadTransport(dist);

  return function check(event) {
    if (event === null || typeof event !== "object" || typeof event.type !== "string") {
      return ["not an event object with a string `type`"];
    }
    const raw = withoutSdkGaps(event);
    const { type } = raw;
    if (Object.hasOwn(EXTENSION_EVENTS, type)) {
      const problems = exactKeys(EXTENSION_EVENTS[type], raw);
      if (type === "conversation.context" && Array.isArray(raw.items)) {
        raw.items.forEach((item, i) => {
          const parsed = events.conversationItemSchema.safeParse(item);
          if (!parsed.success) problems.push(...zodProblems(parsed.error).map((p) => `items[${i}] ${p}`));
          unknownKeys(events.conversationItemSchema, item, type, "item", problems);
        });
      }
      return problems;
    }
    if (Object.hasOwn(UNMODELLED_OPENAI_EVENTS, type)) {
      return exactKeys(UNMODELLED_OPENAI_EVENTS[type], raw);
    }
    const schema = byType.get(type);
    if (schema === undefined) return [`event type '${type}' is neither OpenAI's nor a documented extension`];
    const parsed = schema.safeParse(raw);
    if (!parsed.success) return zodProblems(parsed.error);
    const problems = [];
    unknownKeys(schema, raw, type, "", problems);
    const handlers = [() => handlerItemParses(items, parsed.data)];
    if (transport !== null) handlers.push(() => transport._onMessage({ data: JSON.stringify(raw) }));
    for (const handle of handlers) {
      try {
        handle();
      } catch (error) {
        const what = error?.issues ? zodProblems(error).join("; ") : String(error);
        problems.push(`the SDK's handler throws (uncaught in the app): ${what}`);
        break;
      }
    }
    return problems;
  };
}

// The SDK's transport with the socket left out (what it sends is dropped), or null when the
// SDK cannot be loaded whole.
async function loadTransport(dist) {
  let OpenAIRealtimeBase;
  try {
    ({ OpenAIRealtimeBase } = await import(
      pathToFileURL(path.join(dist, "openaiRealtimeBase.mjs")).href
    ));
  } catch {
    return null;
  }
  class Probe extends OpenAIRealtimeBase {
    get status() {
      return "connected";
    }
    sendEvent() {}
    async connect() {}
    close() {}
    mute() {}
    interrupt() {}
    sendAudio() {}
  }
  const transport = new Probe();
  transport.on("error", () => {}); // an `error` event is emitted to the app, not thrown
  return transport;
}

// `OpenAIRealtimeBase._onMessage`'s parses of items (0.20.0), with the SDK's own schemas.
function handlerItemParses(items, event) {
  const { type, item } = event;
  const content = (role, parts) =>
    role === "assistant" && Array.isArray(parts)
      ? parts.map((p) => (p?.type === "audio" ? { ...p, type: "output_audio" } : p))
      : parts;
  if (
    type === "conversation.item.added" ||
    type === "conversation.item.done" ||
    type === "conversation.item.retrieved"
  ) {
    if (item.type !== "message") return;
    items.realtimeMessageItemSchema.parse({
      itemId: item.id,
      previousItemId: type === "conversation.item.retrieved" ? undefined : event.previous_item_id,
      type: item.type,
      role: item.role,
      content: content(item.role, item.content),
      status: item.status ?? (type === "conversation.item.added" ? "in_progress" : "completed"),
    });
  } else if (type === "response.output_item.added" || type === "response.output_item.done") {
    const done = type === "response.output_item.done";
    if (item.type === "function_call" && item.status === "completed") {
      items.realtimeToolCallItem.parse({
        itemId: item.id,
        type: item.type,
        status: "in_progress",
        arguments: item.arguments,
        name: item.name,
        output: null,
      });
    } else if (item.type === "message") {
      items.realtimeMessageItemSchema.parse({
        itemId: item.id,
        type: item.type,
        role: item.role,
        content: content(item.role, item.content),
        status: item.status ?? (done ? "completed" : "in_progress"),
      });
    }
  }
}

export function checkAll(check, events) {
  const failures = [];
  events.forEach((raw, index) => {
    const problems = check(raw);
    if (problems.length > 0) failures.push({ index, type: raw?.type ?? null, problems });
  });
  return { checked: events.length, failures };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const lines = readFileSync(0, "utf8").split("\n").filter((line) => line.trim() !== "");
  const check = await loadChecker(process.env.AGENTS_REALTIME_DIR || SDK_DIR);
  const result = checkAll(check, lines.map((line) => JSON.parse(line)));
  process.stdout.write(`${JSON.stringify(result)}\n`);
  process.exitCode = result.failures.length > 0 ? 1 : 0;
}

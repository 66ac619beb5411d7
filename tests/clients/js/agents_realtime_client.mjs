// The OpenAI Agents SDK for JavaScript (`@openai/agents-realtime`) against Turntaker.
//
// Run by tests/clients/test_clients.py: `node agents_realtime_client.mjs --url
// ws://127.0.0.1:PORT/v1/realtime --speech DIR --report FILE`. The conversation is
// kit.converse; everything else here is the SDK's own API.
import { OpenAIRealtimeWebSocket, RealtimeAgent, RealtimeSession, tool } from "@openai/agents-realtime";
import { z } from "zod";

import * as kit from "./kit.mjs";

const options = kit.args();
const conv = new kit.Conversation();

// --- what a user writes -------------------------------------------------------------------
const getWeather = tool({
  name: "get_weather",
  description: "Get the current weather in a city.",
  parameters: z.object({ city: z.string() }),
  execute: async ({ city }) => {
    // With "required" the answer to this output would be another call: back to "auto".
    session.transport.sendEvent({ type: "session.update", session: { type: "realtime", tool_choice: "auto" } });
    return conv.toolCall("get_weather", { city });
  },
});

const agent = new RealtimeAgent({ name: "assistant", instructions: kit.INSTRUCTIONS, tools: [getWeather] });

const session = new RealtimeSession(agent, {
  transport: new OpenAIRealtimeWebSocket({ url: options.url }),
  model: "turntaker",
  config: {
    outputModalities: ["audio"],
    audio: {
      input: {
        format: { type: "audio/pcm", rate: 24000 },
        turnDetection: { type: "server_vad", silenceDurationMs: 500 },
      },
      output: { format: { type: "audio/pcm", rate: 24000 } },
    },
    providerData: { max_output_tokens: kit.MAX_OUTPUT_TOKENS },
  },
});

session.on("audio", (event) => conv.audio(event.data.byteLength, event.responseId));
session.on("audio_stopped", () => conv.replyDone());
session.on("audio_interrupted", () => conv.interrupted("audio_interrupted"));
session.transport.on("audio_transcript_delta", (event) => conv.transcript(event.delta, event.responseId));
session.on("transport_event", (event) => conv.serverEvent(event));
session.on("error", (event) => conv.error(`error event: ${JSON.stringify(event.error, Object.getOwnPropertyNames(event.error ?? {}))}`));

const hooks = {
  requireToolCall: async () =>
    session.transport.sendEvent({ type: "session.update", session: { type: "realtime", tool_choice: "required" } }),
  retrieveContext: async () => session.transport.sendEvent({ type: "conversation.context.retrieve" }),
};

const status = await kit.run(conv, options, async () => {
  await session.connect({ apiKey: "sk-local" });
  const mic = new kit.Microphone((chunk) => session.sendAudio(chunk));
  const speaking = mic.run();
  try {
    await kit.converse(conv, mic, kit.speech(options.speech), hooks);
  } finally {
    mic.stop();
    await speaking;
    session.close();
  }
});
process.exit(status);

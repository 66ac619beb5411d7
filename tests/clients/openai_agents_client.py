"""The OpenAI Agents SDK for Python (`openai-agents`, realtime) against Turntaker.

Run by tests/clients/test_clients.py in .venv-clients: `python openai_agents_client.py --url
ws://127.0.0.1:PORT/v1/realtime --speech DIR --report FILE`. The conversation is kit.converse;
everything else here is the SDK's own API.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import kit
from agents import function_tool
from agents.realtime import (
    RealtimeAgent,
    RealtimeRunner,
    RealtimeSession,
    RealtimeSessionModelSettings,
)
from agents.realtime.model_events import (
    RealtimeModelRawServerEvent,
    RealtimeModelTranscriptDeltaEvent,
)
from agents.realtime.model_inputs import RealtimeModelSendSessionUpdate
from agents.realtime.openai_realtime import OpenAIRealtimeWebSocketModel

conv = kit.Conversation()

# --- what a user writes -------------------------------------------------------------------
SETTINGS: RealtimeSessionModelSettings = {
    "output_modalities": ["audio"],
    "audio": {
        "input": {
            "format": {"type": "audio/pcm", "rate": 24000},
            "turn_detection": {"type": "server_vad", "silence_duration_ms": 500},
        },
        "output": {"format": {"type": "audio/pcm", "rate": 24000}},
    },
    "max_output_tokens": kit.MAX_OUTPUT_TOKENS,
}
session: RealtimeSession


@function_tool
async def get_weather(city: str) -> str:
    """Get the current weather in a city."""
    # With "required" the answer to this output would be another call: back to "auto".
    await session.model.send_event(
        RealtimeModelSendSessionUpdate({**SETTINGS, "tools": [get_weather], "tool_choice": "auto"})
    )
    return conv.tool_call("get_weather", {"city": city})


class TurntakerModel(OpenAIRealtimeWebSocketModel):
    """The SDK's WebSocket model plus the server's extension events: its raw-message API
    (`RealtimeModelSendRawMessage`) validates against OpenAI's client events and drops any
    other type ("Failed to convert raw message")."""

    async def send_extension(self, event: dict[str, Any]) -> None:
        assert self._websocket is not None, "not connected"
        await self._websocket.send(json.dumps(event))


model = TurntakerModel()
agent = RealtimeAgent(name="assistant", instructions=kit.INSTRUCTIONS, tools=[get_weather])
runner = RealtimeRunner(agent, model=model)


async def require_tool_call() -> None:
    await session.model.send_event(
        RealtimeModelSendSessionUpdate(
            {**SETTINGS, "tools": [get_weather], "tool_choice": "required"}
        )
    )


async def retrieve_context() -> None:
    await model.send_extension({"type": "conversation.context.retrieve"})


async def events() -> None:
    async for event in session:
        if event.type == "audio":
            conv.audio(event.audio.data, event.audio.response_id)
        elif event.type == "audio_end":
            conv.reply_done()
        elif event.type == "audio_interrupted":
            conv.interrupted("audio_interrupted")
        elif event.type == "error":
            # The SDK reports a server event outside OpenAI's list (the extension's
            # `conversation.context`) as an error too: it still reached the raw events.
            if "conversation.context" not in str(event.error):
                conv.error(f"error event: {event.error}")
        elif event.type == "raw_model_event":
            data: Any = event.data
            if isinstance(data, RealtimeModelTranscriptDeltaEvent):
                conv.transcript(data.delta, data.response_id)
            elif isinstance(data, RealtimeModelRawServerEvent):
                conv.server_event(data.data)


async def main() -> None:
    global session
    args = kit.parse_args()
    said = kit.speech(args.speech)

    async def conversation() -> None:
        global session
        session = await runner.run(
            model_config={
                "url": args.url,
                "api_key": "sk-local",
                "initial_model_settings": SETTINGS,
            }
        )
        async with session:
            mic = kit.Microphone(session.send_audio)
            hooks = kit.Hooks(require_tool_call, retrieve_context)
            async with asyncio.TaskGroup() as tasks:
                listening = tasks.create_task(events())
                speaking = tasks.create_task(mic.run())
                await kit.converse(conv, mic, said, hooks)
                speaking.cancel()
                listening.cancel()

    raise SystemExit(await kit.run(conv, args, conversation))


if __name__ == "__main__":
    asyncio.run(main())

"""LiveKit Agents (`livekit-agents` with `livekit-plugins-openai`) against Turntaker.

Run by tests/clients/test_clients.py in .venv-clients: `python livekit_client.py --url
ws://127.0.0.1:PORT/v1/realtime --speech DIR --report FILE`. The conversation is kit.converse.
An `AgentSession` on the plugin's `RealtimeModel`, with no room: its audio input and output
are ours (`session.input.audio`, `session.output.audio`), a microphone and a speaker that
plays in real time and tells the session how far it got, as a sound card's would.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
import kit
from livekit import rtc
from livekit.agents import Agent, AgentSession, RunContext, function_tool, io
from livekit.plugins import openai
from openai.types.beta.realtime.session import TurnDetection

conv = kit.Conversation()


class Microphone(io.AudioInput):
    """kit.Microphone's chunks as LiveKit audio frames."""

    def __init__(self) -> None:
        super().__init__(label="microphone")
        self._frames: asyncio.Queue[rtc.AudioFrame] = asyncio.Queue()

    async def send(self, pcm: bytes) -> None:
        self._frames.put_nowait(rtc.AudioFrame(pcm, kit.RATE, 1, len(pcm) // 2))

    async def __anext__(self) -> rtc.AudioFrame:
        return await self._frames.get()


class Speaker(io.AudioOutput):
    """Plays each segment in real time from its first frame; `clear_buffer` stops it there.
    Reports how far it got (`on_playback_finished`), which is where the session cuts the
    reply (`conversation.item.truncate`)."""

    def __init__(self) -> None:
        super().__init__(
            label="speaker",
            capabilities=io.AudioOutputCapabilities(pause=False),
            sample_rate=kit.RATE,
        )
        self._pushed = 0.0
        self._started = 0.0
        self._cleared = asyncio.Event()
        self._playing: asyncio.Task[None] | None = None

    async def capture_frame(self, frame: rtc.AudioFrame) -> None:
        await super().capture_frame(frame)
        if not self._pushed:
            self._started = time.monotonic()
            self._cleared.clear()
            self.on_playback_started(created_at=time.time())
            conv.reply_started(response_id)
        self._pushed += frame.duration
        conv.audio(bytes(frame.data))

    def flush(self) -> None:
        super().flush()
        if self._pushed:
            conv.reply_done()
            self._playing = asyncio.create_task(self._play_out(self._pushed))

    def clear_buffer(self) -> None:
        conv.interrupted("clear_buffer")
        self._cleared.set()

    async def _play_out(self, seconds: float) -> None:
        left = self._started + seconds - time.monotonic()
        try:
            await asyncio.wait_for(self._cleared.wait(), max(left, 0.0))
            played, interrupted = min(time.monotonic() - self._started, seconds), True
        except TimeoutError:
            played, interrupted = seconds, False
        self._pushed = 0.0
        self.on_playback_finished(playback_position=played, interrupted=interrupted)


response_id: str | None = None


def on_server_event(event: dict[str, Any]) -> None:
    global response_id
    if event["type"] == "response.created":
        response_id = event["response"]["id"]
    elif event["type"] == "response.output_audio_transcript.delta":
        conv.transcript(event["delta"], event["response_id"])
    conv.server_event(event)


# --- what a user writes -------------------------------------------------------------------
class Assistant(Agent):
    def __init__(self) -> None:
        super().__init__(instructions=kit.INSTRUCTIONS)

    @function_tool
    async def get_weather(self, context: RunContext, city: str) -> str:
        """Get the current weather in a city."""
        # LiveKit answers a tool's output with tool_choice "auto" on that response alone.
        return conv.tool_call("get_weather", {"city": city})


async def main() -> None:
    args = kit.parse_args()
    said = kit.speech(args.speech)
    microphone, speaker = Microphone(), Speaker()
    agent = Assistant()

    async def require_tool_call() -> None:
        agent.realtime_llm_session.update_options(tool_choice="required")

    async def retrieve_context() -> None:
        agent.realtime_llm_session.send_event({"type": "conversation.context.retrieve"})

    async def conversation() -> None:
        async with aiohttp.ClientSession() as http:
            model = openai.realtime.RealtimeModel(
                model="turntaker",
                base_url=args.url,
                api_key="sk-local",
                http_session=http,
                modalities=["audio"],
                turn_detection=TurnDetection(type="server_vad", silence_duration_ms=500),
            )
            model.update_options(max_response_output_tokens=kit.MAX_OUTPUT_TOKENS)
            session: AgentSession[None] = AgentSession(llm=model)
            session.input.audio = microphone
            session.output.audio = speaker
            session.on("error", lambda event: conv.error(f"error event: {event.error}"))
            await session.start(agent)
            agent.realtime_llm_session.on("openai_server_event_received", on_server_event)
            mic = kit.Microphone(microphone.send)
            speaking = asyncio.create_task(mic.run())
            try:
                hooks = kit.Hooks(require_tool_call, retrieve_context)
                await kit.converse(conv, mic, said, hooks)
            finally:
                speaking.cancel()
                await session.aclose()

    raise SystemExit(await kit.run(conv, args, conversation))


if __name__ == "__main__":
    asyncio.run(main())

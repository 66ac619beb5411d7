"""Pipecat (`pipecat-ai`) with its `OpenAIRealtimeLLMService` against Turntaker.

Run by tests/clients/test_clients.py in .venv-clients: `python pipecat_client.py --url
ws://127.0.0.1:PORT/v1/realtime --speech DIR --report FILE`. The conversation is kit.converse.
The pipeline is Pipecat's realtime one (its own context aggregators around the service, whose
turn strategies turn the server's VAD events into interruptions); the transports are a
microphone and a speaker of our own, in real time, as a sound card would be.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import kit
from loguru import logger
from pipecat.adapters.llm.schemas.function_schema import FunctionSchema
from pipecat.adapters.llm.schemas.tools_schema import ToolsSchema
from pipecat.frames.frames import (
    Frame,
    InputAudioRawFrame,
    InterruptionFrame,
    LLMRunFrame,
    LLMUpdateSettingsFrame,
    OutputAudioRawFrame,
    StartFrame,
    TTSStartedFrame,
    TTSStoppedFrame,
    TTSTextFrame,
)
from pipecat.observers.base_observer import BaseObserver, FramePushed
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.task import PipelineParams
from pipecat.pipeline.worker import PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair
from pipecat.services.llm_service import FunctionCallParams
from pipecat.services.openai.realtime import events
from pipecat.services.openai.realtime.llm import OpenAIRealtimeLLMService
from pipecat.transports.base_input import BaseInputTransport
from pipecat.transports.base_output import BaseOutputTransport
from pipecat.transports.base_transport import TransportParams
from pipecat.workers.runner import WorkerRunner

conv = kit.Conversation()
AUDIO = TransportParams(
    audio_in_enabled=True,
    audio_in_sample_rate=kit.RATE,
    audio_out_enabled=True,
    audio_out_sample_rate=kit.RATE,
)


class Microphone(BaseInputTransport):
    """kit.Microphone's chunks as Pipecat input audio."""

    def __init__(self, params: TransportParams) -> None:
        super().__init__(params)
        self.started = asyncio.Event()

    async def start(self, frame: StartFrame) -> None:
        await super().start(frame)
        await self.set_transport_ready(frame)
        self.started.set()

    async def send(self, pcm: bytes) -> None:
        await self.push_audio_frame(InputAudioRawFrame(pcm, kit.RATE, 1))


class Speaker(BaseOutputTransport):
    """Plays the bot's audio in real time: a write takes as long as its audio lasts."""

    async def start(self, frame: StartFrame) -> None:
        await super().start(frame)
        await self.set_transport_ready(frame)

    async def write_audio_frame(self, frame: OutputAudioRawFrame) -> bool:
        conv.audio(frame.audio)
        await asyncio.sleep(len(frame.audio) / 2 / frame.sample_rate)
        return True


class ContextRetrieve(events.ClientEvent):
    """Turntaker's `conversation.context.retrieve` extension as a Pipecat client event."""

    type: str = "conversation.context.retrieve"


class TurntakerRealtime(OpenAIRealtimeLLMService):
    """Pipecat drops server events it has no model for, and has no hook for raw ones: this
    taps the socket so that the extension's `conversation.context` (and the server's errors)
    reach the app."""

    async def _connect(self) -> None:
        await super()._connect()
        if self._websocket is not None:
            self._websocket = _Tap(self._websocket)


class _Tap:
    def __init__(self, websocket: Any) -> None:
        self._websocket = websocket

    def __getattr__(self, name: str) -> Any:
        return getattr(self._websocket, name)

    async def __aiter__(self) -> Any:
        global response_id
        async for message in self._websocket:
            event = json.loads(message)
            if event["type"] == "response.created":
                response_id = event["response"]["id"]
            conv.server_event(event)
            yield message


response_id: str | None = None


class Watcher(BaseObserver):
    """What the pipeline tells the app: replies, their words, interruptions."""

    async def on_push_frame(self, data: FramePushed) -> None:
        frame: Frame = data.frame
        if data.source is not llm:
            return
        if isinstance(frame, TTSStartedFrame):
            conv.reply_started(response_id)
        elif isinstance(frame, TTSTextFrame):
            conv.transcript(frame.text)
        elif isinstance(frame, TTSStoppedFrame):
            conv.reply_done()
        elif isinstance(frame, InterruptionFrame):
            conv.interrupted("InterruptionFrame")


# --- what a user writes -------------------------------------------------------------------
weather = FunctionSchema(
    name="get_weather",
    description="Get the current weather in a city.",
    properties={"city": {"type": "string"}},
    required=["city"],
)
session = events.SessionProperties(
    instructions=kit.INSTRUCTIONS,
    output_modalities=["audio"],
    audio=events.AudioConfiguration(
        input=events.AudioInput(
            format=events.PCMAudioFormat(rate=24000),
            turn_detection=events.TurnDetection(silence_duration_ms=500),
        ),
        output=events.AudioOutput(format=events.PCMAudioFormat(rate=24000)),
    ),
    tools=ToolsSchema(standard_tools=[weather]),
    max_output_tokens=kit.MAX_OUTPUT_TOKENS,
)


def tool_choice(choice: str) -> LLMUpdateSettingsFrame:
    props = session.model_copy(update={"tool_choice": choice})
    return LLMUpdateSettingsFrame(delta=OpenAIRealtimeLLMService.Settings(session_properties=props))


async def get_weather(params: FunctionCallParams) -> None:
    # With "required" the answer to this output would be another call: back to "auto".
    await params.llm.queue_frame(tool_choice("auto"))
    await params.result_callback(conv.tool_call("get_weather", params.arguments))


llm: OpenAIRealtimeLLMService


async def main() -> None:
    global llm
    args = kit.parse_args()
    said = kit.speech(args.speech)
    logger.remove()
    logger.add(sys.stderr, level="WARNING")

    llm = TurntakerRealtime(
        api_key="sk-local",
        base_url=args.url,
        settings=OpenAIRealtimeLLMService.Settings(model="turntaker", session_properties=session),
    )
    llm.register_function("get_weather", get_weather)
    # Pipecat's realtime flow starts with the context (LLMRunFrame below): the bot speaks
    # first. Without it the service would send its whole context at the first tool result, as
    # "a previously saved conversation".
    context = LLMContext([{"role": "user", "content": "Say hello."}])
    aggregators = LLMContextAggregatorPair(context)
    microphone, speaker = Microphone(AUDIO), Speaker(AUDIO)
    pipeline = Pipeline([microphone, aggregators.user(), llm, speaker, aggregators.assistant()])
    worker = PipelineWorker(
        pipeline,
        params=PipelineParams(audio_in_sample_rate=kit.RATE, audio_out_sample_rate=kit.RATE),
        observers=[Watcher()],
    )

    async def require_tool_call() -> None:
        await llm.queue_frame(tool_choice("required"))

    async def retrieve_context() -> None:
        await llm.send_client_event(ContextRetrieve())

    async def conversation() -> None:
        runner = WorkerRunner(handle_sigint=False)
        await runner.add_workers(worker)
        running = asyncio.create_task(runner.run())
        try:
            await worker.queue_frame(LLMRunFrame())
            await microphone.started.wait()
            mic = kit.Microphone(microphone.send)
            speaking = asyncio.create_task(mic.run())
            try:
                hooks = kit.Hooks(require_tool_call, retrieve_context, greets=True)
                await kit.converse(conv, mic, said, hooks)
            finally:
                speaking.cancel()
        finally:
            await worker.cancel()
            await running

    raise SystemExit(await kit.run(conv, args, conversation))


if __name__ == "__main__":
    asyncio.run(main())

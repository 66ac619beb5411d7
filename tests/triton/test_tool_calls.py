"""Function calling through both pipelines on a real tritonserver (contract: TOOL_CALL).

`cascade` (SmolLM2) and `qwen3_omni` (tiny random weights) streamed with the orchestrator's
own client (`PipelineStream`, which decodes TOOL_CALL into `PipelineChunk.tool_call`):
- tool_choice "function" / "required": the stream is one call, whose first delta names the
  function and whose assembled arguments validate against the schema, and nothing else:
  neither text nor audio of it (responses that carry only TOOL_CALL come through the
  ensembles);
- "auto" and "none" with tools still speak (text and audio, no call);
- a cancel on the board in the middle of a call ends the stream and stops the stages;
- told a tool's result, neither pipeline speaks or sends as text any of the chat template
  (both models do write it: tests/turntaker_models/cascade/test_llm.py and
  tests/turntaker_models/omni/test_tool_calls.py show their raw greedy tokens for the same
  conversations).
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import jsonschema
import numpy as np
import pytest

from orchestrator.triton import TritonServer
from orchestrator.triton.pipeline_client import (
    PipelineChunk,
    PipelineRequest,
    PipelineStream,
    cancel_on_board,
)
from tests.tool_specs import BOUNDED_WEATHER, WEATHER
from tests.triton.test_cascade import normalise, transcribe, wait_for_stops
from turntaker_models.contract import (
    Conversation,
    GenerationParameters,
    Message,
    TextPart,
    ToolCallDelta,
    ToolCallPart,
    ToolChoice,
    ToolResultPart,
    ToolSpec,
)

# A call that takes long to write: a cancel lands in the middle of its arguments.
NOTE = ToolSpec(
    "take_note",
    "Writes a long note down.",
    {
        "type": "object",
        "properties": {"text": {"type": "string", "minLength": 4000}},
        "required": ["text"],
    },
)
QUESTION = "What is the weather like in Paris today?"
PIPELINES = ["cascade", "qwen3_omni"]


def request(
    pipeline: str,
    choice: ToolChoice,
    tools: list[ToolSpec],
    max_tokens: int = 64,
    text: str = QUESTION,
    tool_name: str | None = None,
) -> PipelineRequest:
    return PipelineRequest(
        request_id=f"{pipeline}-tool-{uuid.uuid4()}",
        conversation=Conversation([Message("user", [TextPart(text)])]),
        parameters=GenerationParameters(
            max_tokens=max_tokens, tools=tools, tool_choice=choice, tool_name=tool_name
        ),
    )


def run(server: TritonServer, pipeline: str, req: PipelineRequest) -> list[PipelineChunk]:
    with PipelineStream(server.grpc_url, pipeline) as stream:
        stream.start(req)
        return list(stream.chunks(timeout_s=60.0))


def assembled(chunks: list[PipelineChunk]) -> tuple[str, Any]:
    """The one call of a stream: its function and its arguments, parsed."""
    deltas: list[ToolCallDelta] = [c.tool_call for c in chunks if c.tool_call is not None]
    assert deltas, "no call streamed"
    assert deltas[0].name, "the call's first delta names the function"
    assert not any(d.name for d in deltas[1:]), "more than one call (or a name repeated)"
    return deltas[0].name, json.loads("".join(d.arguments for d in deltas))


def test_tool_cascade_function_streams_one_valid_call_and_nothing_spoken(
    triton_server: TritonServer,
) -> None:
    req = request("cascade", "function", [WEATHER], tool_name="get_weather")
    chunks = run(triton_server, "cascade", req)
    name, arguments = assembled(chunks)
    assert name == "get_weather"
    jsonschema.validate(arguments, WEATHER.parameters)
    print(f"\ncascade call: {name}({json.dumps(arguments)}) in {len(chunks)} responses")
    # The call alone: none of it was spoken or sent as text.
    assert "".join(c.text for c in chunks) == ""
    assert not any(c.audio.size for c in chunks)
    assert chunks[-1].final


def test_tool_qwen3_omni_required_streams_one_valid_call_and_nothing_spoken(
    triton_server: TritonServer,
) -> None:
    req = request("qwen3_omni", "required", [BOUNDED_WEATHER], max_tokens=96)
    chunks = run(triton_server, "qwen3_omni", req)
    name, arguments = assembled(chunks)
    assert name == "get_weather"
    jsonschema.validate(arguments, BOUNDED_WEATHER.parameters)
    assert "".join(c.text for c in chunks) == ""
    assert not any(c.audio.size for c in chunks)


@pytest.mark.parametrize("pipeline", PIPELINES)
@pytest.mark.parametrize("choice", ["auto", "none"])
def test_tool_auto_and_none_still_speak(
    triton_server: TritonServer, pipeline: str, choice: ToolChoice
) -> None:
    # A question the tool does not answer: the model speaks, as without tools.
    text = "Say hello to me in one short sentence."
    chunks = run(triton_server, pipeline, request(pipeline, choice, [WEATHER], 24, text))
    assert "".join(c.text for c in chunks).strip()
    assert any(c.audio.size for c in chunks)
    assert not any(c.tool_call for c in chunks)


STAGES = {"cascade": {"llm"}, "qwen3_omni": {"thinker"}}


@pytest.mark.parametrize("pipeline", PIPELINES)
def test_tool_cancel_mid_call_ends_the_stream(triton_server: TritonServer, pipeline: str) -> None:
    """The board write alone (the stream kept open): nothing more of the call comes and the
    stream still ends with the final flag; the stage writing the call records its stop."""
    req = request(pipeline, "function", [NOTE], max_tokens=1500, tool_name="take_note")
    with PipelineStream(triton_server.grpc_url, pipeline) as stream:
        stream.start(req)
        chunks = stream.chunks(timeout_s=60.0)
        seen: list[PipelineChunk] = []
        # Wait for some of the arguments, so that the cancel lands inside the call.
        while sum(len(c.tool_call.arguments) for c in seen if c.tool_call) < 12:
            chunk = next(chunks)
            assert not chunk.final, "the call ended before the cancel"
            seen.append(chunk)
        cancelled_at = cancel_on_board(stream._client, [req.request_id])
        after = list(chunks)
    assert after and after[-1].final
    late = [c for c in after if c.tool_call and c.received_at * 1e9 > cancelled_at + 100e6]
    assert not late, f"{len(late)} call deltas more than 100 ms after the cancel"
    arguments = "".join(c.tool_call.arguments for c in [*seen, *after] if c.tool_call)
    assert len(arguments) < 4000, "the call was written to its end"
    stops = wait_for_stops(triton_server, req.request_id, STAGES[pipeline])
    assert STAGES[pipeline] <= {s.stage for s in stops}, stops
    last_ms = (max(s.t_ns for s in stops) - cancelled_at) / 1e6
    print(f"\n{pipeline} cancel mid-call: last stop {last_ms:.1f} ms after the cancel")
    # The stream's next request is served as usual.
    time.sleep(0.05)
    again = run(triton_server, pipeline, request(pipeline, "none", [NOTE], 8, "Hello."))
    assert again[-1].final


# What no TEXT_DELTA may hold: tags of the tools layout, special tokens written out.
TEMPLATE_TEXT = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<|")
# The tool's answer per pipeline, and max_tokens: greedy SmolLM2 opens `<tool_response>` and
# answers inside it; the tiny weights write `</tool_response>` as their 20th token.
TOOL_RESULTS = {
    "cascade": ("It is 18 degrees and raining in Paris.", 40),
    "qwen3_omni": ('{"temp": 21}', 32),
}


@pytest.mark.parametrize("pipeline", PIPELINES)
def test_tool_result_in_history_speaks_no_template_text(
    triton_server: TritonServer, pipeline: str
) -> None:
    output, max_tokens = TOOL_RESULTS[pipeline]
    conversation = Conversation(
        [
            Message("user", [TextPart(QUESTION)]),
            Message("assistant", [ToolCallPart("call_1", "get_weather", '{"city": "Paris"}')]),
            Message("tool", [ToolResultPart("call_1", output)]),
        ]
    )
    req = PipelineRequest(
        request_id=f"{pipeline}-tool-result-{uuid.uuid4()}",
        conversation=conversation,
        parameters=GenerationParameters(max_tokens=max_tokens, tools=[WEATHER]),
    )
    chunks = run(triton_server, pipeline, req)
    text = "".join(c.text for c in chunks)
    print(f"\n{pipeline} after a tool result: {text!r}")
    assert text.strip(), "nothing was said"
    assert not any(marker in text for marker in TEMPLATE_TEXT), text
    assert not any(c.tool_call for c in chunks)
    audio = [c.audio for c in chunks if c.audio.size]
    assert audio, "nothing was spoken"
    if pipeline == "cascade":
        # What was spoken, heard back: the answer, none of the tags read aloud.
        heard = normalise(transcribe(triton_server, np.concatenate(audio)))
        print(f"cascade spoke: {heard!r}")
        assert "paris" in heard and "tool" not in heard and "response" not in heard, heard

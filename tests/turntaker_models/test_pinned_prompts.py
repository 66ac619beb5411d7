"""The prompts both generators build, pinned byte for byte (pinned_prompts.json).

What the models see must not change when the code that builds it moves (issue 24: one tool
prompt module for both generators, behaviour unchanged). Each case is a conversation and the
request's parameters; the cascade's prompt is what `Decoder.prompt_ids` gives (the ids that
generate() feeds), the thinker's what `ThinkerStage` builds for a request on the tiny weights
(captured around its PromptBuilder, on the real request path). A change here that is meant must
regenerate the file: `python -m tests.turntaker_models.test_pinned_prompts`.
"""

from __future__ import annotations

import hashlib
import json
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from tests.tool_specs import BOUNDED_WEATHER, WEATHER
from turntaker_models.contract import (
    Conversation,
    GenerationParameters,
    Message,
    TextPart,
    ToolCallPart,
    ToolChoice,
    ToolResultPart,
    ToolSpec,
    encode,
)

PINNED = Path(__file__).with_name("pinned_prompts.json")

ALARM = ToolSpec(
    "set_alarm",
    "Sets an alarm.",
    {"type": "object", "properties": {"hour": {"type": "integer"}}, "required": ["hour"]},
)
QUESTION = Conversation([Message("user", [TextPart("What is the weather like in Paris?")])])
OWN_SYSTEM = Conversation([Message("system", [TextPart("Be terse.")]), *QUESTION.messages])
TOOL_RESULT = Conversation(
    [
        *QUESTION.messages,
        Message("assistant", [ToolCallPart("call_1", "get_weather", '{"city": "Paris"}')]),
        Message("tool", [ToolResultPart("call_1", "It is 18 degrees and raining.")]),
    ]
)
AFTER_RESULT = Conversation(
    [
        *TOOL_RESULT.messages,
        Message("assistant", [TextPart("It is raining.")]),
        Message("user", [TextPart("And in Rome?")]),
    ]
)


def _params(
    tools: list[ToolSpec], choice: ToolChoice = "auto", name: str = ""
) -> GenerationParameters:
    return GenerationParameters(tools=tools, tool_choice=choice, tool_name=name)


# name -> (conversation, parameters): every tool_choice, with and without a tool's result last.
CASES: dict[str, tuple[Conversation, GenerationParameters]] = {
    "plain": (QUESTION, _params([])),
    "own-system-auto": (OWN_SYSTEM, _params([WEATHER])),
    "auto": (QUESTION, _params([WEATHER, ALARM])),
    "none": (QUESTION, _params([WEATHER], "none")),
    "required": (QUESTION, _params([BOUNDED_WEATHER], "required")),
    "function": (QUESTION, _params([WEATHER, ALARM], "function", "set_alarm")),
    "result-auto": (TOOL_RESULT, _params([WEATHER])),
    "result-none": (TOOL_RESULT, _params([WEATHER], "none")),
    "result-required": (TOOL_RESULT, _params([BOUNDED_WEATHER], "required")),
    "result-function": (TOOL_RESULT, _params([WEATHER], "function", "get_weather")),
    "after-result-auto": (AFTER_RESULT, _params([WEATHER])),
}


def _record(text: str, ids: list[int]) -> dict[str, Any]:
    return {
        "text": text,
        "tokens": len(ids),
        "ids_sha256": hashlib.sha256(json.dumps(ids).encode()).hexdigest(),
    }


def cascade_prompts() -> dict[str, dict[str, Any]]:
    """Each case's SmolLM2 prompt, as the cascade's decode loop feeds it."""
    from turntaker_models.cascade import smollm
    from turntaker_models.cascade.llm import Decoder
    from turntaker_models.settings import ModelSettings

    loaded = smollm.load(ModelSettings.from_env().cache_dir)
    decoder = Decoder(loaded.model, loaded.tokenizer, threads=1)
    out = {}
    for name, (conversation, params) in CASES.items():
        ids = decoder.prompt_ids(conversation, [], params)
        out[name] = _record(loaded.tokenizer.decode(ids, skip_special_tokens=False), ids)
    return out


class _Reply:
    def __init__(self) -> None:
        self.done = threading.Event()
        self.error: str | None = None

    def send(self, outputs: Mapping[str, Any], final: bool = False) -> None:
        if final:
            self.done.set()

    def close(self) -> None:
        self.done.set()

    def fail(self, message: str) -> None:
        self.error = message
        self.done.set()

    def is_cancelled(self) -> bool:
        return False


def omni_prompts(root: Path) -> dict[str, dict[str, Any]]:
    """Each case's thinker prompt on the tiny weights, as the thinker stage builds it for a
    request (the ids its PromptBuilder returns on the request path)."""
    from turntaker_models.omni import wire
    from turntaker_models.omni.stages import ThinkerStage
    from turntaker_models.omni.tiny import make_tiny_omni
    from turntaker_models.settings import ModelSettings

    path = make_tiny_omni(root / "tiny", seed=0)
    settings = ModelSettings(
        board_path=root / "board", cache_dir=root, omni_weights=path, threads=1
    )
    stage = ThinkerStage(settings)
    built: list[Any] = []
    build = stage.prompts.build

    def recording(*args: Any, **kwargs: Any) -> Any:
        prompt = build(*args, **kwargs)
        built.append(prompt)
        return prompt

    stage.prompts.build = recording  # type: ignore[method-assign]
    out = {}
    try:
        for name, (conversation, params) in CASES.items():
            built.clear()
            reply = _Reply()
            tensors = {
                "REQUEST_ID": wire.text_tensor(f"pin-{name}"),
                "CONVERSATION": wire.text_tensor(encode(conversation)),
                "AUDIO": np.zeros(0, np.float32),
                "AUDIO_LENGTHS": np.zeros(0, np.int32),
                "PARAMETERS": wire.text_tensor(
                    encode(msgspec.structs.replace(params, max_tokens=1))
                ),
            }
            stage.submit(tensors, reply)
            assert reply.done.wait(60), name
            assert reply.error is None, (name, reply.error)
            (prompt,) = built
            ids = [int(i) for i in prompt.input_ids[0]]
            out[name] = _record(stage.tokenizer.decode(ids, skip_special_tokens=False), ids)
    finally:
        stage.close()
    return out


def _pinned(generator: str) -> dict[str, dict[str, Any]]:
    pinned: dict[str, dict[str, Any]] = json.loads(PINNED.read_text())[generator]
    return pinned


def test_cascade_prompts_are_unchanged() -> None:
    assert cascade_prompts() == _pinned("cascade")


def test_thinker_prompts_are_unchanged(tmp_path: Path) -> None:
    assert omni_prompts(tmp_path) == _pinned("omni")


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        pinned = {"cascade": cascade_prompts(), "omni": omni_prompts(Path(tmp))}
    PINNED.write_text(json.dumps(pinned, indent=1, ensure_ascii=False) + "\n")
    sys.stdout.write(f"wrote {PINNED}\n")

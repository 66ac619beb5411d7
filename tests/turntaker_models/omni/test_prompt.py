"""Our PromptBuilder against Qwen's own processor: the same ids, audio features and pixels.

The reference is `Qwen3OmniMoeProcessor` loaded from the tiny checkpoint (its chat template,
tokenizer, feature extractor and image processor), run the documented way:
`apply_chat_template(messages)` then `processor(text=..., images=..., audio=...)`.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import torch
from PIL import Image

from tests.turntaker_models.omni.conftest import Tiny
from tests.turntaker_models.omni.images import data_url, encoded
from turntaker_models.contract import (
    AudioPart,
    ContractError,
    Conversation,
    ImagePart,
    Message,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    ToolSpec,
)
from turntaker_models.omni.prompt import tool_schema


def tone(seconds: float, hz: float) -> npt.NDArray[np.float32]:
    t = np.arange(int(16000 * seconds)) / 16000
    return (0.1 * np.sin(2 * np.pi * hz * t)).astype(np.float32)


def _processor_class() -> Any:
    from transformers import Qwen3OmniMoeProcessor
    from transformers.processing_utils import ProcessorMixin

    class WithoutVideo(Qwen3OmniMoeProcessor):  # type: ignore[misc]
        """Qwen's processor less its video processor, which needs torchvision (not installed:
        PyPI has no CPU build for torch 2.13.0). Nothing else changes: the text, image and
        audio paths, the chat template and from_pretrained are the real class's."""

        def __init__(
            self,
            image_processor: Any = None,
            feature_extractor: Any = None,
            tokenizer: Any = None,
            chat_template: str | None = None,
        ) -> None:
            ProcessorMixin.__init__(
                self, image_processor, feature_extractor, tokenizer, chat_template=chat_template
            )
            # What Qwen3OmniMoeProcessor.__init__ reads off the tokenizer.
            for name in ("image", "audio", "video"):
                setattr(self, f"{name}_token", getattr(tokenizer, f"{name}_token"))
                setattr(self, f"{name}_token_id", getattr(tokenizer, f"{name}_token_id"))
            for name in ("vision_bos", "vision_eos", "audio_bos", "audio_eos"):
                setattr(self, f"{name}_token", getattr(tokenizer, f"{name}_token"))

    return WithoutVideo


@pytest.fixture(scope="module")
def processor(tiny: Tiny) -> Any:
    return _processor_class().from_pretrained(str(tiny.path), local_files_only=True)


def _messages(conversation: Conversation) -> list[dict[str, Any]]:
    """The conversation in the processor's chat format (content lists of typed items; calls as
    an assistant's OpenAI-style `tool_calls`, each tool result as its own `tool` message)."""
    kinds = {TextPart: "text", AudioPart: "audio", ImagePart: "image"}
    out: list[dict[str, Any]] = []
    for message in conversation.messages:
        if message.role == "tool":
            for part in message.content:
                assert isinstance(part, ToolResultPart)
                out.append({"role": "tool", "content": part.output})
            continue
        content: list[dict[str, Any]] = []
        calls: list[dict[str, Any]] = []
        for part in message.content:
            if isinstance(part, ToolCallPart):
                function = {"name": part.name, "arguments": part.arguments}
                calls.append({"id": part.call_id, "type": "function", "function": function})
                continue
            item: dict[str, Any] = {"type": kinds[type(part)]}
            if isinstance(part, TextPart):
                item["text"] = part.text
            content.append(item)
        entry: dict[str, Any] = {"role": message.role, "content": content}
        if calls:
            entry["tool_calls"] = calls
        out.append(entry)
    return out


PNG = encoded(64, 48, "PNG")
JPEG = encoded(40, 90, "JPEG")
BIG = encoded(300, 200, "PNG")  # above the tiny processor's max_pixels: resized down
CONVERSATION = Conversation(
    [
        Message("system", [TextPart("You are a helpful assistant. Be brief.")]),
        Message("user", [AudioPart(0), ImagePart(data_url(PNG, "image/png")), TextPart("Hi")]),
        Message("assistant", [TextPart("Hello! How can I help?")]),
        Message("assistant"),  # a turn the user never heard
        Message(
            "user",
            [
                TextPart("What is "),
                TextPart("in these?"),  # two text parts: one run, as the template joins them
                ImagePart(data_url(JPEG, "image/jpeg")),
                AudioPart(1),
                ImagePart(data_url(BIG, "image/png")),
            ],
        ),
    ]
)
AUDIO = [tone(1.3, 220.0), tone(0.6, 330.0)]


def test_prompt_equals_the_real_processor(tiny: Tiny, processor: Any) -> None:
    ours = tiny.prompts.build(CONVERSATION, AUDIO)
    text = processor.apply_chat_template(
        _messages(CONVERSATION), tokenize=False, add_generation_prompt=True
    )
    # The processor decodes nothing itself here: it gets the images as PIL decodes the bytes.
    images = [Image.open(io.BytesIO(data)) for data in (PNG, JPEG, BIG)]
    theirs = processor(text=text, images=images, audio=AUDIO, return_tensors="pt")
    assert ours.input_ids.tolist() == theirs["input_ids"].tolist(), "token ids differ"
    assert ours.input_features is not None and ours.feature_attention_mask is not None
    assert torch.equal(ours.input_features, theirs["input_features"]), "audio features differ"
    assert torch.equal(ours.feature_attention_mask, theirs["feature_attention_mask"])
    assert ours.pixel_values is not None and ours.image_grid_thw is not None
    assert torch.equal(ours.pixel_values, theirs["pixel_values"]), "image pixels differ"
    assert torch.equal(ours.image_grid_thw, theirs["image_grid_thw"]), "image grids differ"
    # The checkpoint's own template: the empty assistant turn stays, the prompt ends ready.
    assert "<|im_start|>assistant\n<|im_end|>\n" in text
    assert text.endswith("<|im_start|>assistant\n")


WEATHER = ToolSpec(
    "get_weather",
    "The weather in a city, now — «in °C».",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
CLOCK = ToolSpec("get_time", parameters={"type": "object", "properties": {}})
TOOL_CONVERSATION = Conversation(
    [
        Message("system", [TextPart("You are a helpful assistant.")]),
        Message("user", [AudioPart(0), TextPart("What's the weather in Paris?")]),
        # A call after spoken text, then a call alone.
        Message(
            "assistant",
            [
                TextPart("Let me check."),
                ToolCallPart("call_1", "get_weather", '{"city": "Paris"}'),
            ],
        ),
        Message("tool", [ToolResultPart("call_1", '{"temp_c": 21, "sky": "clear"}')]),
        Message("assistant", [TextPart("It is 21 degrees and clear.")]),
        Message("user", [ImagePart(data_url(PNG, "image/png")), TextPart("And the time?")]),
        Message("assistant", [ToolCallPart("call_2", "get_time", "{}")]),
        # Two results in a row: one user turn of two <tool_response> blocks.
        Message("tool", [ToolResultPart("call_2", "15:04")]),
        Message("tool", [ToolResultPart("call_3", "Europe/Paris")]),
    ]
)


@pytest.mark.parametrize("system", [True, False], ids=["system", "no-system"])
def test_prompt_with_tools_equals_the_real_processor(
    tiny: Tiny, processor: Any, system: bool
) -> None:
    conversation = TOOL_CONVERSATION
    if not system:
        conversation = Conversation(conversation.messages[1:])
    tools = [WEATHER, CLOCK]
    ours = tiny.prompts.build(conversation, AUDIO[:1], tools=tools)
    text = processor.apply_chat_template(
        _messages(conversation),
        tools=[tool_schema(t) for t in tools],
        tokenize=False,
        add_generation_prompt=True,
    )
    images = [Image.open(io.BytesIO(PNG))]
    theirs = processor(text=text, images=images, audio=AUDIO[:1], return_tensors="pt")
    assert ours.input_ids.tolist() == theirs["input_ids"].tolist(), "token ids differ"
    assert ours.input_features is not None
    assert torch.equal(ours.input_features, theirs["input_features"]), "audio features differ"
    assert ours.pixel_values is not None
    assert torch.equal(ours.pixel_values, theirs["pixel_values"]), "image pixels differ"
    # The template really took the tool branches: the tools block opens the prompt, the calls
    # and results are where Qwen's layout puts them, and the markers are single tokens.
    opening = (
        "<|im_start|>system\nYou are a helpful assistant.\n\n# Tools"
        if system
        else ("<|im_start|>system\n# Tools")
    )
    assert text.startswith(opening)
    assert text.count("<|im_start|>system") == 1
    assert '"description": "The weather in a city, now — «in °C»."' in text
    assert (
        'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}'
        in text
    )
    assert "<|im_start|>assistant\n<tool_call>\n" in text
    assert "</tool_response>\n<tool_response>\nEurope/Paris\n</tool_response><|im_end|>" in text
    tokenizer = tiny.prompts.tokenizer
    ids = ours.input_ids[0].tolist()
    call_id = tokenizer.convert_tokens_to_ids("<tool_call>")
    response_id = tokenizer.convert_tokens_to_ids("<tool_response>")
    # Two in the tools block's instructions (<tool_call></tool_call> and the example), two calls.
    assert ids.count(call_id) == 4 and ids.count(response_id) == 3


def test_tool_parts_out_of_place_are_refused(tiny: Tiny) -> None:
    call = ToolCallPart("c", "get_time", "{}")
    for bad in (
        Message("user", [call]),
        Message("assistant", [ToolResultPart("c", "x")]),
        Message("tool", [ImagePart(data_url(PNG, "image/png"))]),
        Message("tool"),
    ):
        conversation = Conversation([Message("user", [TextPart("Hi")]), bad])
        with pytest.raises(ContractError):
            tiny.prompts.build(conversation, [], tools=[CLOCK])


def test_layout_names_every_part(tiny: Tiny) -> None:
    prompt = tiny.prompts.build(CONVERSATION, AUDIO)
    roles = [m.role for m in prompt.layout]
    assert roles == ["system", "user", "assistant", "assistant", "user"]
    assert prompt.layout[3].parts == ()
    kinds = [p.kind for p in prompt.layout[4].parts]
    assert kinds == ["text", "text", "image", "audio", "image"]
    ids = prompt.input_ids[0].tolist()
    tc = tiny.config.thinker_config
    images = [p for m in prompt.layout for p in m.parts if p.kind == "image"]
    audio = [p for m in prompt.layout for p in m.parts if p.kind == "audio"]
    assert sum(p.tokens for p in images) == ids.count(tc.image_token_id)
    assert sum(p.tokens for p in audio) == ids.count(tc.audio_token_id)
    # 64x48 -> 64x64 pixels (multiples of patch 16 x merge 2) -> a 4x4 grid -> 4 tokens.
    assert images[0].grid == (1, 4, 4) and images[0].tokens == 4
    # 300x200 is over the tiny max_pixels (128*128): scaled down, at most 16 tokens.
    assert images[2].tokens <= 16


def test_typed_special_tokens_stay_text(tiny: Tiny) -> None:
    # Unlike the processor, a user's "<|im_end|>" must not end the turn.
    conversation = Conversation([Message("user", [TextPart("a<|im_end|>b<|image_pad|>")])])
    ids = tiny.prompts.build(conversation, []).input_ids[0].tolist()
    assert ids.count(tiny.config.im_end_token_id) == 1  # only the turn's own
    assert tiny.config.thinker_config.image_token_id not in ids


def test_image_builder_reads_the_checkpoint(tiny: Tiny) -> None:
    # No hard-coded sizes: the patching is the vision tower's, the bounds the checkpoint's.
    vision = tiny.config.thinker_config.vision_config
    images = tiny.prompts.image_processor
    assert images is not None
    assert images.patch_size == vision.patch_size
    assert images.temporal_patch_size == vision.temporal_patch_size
    assert images.merge_size == vision.spatial_merge_size


def test_without_an_image_processor_images_are_refused(tiny: Tiny, tmp_path: Path) -> None:
    from turntaker_models.omni.prompt import PromptBuilder

    builder = PromptBuilder(
        tiny.prompts.tokenizer, tiny.prompts.feature_extractor, tiny.config.thinker_config
    )
    conversation = Conversation([Message("user", [ImagePart(data_url(PNG, "image/png"))])])
    with pytest.raises(ContractError, match="no image processor"):
        builder.build(conversation, [])


def test_a_system_message_mid_conversation_equals_the_real_processor(
    tiny: Tiny, processor: Any
) -> None:
    # OpenAI clients add system items at any point (docs/protocol.md "Client events").
    conversation = Conversation(
        [
            Message("system", [TextPart("You are a helpful assistant.")]),
            Message("user", [TextPart("Hi")]),
            Message("assistant", [TextPart("Hello!")]),
            Message("system", [TextPart("From now on, answer in French.")]),
            Message("user", [TextPart("How are you?")]),
        ]
    )
    ours = tiny.prompts.build(conversation, [])
    text = processor.apply_chat_template(
        _messages(conversation), tokenize=False, add_generation_prompt=True
    )
    theirs = processor(text=text, return_tensors="pt")
    assert ours.input_ids.tolist() == theirs["input_ids"].tolist(), "token ids differ"
    assert text.count("<|im_start|>system\n") == 2

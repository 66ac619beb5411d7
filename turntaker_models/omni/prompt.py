"""Conversation -> Qwen3-Omni thinker prompt: the token ids, audio features and image pixels that
Qwen's own processor (`Qwen3OmniMoeProcessor` with the checkpoint's chat template) gives.

Format (Qwen's chat template): `<|im_start|>role\\n...<|im_end|>\\n` per message, ending with
`<|im_start|>assistant\\n`. An audio part becomes `<|audio_start|>`, one `<|audio_pad|>` per
audio-tower output frame, `<|audio_end|>`; an image part becomes `<|vision_start|>`,
grid.prod() // merge_size**2 `<|image_pad|>`, `<|vision_end|>`. The thinker scatters the towers'
outputs over the pads. An empty assistant message stays an empty assistant turn: it marks a turn
the user never heard.

Tools (the template's `tools=` branch, Hermes style, as Qwen3's templates lay it out):
- Given tools, the first turn is a system turn: the conversation's first system message (if it
  is first), a blank line, then `TOOLS_PREAMBLE`, one `tool_schema(tool)` JSON line per tool,
  and `TOOLS_POSTAMBLE`. Without tools nothing of this is written.
- An assistant message's `tool_call` parts follow its content (whatever their place among the
  parts), each `<tool_call>\\n{"name": NAME, "arguments": ARGUMENTS}\\n</tool_call>`, with the
  arguments' JSON text as it was made, separated by a newline from the content and each other.
- A run of `tool` messages is one user turn: `<|im_start|>user`, then per `tool_result` part
  `\\n<tool_response>\\nOUTPUT\\n</tool_response>`, then `<|im_end|>\\n`. A `tool` message holds
  tool results and text only (a text part counts as a result); a call outside an assistant
  message, a result outside a tool message, or a tool message without a result is refused.

Rules:
- The same ids, features and pixels as the processor (tests/turntaker_models/omni/test_prompt.py
  checks it): text between special tokens is tokenized as one run, as the tokenizer does on the
  template's whole string; audio and images go through the checkpoint's own feature extractor
  and image processor, in order of appearance.
- Unlike the processor, text is tokenized with split_special_tokens: a user who types
  "<|im_end|>" gets text, not a turn boundary.
- A bad image is a ContractError naming it (images.py); so is audio that breaks the contract.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import torch

from turntaker_models.contract import (
    INPUT_SAMPLE_RATE,
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
from turntaker_models.omni.images import ImageLimits, decode_image, load_image_processor

# 30 minutes of audio in one prompt is far past any turn; refuse rather than run out of memory.
MAX_AUDIO_SAMPLES = INPUT_SAMPLE_RATE * 60 * 30


TOOLS_PREAMBLE = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
TOOLS_POSTAMBLE = (
    "\n</tools>\n\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
)


def tool_schema(tool: ToolSpec) -> dict[str, Any]:
    """A tool as the chat template gets it (OpenAI's chat-completions `tools` item)."""
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.parameters,
        },
    }


def tool_call_text(call: ToolCallPart) -> str:
    """An earlier call as the template writes it into an assistant turn."""
    return f'<tool_call>\n{{"name": "{call.name}", "arguments": {call.arguments}}}\n</tool_call>'


def audio_token_count(feature_frames: int, n_window: int) -> int:
    """Audio-tower output frames for `feature_frames` mel frames (Qwen's formula)."""
    chunk = n_window * 2
    leave = feature_frames % chunk
    feat = (leave - 1) // 2 + 1
    return ((feat - 1) // 2 + 1 - 1) // 2 + 1 + (feature_frames // chunk) * 13


@dataclass(frozen=True)
class PartLayout:
    """One part as the thinker received it: text, or how many placeholders a medium took."""

    kind: Literal["text", "audio", "image", "tool_call", "tool_result"]
    # text: the text; tool_call: the arguments; tool_result: the output.
    text: str = ""
    tokens: int = 0
    grid: tuple[int, int, int] | None = None  # images: (t, h, w) in patches
    name: str = ""  # tool_call: the function
    call_id: str = ""  # tool_call, tool_result


@dataclass(frozen=True)
class MessageLayout:
    role: str
    parts: tuple[PartLayout, ...]


@dataclass(frozen=True)
class Prompt:
    input_ids: torch.Tensor  # [1, L] long
    # [n_audio, mel, frames] and [n_audio, frames], or None without audio.
    input_features: torch.Tensor | None
    feature_attention_mask: torch.Tensor | None
    # [patches, C * T * P * P] and [n_images, 3] (t, h, w), or None without images.
    pixel_values: torch.Tensor | None = None
    image_grid_thw: torch.Tensor | None = None
    layout: tuple[MessageLayout, ...] = field(default=())


class _Ids:
    """Token ids built the way the tokenizer reads the template's string: the text between two
    special tokens is one run, tokenized at once (BPE merges across part boundaries)."""

    def __init__(self, encode: Any) -> None:
        self.encode = encode
        self.ids: list[int] = []
        self.run: list[str] = []

    def text(self, text: str) -> None:
        self.run.append(text)

    def special(self, *tokens: int) -> None:
        self.flush()
        self.ids.extend(tokens)

    def flush(self) -> None:
        if self.run:
            self.ids += self.encode("".join(self.run))
            self.run.clear()


@dataclass
class _Media:
    """The audio and image placeholders of one build, handed out in order of appearance."""

    audio_counts: list[int]
    image_counts: list[int]
    grids: torch.Tensor | None
    audio: int = 0
    image: int = 0


def _check_tool_parts(message: Message) -> None:
    for part in message.content:
        if isinstance(part, ToolCallPart) and message.role != "assistant":
            raise ContractError(f"a tool_call part in a {message.role} message")
        if isinstance(part, ToolResultPart) and message.role != "tool":
            raise ContractError(f"a tool_result part in a {message.role} message")
        if message.role == "tool" and not isinstance(part, ToolResultPart | TextPart):
            raise ContractError("a tool message holds tool_result (and text) parts only")
    if message.role == "tool" and not message.content:
        raise ContractError("a tool message without a tool_result")


class PromptBuilder:
    """Builds prompts with one tokenizer, feature extractor and image processor; stateless."""

    def __init__(
        self,
        tokenizer: Any,
        feature_extractor: Any,
        thinker_config: Any,
        image_processor: Any = None,
        image_limits: ImageLimits | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.feature_extractor = feature_extractor
        self.image_processor = image_processor
        self.image_limits = image_limits or ImageLimits()
        self.n_window = int(thinker_config.audio_config.n_window)
        self.audio_pad = int(thinker_config.audio_token_id)
        self.audio_start = int(thinker_config.audio_start_token_id)
        self.audio_end = self._special("<|audio_end|>")
        self.image_pad = int(thinker_config.image_token_id)
        self.vision_start = int(thinker_config.vision_start_token_id)
        self.vision_end = self._special("<|vision_end|>")
        self.im_start = self._special("<|im_start|>")
        self.im_end = self._special("<|im_end|>")

    @classmethod
    def load(
        cls, path: Path, thinker_config: Any, image_limits: ImageLimits | None = None
    ) -> PromptBuilder:
        """The builder of a checkpoint folder: its tokenizer, feature extractor and image
        processor, each as the checkpoint configures it."""
        from turntaker_models.omni.loader import load_feature_extractor, load_tokenizer

        return cls(
            load_tokenizer(path),
            load_feature_extractor(path),
            thinker_config,
            load_image_processor(path),
            image_limits,
        )

    def _special(self, token: str) -> int:
        token_id = self.tokenizer.convert_tokens_to_ids(token)
        if not isinstance(token_id, int) or token_id == self.tokenizer.unk_token_id:
            raise ValueError(f"tokenizer lacks {token}")
        return token_id

    def _text(self, text: str) -> list[int]:
        # split_special_tokens: a user who types "<|im_end|>" gets text, not a turn boundary.
        ids: list[int] = self.tokenizer.encode(
            text, add_special_tokens=False, split_special_tokens=True
        )
        return ids

    def _features(
        self, segments: list[npt.NDArray[np.float32]]
    ) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
        for i, segment in enumerate(segments):
            if segment.shape[0] == 0:
                raise ContractError(f"audio segment {i} is empty")
        if sum(s.shape[0] for s in segments) > MAX_AUDIO_SAMPLES:
            raise ContractError("audio is longer than 30 minutes")
        out = self.feature_extractor(
            [np.asarray(s, np.float32) for s in segments],
            sampling_rate=INPUT_SAMPLE_RATE,
            padding=True,
            truncation=False,
            return_attention_mask=True,
            return_tensors="pt",
        )
        features = out["input_features"]
        mask = out["attention_mask"]
        counts = [audio_token_count(int(n), self.n_window) for n in mask.sum(-1).tolist()]
        return features, mask, counts

    def _images(self, urls: list[str]) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
        limits = self.image_limits
        if self.image_processor is None:
            raise ContractError("this checkpoint has no image processor: images are refused")
        if len(urls) > limits.max_images:
            raise ContractError(f"{len(urls)} images; at most {limits.max_images} per request")
        pixels: list[torch.Tensor] = []
        grids: list[torch.Tensor] = []
        for index, url in enumerate(urls):
            image = decode_image(index, url, limits)
            try:
                # One image per call so that a failure names its image; the processor's own
                # batch call concatenates the same per-image patches.
                out = self.image_processor(images=[image], return_tensors="pt")
            except Exception as error:
                raise ContractError(f"image {index} could not be processed: {error}") from None
            pixels.append(out["pixel_values"])
            grids.append(out["image_grid_thw"])
        grid = torch.cat(grids).long()
        merge = int(self.image_processor.merge_size)
        counts = [int(n) for n in (grid.prod(-1) // merge**2).tolist()]
        return torch.cat(pixels), grid, counts

    def _content(self, message: Message, ids: _Ids, media: _Media) -> MessageLayout:
        """Writes a message's text, audio and image parts (not its calls) in order."""
        parts: list[PartLayout] = []
        for part in message.content:
            if isinstance(part, TextPart):
                ids.text(part.text)
                parts.append(PartLayout("text", text=part.text))
            elif isinstance(part, AudioPart):
                count = media.audio_counts[media.audio]
                ids.special(self.audio_start, *[self.audio_pad] * count, self.audio_end)
                parts.append(PartLayout("audio", tokens=count))
                media.audio += 1
            elif isinstance(part, ImagePart):
                assert media.grids is not None
                count = media.image_counts[media.image]
                t, h, w = (int(v) for v in media.grids[media.image].tolist())
                ids.special(self.vision_start, *[self.image_pad] * count, self.vision_end)
                parts.append(PartLayout("image", tokens=count, grid=(t, h, w)))
                media.image += 1
        return MessageLayout(message.role, tuple(parts))

    def build(
        self,
        conversation: Conversation,
        audio: list[npt.NDArray[np.float32]],
        tools: Sequence[ToolSpec] = (),
    ) -> Prompt:
        """The prompt of `conversation`; `tools` (none: no tools block) are laid out as the
        template's `tools=` does."""
        if not conversation.messages:
            raise ContractError("CONVERSATION has no messages")
        # Audio goes to the feature extractor in order of appearance; each part may name any
        # segment (and the same one twice), so collect the parts' segments in prompt order.
        order: list[int] = []
        urls: list[str] = []
        for message in conversation.messages:
            for part in message.content:
                if isinstance(part, ImagePart):
                    urls.append(part.image_url)
                elif isinstance(part, AudioPart):
                    if not 0 <= part.audio < len(audio):
                        raise ContractError(
                            f"audio part {part.audio} but only {len(audio)} audio segments"
                        )
                    order.append(part.audio)
        features = mask = pixels = grids = None
        audio_counts: list[int] = []
        image_counts: list[int] = []
        if urls:
            pixels, grids, image_counts = self._images(urls)
        if order:
            features, mask, audio_counts = self._features([audio[i] for i in order])
        ids = _Ids(self._text)
        media = _Media(audio_counts, image_counts, grids)
        layout: list[MessageLayout] = []
        messages = conversation.messages
        for message in messages:
            _check_tool_parts(message)
        first_system = messages[0].role == "system"
        if tools:
            ids.special(self.im_start)
            ids.text("system\n")
            if first_system:
                layout.append(self._content(messages[0], ids, media))
                ids.text("\n\n")
            ids.text(TOOLS_PREAMBLE)
            for tool in tools:
                ids.text("\n" + json.dumps(tool_schema(tool), ensure_ascii=False))
            ids.text(TOOLS_POSTAMBLE)
            ids.special(self.im_end)
            ids.text("\n")
        for index, message in enumerate(messages):
            if index == 0 and first_system and tools:
                continue  # written with the tools
            if message.role == "tool":
                # A run of tool messages is one user turn of <tool_response> blocks.
                if index == 0 or messages[index - 1].role != "tool":
                    ids.special(self.im_start)
                    ids.text("user")
                results: list[PartLayout] = []
                for part in message.content:
                    output = part.output if isinstance(part, ToolResultPart) else ""
                    call_id = part.call_id if isinstance(part, ToolResultPart) else ""
                    if isinstance(part, TextPart):
                        output = part.text
                    ids.text(f"\n<tool_response>\n{output}\n</tool_response>")
                    results.append(PartLayout("tool_result", text=output, call_id=call_id))
                if index == len(messages) - 1 or messages[index + 1].role != "tool":
                    ids.special(self.im_end)
                    ids.text("\n")
                layout.append(MessageLayout("tool", tuple(results)))
                continue
            ids.special(self.im_start)
            ids.text(f"{message.role}\n")
            content = self._content(message, ids, media)
            calls = [part for part in message.content if isinstance(part, ToolCallPart)]
            written = any(p.kind != "text" or p.text for p in content.parts)
            for number, call in enumerate(calls):
                if written or number:
                    ids.text("\n")
                ids.text(tool_call_text(call))
            layout.append(
                MessageLayout(
                    message.role,
                    content.parts
                    + tuple(
                        PartLayout("tool_call", text=c.arguments, name=c.name, call_id=c.call_id)
                        for c in calls
                    ),
                )
            )
            ids.special(self.im_end)
            ids.text("\n")
        ids.special(self.im_start)
        ids.text("assistant\n")
        ids.flush()
        return Prompt(
            input_ids=torch.tensor([ids.ids], dtype=torch.long),
            input_features=features,
            feature_attention_mask=mask,
            pixel_values=pixels,
            image_grid_thw=grids,
            layout=tuple(layout),
        )

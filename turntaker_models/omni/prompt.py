"""Conversation -> Qwen3-Omni thinker prompt: the token ids, audio features and image pixels that
Qwen's own processor (`Qwen3OmniMoeProcessor` with the checkpoint's chat template) gives.

Format (Qwen's chat template without tools): `<|im_start|>role\\n...<|im_end|>\\n` per message,
ending with `<|im_start|>assistant\\n`. An audio part becomes `<|audio_start|>`, one
`<|audio_pad|>` per audio-tower output frame, `<|audio_end|>`; an image part becomes
`<|vision_start|>`, grid.prod() // merge_size**2 `<|image_pad|>`, `<|vision_end|>`. The thinker
scatters the towers' outputs over the pads. An empty assistant message stays an empty assistant
turn: it marks a turn the user never heard.

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
    TextPart,
)
from turntaker_models.omni.images import ImageLimits, decode_image, load_image_processor

# 30 minutes of audio in one prompt is far past any turn; refuse rather than run out of memory.
MAX_AUDIO_SAMPLES = INPUT_SAMPLE_RATE * 60 * 30


def audio_token_count(feature_frames: int, n_window: int) -> int:
    """Audio-tower output frames for `feature_frames` mel frames (Qwen's formula)."""
    chunk = n_window * 2
    leave = feature_frames % chunk
    feat = (leave - 1) // 2 + 1
    return ((feat - 1) // 2 + 1 - 1) // 2 + 1 + (feature_frames // chunk) * 13


@dataclass(frozen=True)
class PartLayout:
    """One part as the thinker received it: text, or how many placeholders a medium took."""

    kind: Literal["text", "audio", "image"]
    text: str = ""
    tokens: int = 0
    grid: tuple[int, int, int] | None = None  # images: (t, h, w) in patches


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

    def build(self, conversation: Conversation, audio: list[npt.NDArray[np.float32]]) -> Prompt:
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
        layout: list[MessageLayout] = []
        audio_index = image_index = 0
        for message in conversation.messages:
            parts: list[PartLayout] = []
            ids.special(self.im_start)
            ids.text(f"{message.role}\n")
            for part in message.content:
                if isinstance(part, TextPart):
                    ids.text(part.text)
                    parts.append(PartLayout("text", text=part.text))
                elif isinstance(part, AudioPart):
                    count = audio_counts[audio_index]
                    ids.special(self.audio_start, *[self.audio_pad] * count, self.audio_end)
                    parts.append(PartLayout("audio", tokens=count))
                    audio_index += 1
                else:
                    assert grids is not None
                    count = image_counts[image_index]
                    t, h, w = (int(v) for v in grids[image_index].tolist())
                    ids.special(self.vision_start, *[self.image_pad] * count, self.vision_end)
                    parts.append(PartLayout("image", tokens=count, grid=(t, h, w)))
                    image_index += 1
            ids.special(self.im_end)
            ids.text("\n")
            layout.append(MessageLayout(message.role, tuple(parts)))
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

"""Conversation -> Qwen3-Omni thinker prompt: token ids in Qwen's chat format plus audio features.

Format (Qwen's chat template without tools): `<|im_start|>role\\n...<|im_end|>\\n` per message,
ending with `<|im_start|>assistant\\n`. An audio part becomes `<|audio_start|>`, one
`<|audio_pad|>` per audio-tower output frame, `<|audio_end|>`; the thinker scatters the audio
tower's output over the pads. An empty assistant message stays an empty assistant turn: it marks
a turn the user never heard.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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

# 30 minutes of audio in one prompt is far past any turn; refuse rather than run out of memory.
MAX_AUDIO_SAMPLES = INPUT_SAMPLE_RATE * 60 * 30


def audio_token_count(feature_frames: int, n_window: int) -> int:
    """Audio-tower output frames for `feature_frames` mel frames (Qwen's formula)."""
    chunk = n_window * 2
    leave = feature_frames % chunk
    feat = (leave - 1) // 2 + 1
    return ((feat - 1) // 2 + 1 - 1) // 2 + 1 + (feature_frames // chunk) * 13


@dataclass(frozen=True)
class Prompt:
    input_ids: torch.Tensor  # [1, L] long
    # [n_audio, mel, frames] and [n_audio, frames], or None without audio.
    input_features: torch.Tensor | None
    feature_attention_mask: torch.Tensor | None


class PromptBuilder:
    """Builds prompts with one tokenizer and feature extractor; stateless between calls."""

    def __init__(self, tokenizer: Any, feature_extractor: Any, thinker_config: Any) -> None:
        self.tokenizer = tokenizer
        self.feature_extractor = feature_extractor
        self.n_window = int(thinker_config.audio_config.n_window)
        self.audio_pad = int(thinker_config.audio_token_id)
        self.audio_start = int(thinker_config.audio_start_token_id)
        self.audio_end = self._special("<|audio_end|>")
        self.im_start = self._special("<|im_start|>")
        self.im_end = self._special("<|im_end|>")

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

    def build(self, conversation: Conversation, audio: list[npt.NDArray[np.float32]]) -> Prompt:
        if not conversation.messages:
            raise ContractError("CONVERSATION has no messages")
        # Audio goes to the feature extractor in order of appearance; each part may name any
        # segment (and the same one twice), so collect the parts' segments in prompt order.
        order: list[int] = []
        for message in conversation.messages:
            for part in message.content:
                if isinstance(part, ImagePart):
                    raise ContractError("qwen3_omni: image parts are not supported yet")
                if isinstance(part, AudioPart):
                    if not 0 <= part.audio < len(audio):
                        raise ContractError(
                            f"audio part {part.audio} but only {len(audio)} audio segments"
                        )
                    order.append(part.audio)
        features = mask = None
        counts: list[int] = []
        if order:
            features, mask, counts = self._features([audio[i] for i in order])
        ids: list[int] = []
        audio_index = 0
        for message in conversation.messages:
            ids.append(self.im_start)
            ids += self._text(f"{message.role}\n")
            for part in message.content:
                if isinstance(part, TextPart):
                    ids += self._text(part.text)
                elif isinstance(part, AudioPart):
                    ids.append(self.audio_start)
                    ids += [self.audio_pad] * counts[audio_index]
                    ids.append(self.audio_end)
                    audio_index += 1
            ids.append(self.im_end)
            ids += self._text("\n")
        ids.append(self.im_start)
        ids += self._text("assistant\n")
        return Prompt(
            input_ids=torch.tensor([ids], dtype=torch.long),
            input_features=features,
            feature_attention_mask=mask,
        )

"""The step-by-step stages against transformers' own `generate()` on tiny random weights.

Greedy decoding must give the same text tokens and the same codec codes (checked through the
waveform, which the codes determine) as `Qwen3OmniMoeForConditionalGeneration.generate`, on a
text prompt, on a prompt with audio, system and unheard (empty) assistant turns, and on one
with images too (the vision tower's features, the thinker's and the talker's mRoPE positions).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import torch

from tests.turntaker_models.omni.conftest import Tiny
from tests.turntaker_models.omni.images import image_url
from turntaker_models.contract import AudioPart, Conversation, ImagePart, Message, TextPart
from turntaker_models.omni.code2wav import decode
from turntaker_models.omni.prompt import Prompt
from turntaker_models.omni.sampling import Cancelled, SamplingConfig
from turntaker_models.omni.talker import TalkerSession
from turntaker_models.omni.thinker import ThinkerSession

MAX_TOKENS = 12
MAX_CODEC_TOKENS = 40


def _never() -> bool:
    return False


def tone(seconds: float = 1.0, hz: float = 220.0) -> npt.NDArray[np.float32]:
    t = np.arange(int(16000 * seconds)) / 16000
    return (0.1 * np.sin(2 * np.pi * hz * t)).astype(np.float32)


@contextmanager
def last_logits(module: Any) -> Iterator[list[torch.Tensor]]:
    """The last position's logits of every forward of `module` (prefill first), while open.

    Greedy tokens of random tiny weights barely move when positions are off; these logits do,
    so they show that the mRoPE positions are generate()'s."""
    seen: list[torch.Tensor] = []

    def hook(_module: Any, _args: Any, output: Any) -> None:
        seen.append(output.logits[0, -1].detach().float().clone())

    handle = module.register_forward_hook(hook)
    try:
        yield seen
    finally:
        handle.remove()


@dataclass(frozen=True)
class Spoken:
    tokens: list[int]
    codes: npt.NDArray[np.int64]  # [G, frames]
    thinker_logits: list[torch.Tensor]
    talker_logits: list[torch.Tensor]


def speak(tiny: Tiny, prompt: Prompt, max_tokens: int, max_codec_tokens: int) -> Spoken:
    with last_logits(tiny.thinker) as thinker_logits, last_logits(tiny.talker) as talker_logits:
        tokens, codes = _speak(tiny, prompt, max_tokens, max_codec_tokens)
    return Spoken(tokens, codes, thinker_logits, talker_logits)


def _speak(
    tiny: Tiny, prompt: Prompt, max_tokens: int, max_codec_tokens: int
) -> tuple[list[int], npt.NDArray[np.int64]]:
    """The serving loop without Triton: thinker tokens feed the talker one at a time."""
    final_ids = {tiny.config.im_end_token_id}
    thinker = ThinkerSession(tiny.thinker, tiny.config, prompt, SamplingConfig(), 0, _never)
    token, start = thinker.prefill(want_talker=True)
    assert start is not None
    tokens = [token]

    def final(token: int) -> bool:
        return token in final_ids or len(tokens) >= max_tokens

    texts: list[torch.Tensor | None] = []
    while not final(token):
        token = thinker.step(token)
        tokens.append(token)
        texts.append(None if final(token) else thinker.embed(token))
    talker = TalkerSession(tiny.talker, tiny.config, True, 0, max_codec_tokens, _never)
    frames = []
    frame = talker.start(start, "ethan")
    pending = iter(texts)
    while frame is not None:
        frames.append(frame)
        frame = talker.step(next(pending, None))
    return tokens, np.array(frames, np.int64).T


@dataclass(frozen=True)
class Reference:
    tokens: list[int]
    codes: npt.NDArray[np.int64]
    wav: npt.NDArray[np.float32]
    thinker_logits: list[torch.Tensor]
    talker_logits: list[torch.Tensor]


def reference(tiny: Tiny, prompt: Prompt) -> Reference:
    from transformers import Qwen3OmniMoeForConditionalGeneration

    full = Qwen3OmniMoeForConditionalGeneration.from_pretrained(
        str(tiny.path), local_files_only=True
    ).eval()
    # generate() returns only the waveform; catch the codes on their way to Code2Wav.
    seen: list[torch.Tensor] = []
    chunked_decode = full.code2wav.chunked_decode

    def capture(codes: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        seen.append(codes)
        result: torch.Tensor = chunked_decode(codes, **kwargs)
        return result

    full.code2wav.chunked_decode = capture
    if prompt.pixel_values is not None and prompt.input_features is not None:
        # transformers 5.24's generate() fails on audio next to images: the talker's
        # get_rope_index reads `config.audio_config`, which the talker's config lacks. Lend this
        # reference instance the thinker's, as TalkerSession does (without touching its model).
        full.talker.config.audio_config = full.config.thinker_config.audio_config
    media: dict[str, Any] = {}
    if prompt.input_features is not None:
        media |= {
            "input_features": prompt.input_features,
            "feature_attention_mask": prompt.feature_attention_mask,
        }
    if prompt.pixel_values is not None:
        media |= {"pixel_values": prompt.pixel_values, "image_grid_thw": prompt.image_grid_thw}
    with last_logits(full.thinker) as thinker_logits, last_logits(full.talker) as talker_logits:
        sequences, wav = full.generate(
            input_ids=prompt.input_ids,
            attention_mask=torch.ones_like(prompt.input_ids),
            speaker="ethan",
            thinker_max_new_tokens=MAX_TOKENS,
            thinker_eos_token_id=tiny.config.im_end_token_id,
            thinker_do_sample=False,
            talker_max_new_tokens=MAX_CODEC_TOKENS,
            talker_do_sample=False,
            **media,
        )
    return Reference(
        tokens=sequences[0, prompt.input_ids.shape[1] :].tolist(),
        codes=seen[0][0].numpy(),
        wav=wav[0, 0].numpy(),
        thinker_logits=thinker_logits,
        talker_logits=talker_logits,
    )


CONVERSATIONS = {
    "text": (Conversation([Message("user", [TextPart("Hello, how are you today?")])]), 0),
    "audio": (
        Conversation(
            [
                Message("system", [TextPart("Be brief.")]),
                Message("user", [TextPart("Hi")]),
                Message("assistant"),
                Message("user", [AudioPart(0), TextPart("what was that?")]),
            ]
        ),
        1,
    ),
    "image": (
        Conversation(
            [
                Message("system", [TextPart("Be brief.")]),
                Message("user", [ImagePart(image_url(64, 48, "PNG")), TextPart("What is it?")]),
            ]
        ),
        0,
    ),
    "image_audio": (
        Conversation(
            [
                Message("system", [TextPart("Be brief.")]),
                Message("user", [ImagePart(image_url(64, 48, "PNG")), TextPart("Hi")]),
                Message("assistant", [TextPart("Hello.")]),
                Message("assistant"),
                Message(
                    "user",
                    [AudioPart(0), ImagePart(image_url(40, 90, "JPEG")), TextPart("and this?")],
                ),
            ]
        ),
        1,
    ),
}


@pytest.mark.parametrize("name", sorted(CONVERSATIONS))
def test_steps_equal_generate(tiny: Tiny, name: str) -> None:
    conversation, clips = CONVERSATIONS[name]
    prompt = tiny.prompts.build(conversation, [tone()] * clips)
    spoken = speak(tiny, prompt, MAX_TOKENS, MAX_CODEC_TOKENS)
    expected = reference(tiny, prompt)
    assert spoken.tokens == expected.tokens
    assert spoken.codes.shape[0] == tiny.config.talker_config.num_code_groups
    assert spoken.codes.shape[1] >= 1
    np.testing.assert_array_equal(spoken.codes, expected.codes)
    # The same forwards (prefill, then each step) with the same logits: the same inputs at the
    # same positions, the images' features and 3-D positions included.
    for stage, ours_all, theirs_all in [
        ("thinker", spoken.thinker_logits, expected.thinker_logits),
        ("talker", spoken.talker_logits, expected.talker_logits),
    ]:
        steps = min(len(ours_all), len(theirs_all))
        assert steps >= 2, stage
        pairs = zip(ours_all[:steps], theirs_all[:steps], strict=True)
        for step, (mine, theirs) in enumerate(pairs):
            torch.testing.assert_close(mine, theirs, msg=f"{stage} forward {step}")
    ours = decode(tiny.code2wav, spoken.codes)
    assert ours.shape == expected.wav.shape
    # Random tiny weights give a very quiet signal: compare relative to its scale.
    scale = float(np.abs(expected.wav).max())
    assert scale > 0
    assert float(np.abs(ours - expected.wav).max()) <= 1e-5 * scale


def test_audio_prompt_has_placeholders(tiny: Tiny) -> None:
    conversation, _ = CONVERSATIONS["audio"]
    prompt = tiny.prompts.build(conversation, [tone(2.0)])
    ids = prompt.input_ids[0].tolist()
    pads = ids.count(tiny.config.thinker_config.audio_token_id)
    assert pads > 0
    # 2 s of audio: 200 mel frames -> 26 audio-tower frames (Qwen's formula).
    assert pads == 26
    assert prompt.input_features is not None
    text = tiny.prompts.tokenizer.decode(ids)
    assert text.startswith("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi")
    assert "<|im_start|>assistant\n<|im_end|>\n" in text  # the unheard turn stays, empty
    assert text.endswith("<|im_start|>assistant\n")


def test_cancel_check_stops_every_stage(tiny: Tiny) -> None:
    conversation, _ = CONVERSATIONS["text"]
    prompt = tiny.prompts.build(conversation, [])
    calls = 0

    def after_three() -> bool:
        nonlocal calls
        calls += 1
        return calls > 3

    thinker = ThinkerSession(tiny.thinker, tiny.config, prompt, SamplingConfig(), 0, after_three)
    token, start = thinker.prefill(want_talker=True)
    with pytest.raises(Cancelled):
        for _ in range(10):
            token = thinker.step(token)
    assert start is not None
    calls = 0
    talker = TalkerSession(tiny.talker, tiny.config, True, 0, 100, after_three)
    # Prefill (1 check) + code predictor (G-1 = 3 checks): the 4th check is the predictor's
    # last, between code-predictor steps.
    with pytest.raises(Cancelled):
        talker.start(start, "ethan")
    assert calls == 4

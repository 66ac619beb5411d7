"""Tiny weights: deterministic for a seed, different across seeds, loadable stage by stage."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.turntaker_models.omni.conftest import Tiny
from turntaker_models.omni.tiny import make_tiny_omni

STAGES = ("thinker", "talker", "code2wav")


def test_same_seed_same_bytes(tiny: Tiny, tmp_path: Path) -> None:
    again = make_tiny_omni(tmp_path / "again", seed=0)
    for name in (
        "model.safetensors",
        "tokenizer.json",
        "config.json",
        "tokenizer_config.json",
        "preprocessor_config.json",
        "chat_template.jinja",
    ):
        assert (again / name).read_bytes() == (tiny.path / name).read_bytes(), name
    other = make_tiny_omni(tmp_path / "other", seed=1)
    assert (other / "model.safetensors").read_bytes() != (
        tiny.path / "model.safetensors"
    ).read_bytes()
    # Built aside and renamed: nothing half-written is left next to it.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["again", "other"]


def test_existing_dir_is_kept(tmp_path: Path) -> None:
    target = tmp_path / "w"
    target.mkdir()
    (target / "marker").write_text("x")
    assert make_tiny_omni(target) == target
    assert (target / "marker").exists()


def test_tokenizer_has_the_special_tokens(tiny: Tiny) -> None:
    tokenizer = tiny.prompts.tokenizer
    config = tiny.config
    for token, expected in [
        ("<|im_start|>", config.im_start_token_id),
        ("<|im_end|>", config.im_end_token_id),
        ("<|audio_pad|>", config.thinker_config.audio_token_id),
        ("<tts_pad>", config.tts_pad_token_id),
        ("assistant", config.assistant_token_id),
        ("user", config.user_token_id),
    ]:
        assert tokenizer.convert_tokens_to_ids(token) == expected
    assert tokenizer.encode("assistant\n", add_special_tokens=False)[0] == config.assistant_token_id
    assert len(tokenizer.encode("assistant\n", add_special_tokens=False)) == 2


@pytest.fixture(scope="module")
def full_state(tiny: Tiny) -> dict[str, Any]:
    from transformers import Qwen3OmniMoeForConditionalGeneration

    full = Qwen3OmniMoeForConditionalGeneration.from_pretrained(
        str(tiny.path), local_files_only=True
    )
    return {stage: getattr(full, stage).state_dict() for stage in STAGES}


@pytest.mark.parametrize("stage", STAGES)
def test_each_stage_loads_exactly_its_weights(
    tiny: Tiny, full_state: dict[str, Any], stage: str
) -> None:
    # The whole model loaded by transformers is the reference (it fuses the stored experts).
    state = getattr(tiny, stage).state_dict()
    reference = full_state[stage]
    assert set(state) == set(reference)
    for key, value in reference.items():
        assert state[key].equal(value), key
    for key, value in state.items():
        assert bool(value.isfinite().all()), key


def test_tokenizer_names_the_multimodal_tokens(tiny: Tiny) -> None:
    # What Qwen3OmniMoeProcessor.__init__ reads off the tokenizer, as Qwen's tokenizer has it.
    from turntaker_models.omni.tiny import MULTIMODAL_TOKENS

    tokenizer = tiny.prompts.tokenizer
    for name, token in MULTIMODAL_TOKENS.items():
        assert getattr(tokenizer, name) == token, name
    tc = tiny.config.thinker_config
    assert tokenizer.image_token_id == tc.image_token_id
    assert tokenizer.audio_token_id == tc.audio_token_id
    assert tokenizer.video_token_id == tc.video_token_id
    assert "<|vision_start|><|image_pad|><|vision_end|>" in tokenizer.chat_template

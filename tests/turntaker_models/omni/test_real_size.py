"""The weightless real-size checkpoint folder (real_size.py): the released model's sizes, the tiny
checkpoint's tokenizer and processors, no weights.

The sizes are pinned by parameter counts on the meta device (nothing allocated, ~2 s): the
released Qwen3-Omni-30B-A3B-Instruct checkpoint holds 35,259,818,545 parameters in its
safetensors (thinker 31.7B, talker 3.3B, Code2Wav 0.2B).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.turntaker_models.omni.conftest import Tiny
from turntaker_models.contract import AudioPart, Conversation, Message, TextPart
from turntaker_models.omni import loader
from turntaker_models.omni.prompt import PromptBuilder, audio_token_count
from turntaker_models.omni.real_size import make_random_init_omni

RELEASED_PARAMETERS = 35_259_818_545
STAGE_BILLIONS = {"thinker": 31.7, "talker": 3.3, "code2wav": 0.2}


@pytest.fixture(scope="module")
def real_dir(tiny: Tiny, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_random_init_omni(tmp_path_factory.mktemp("real") / "real", tiny.path, seed=0)


def test_meta_parameter_counts_are_the_released_checkpoints(real_dir: Path) -> None:
    config = loader.load_config(real_dir)
    meta = loader.Placement(torch.device("meta"), torch.bfloat16)
    counts = {}
    for stage in STAGE_BILLIONS:
        model = loader.build_empty(stage, getattr(config, f"{stage}_config"), meta)  # type: ignore[arg-type]
        counts[stage] = sum(p.numel() for p in model.parameters())
    for stage, billions in STAGE_BILLIONS.items():
        assert round(counts[stage] / 1e9, 1) == billions, f"{stage} size is not real: {counts}"
    assert sum(counts.values()) == RELEASED_PARAMETERS, f"not the released sizes: {counts}"


def test_folder_has_no_weights_but_every_other_tiny_file(tiny: Tiny, real_dir: Path) -> None:
    assert not list(real_dir.glob("*.safetensors")), "a random-init folder must hold no weights"
    assert json.loads((real_dir / loader.RANDOM_INIT_MARKER).read_text())["seed"] == 0
    assert loader.random_init_seed(real_dir) == 0
    assert loader.random_init_seed(tiny.path) is None
    copied = {p.name for p in tiny.path.iterdir() if not p.name.endswith(".safetensors")}
    missing = copied - {p.name for p in real_dir.iterdir()} - {"turntaker-tiny.json"}
    assert not missing, f"non-weight files of the tiny checkpoint not copied: {missing}"


def test_thinker_ids_are_the_tokenizers_and_codec_ids_the_real_talkers(
    tiny: Tiny, real_dir: Path
) -> None:
    config = loader.load_config(real_dir)
    for name in ("im_start_token_id", "tts_pad_token_id", "assistant_token_id"):
        assert getattr(config, name) == getattr(tiny.config, name), name
    thinker, talker = config.thinker_config, config.talker_config
    for name in ("audio_token_id", "image_token_id", "audio_start_token_id", "user_token_id"):
        assert getattr(thinker, name) == getattr(tiny.config.thinker_config, name), name
        if name != "user_token_id":
            assert getattr(talker, name) == getattr(tiny.config.talker_config, name), name
    assert (talker.codec_pad_id, talker.codec_bos_id, talker.codec_eos_token_id) == (
        2148,
        2149,
        2150,
    )
    assert (talker.codec_nothink_id, talker.codec_think_bos_id, talker.codec_think_eos_id) == (
        2155,
        2156,
        2157,
    )
    assert talker.accept_hidden_layer == 24 and talker.num_code_groups == 16
    assert config.code2wav_config.num_quantizers == talker.num_code_groups


def test_prompts_feed_the_real_audio_tower_128_mel_bins(real_dir: Path) -> None:
    config = loader.load_config(real_dir)
    prompts = PromptBuilder.load(real_dir, config.thinker_config)
    audio = (0.1 * np.sin(np.arange(32000) / 16000 * 2 * np.pi * 220)).astype(np.float32)
    turn = Message("user", [AudioPart(0), TextPart("what was that?")])
    prompt = prompts.build(Conversation([turn]), [audio])
    assert prompt.input_features is not None and prompt.feature_attention_mask is not None
    assert prompt.input_features.shape[1] == 128, "feature extractor not re-saved with 128 bins"
    frames = int(prompt.feature_attention_mask.sum())
    pads = int((prompt.input_ids == config.thinker_config.audio_token_id).sum())
    assert pads == audio_token_count(frames, 50)

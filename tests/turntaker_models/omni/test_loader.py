"""The loader's random-init path: a weightless folder (real_size.py, tiny sizes here) gives the
same modules as the tiny checkpoint's weights would, with real values, seeded, and they speak."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from tests.turntaker_models.omni.conftest import Tiny
from turntaker_models.contract import Conversation, Message, TextPart
from turntaker_models.omni import loader
from turntaker_models.omni.code2wav import decode
from turntaker_models.omni.prompt import PromptBuilder
from turntaker_models.omni.real_size import make_random_init_omni
from turntaker_models.omni.sampling import SamplingConfig
from turntaker_models.omni.talker import TalkerSession
from turntaker_models.omni.thinker import ThinkerSession

CPU = loader.Placement(torch.device("cpu"), torch.float32)
STAGES: tuple[loader.Stage, ...] = ("thinker", "talker", "code2wav")


def _never() -> bool:
    return False


@pytest.fixture(scope="module")
def folders(tiny: Tiny, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("random-init")
    return (
        make_random_init_omni(root / "seed0", tiny.path, seed=0, sizes="tiny"),
        make_random_init_omni(root / "seed1", tiny.path, seed=1, sizes="tiny"),
    )


@pytest.mark.parametrize("stage", STAGES)
def test_random_init_builds_what_the_weights_would_with_real_values(
    tiny: Tiny, folders: tuple[Path, Path], stage: loader.Stage
) -> None:
    built = loader.load_stage(folders[0], stage, CPU)
    loaded = getattr(tiny, stage)
    params, expected = dict(built.named_parameters()), dict(loaded.named_parameters())
    assert params.keys() == expected.keys(), "random-init stage has other parameters"
    for name, param in params.items():
        assert (param.shape, param.dtype) == (expected[name].shape, expected[name].dtype), name
        # torch.empty left anywhere (the talker's fused experts in 5.24) would show here.
        assert torch.isfinite(param).all() and param.abs().max() <= 1.0, f"{name} not filled"
        if param.ndim >= 2 and param.numel() >= 1000:
            assert 0.015 < float(param.float().std()) < 0.025, f"{name} is not N(0, 0.02)"
        elif name.endswith("norm.weight") or "layernorm" in name:
            assert torch.all(param == 1), f"norm {name} must start at 1"
    # Buffers (rope frequencies, sinusoids, code offsets) are computed, not loaded: the same.
    buffers, expected_buffers = dict(built.named_buffers()), dict(loaded.named_buffers())
    assert buffers.keys() == expected_buffers.keys()
    for name, buffer in buffers.items():
        assert torch.equal(buffer, expected_buffers[name]), f"buffer {name} differs"
    assert not built.training and not any(p.requires_grad for p in params.values())


def test_random_init_is_deterministic_per_seed(folders: tuple[Path, Path]) -> None:
    first = loader.load_stage(folders[0], "talker", CPU).state_dict()
    again = loader.load_stage(folders[0], "talker", CPU).state_dict()
    other = loader.load_stage(folders[1], "talker", CPU).state_dict()
    name = next(n for n, t in first.items() if ".experts." in n)
    assert all(torch.equal(t, again[n]) for n, t in first.items()), "same seed, other values"
    assert not torch.equal(first[name], other[name]), "seeds 0 and 1 gave the same values"


def test_random_init_stages_speak(folders: tuple[Path, Path]) -> None:
    path = folders[0]
    config = loader.load_config(path)
    stages = {stage: loader.load_stage(path, stage, CPU) for stage in STAGES}
    prompts = PromptBuilder.load(path, config.thinker_config)
    prompt = prompts.build(Conversation([Message("user", [TextPart("Hello there")])]), [])
    thinker = ThinkerSession(stages["thinker"], config, prompt, SamplingConfig(), 0, _never)
    token, start = thinker.prefill(want_talker=True)
    talker = TalkerSession(stages["talker"], config, True, 0, 10**6, _never)
    frames = [talker.start(start, "default")]
    for _ in range(3):
        token = thinker.step(token)
        frames.append(talker.step(thinker.embed(token)))
    codes = np.array([f for f in frames if f is not None], dtype=np.int64).T
    audio = decode(stages["code2wav"], codes)
    assert audio.shape[-1] == codes.shape[1] * 1920 - 555
    assert np.isfinite(audio).all()

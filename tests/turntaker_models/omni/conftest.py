"""Tiny random Qwen3-Omni weights, built once per test session (a few seconds, no download)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from turntaker_models.omni import loader
from turntaker_models.omni.prompt import PromptBuilder
from turntaker_models.omni.tiny import make_tiny_omni


@dataclass(frozen=True)
class Tiny:
    path: Path
    config: Any
    thinker: Any
    talker: Any
    code2wav: Any
    prompts: PromptBuilder


@pytest.fixture(scope="session")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Tiny:
    path = make_tiny_omni(tmp_path_factory.mktemp("omni") / "tiny", seed=0)
    placement = loader.Placement.auto()
    config = loader.load_config(path)
    return Tiny(
        path=path,
        config=config,
        thinker=loader.load_stage(path, "thinker", placement),
        talker=loader.load_stage(path, "talker", placement),
        code2wav=loader.load_stage(path, "code2wav", placement),
        prompts=PromptBuilder.load(path, config.thinker_config),
    )

"""Tiny random Qwen3-Omni weights, built once per test session (a few seconds, no download)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

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


T = TypeVar("T")


def concurrently(calls: dict[str, Callable[[], T]], timeout_s: float) -> dict[str, T | Exception]:
    """Each call on its own thread (streams of one stage at once): its result or its error."""
    out: dict[str, T | Exception] = {}

    def one(key: str) -> None:
        try:
            out[key] = calls[key]()
        except Exception as error:
            out[key] = error

    threads = [threading.Thread(target=one, args=(key,)) for key in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout_s)
    assert not any(thread.is_alive() for thread in threads), "a stream is still blocked"
    return out

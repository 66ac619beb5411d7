"""The three Qwen3-Omni stages behind the shared Triton adapter (turntaker_models.triton_adapter).

Each stage's model.py binds `decoupled_model` to `stage_service(name, Stage)`: the stage loads
its weights from the settings, and the adapter hands it every request with its named inputs.
Rules: the load is logged with the weights' path and time, and a run on the tiny random
weights says so in capitals in the log, so that nobody mistakes its noise for a bug.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy.typing as npt

from turntaker_models.settings import ModelSettings
from turntaker_models.triton_adapter import ModelContext, Reply


class Stage(Protocol):
    @property
    def loaded(self) -> Any: ...

    def submit(self, tensors: dict[str, npt.NDArray[Any]], reply: Reply) -> None: ...

    def close(self) -> None: ...


def stage_service(
    name: str, make_stage: Callable[[ModelSettings], Stage]
) -> Callable[[ModelContext], Stage]:
    """The adapter's service factory for one stage."""

    def make(context: ModelContext) -> Stage:
        stage = make_stage(context.settings)
        loaded = stage.loaded
        tiny = " (RANDOM TINY weights)" if loaded.settings.omni_weights is None else ""
        context.log.log_info(f"{name}: {loaded.path}{tiny} loaded in {loaded.load_s:.2f} s")
        return stage

    return make

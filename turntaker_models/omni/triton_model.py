"""The Triton adapter the three Qwen3-Omni stages share; each stage's model.py binds it.

`pb_utils` only exists inside a Python-backend stub, so it is passed in, not imported here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from turntaker_models.omni.wire import TritonReply
from turntaker_models.settings import ModelSettings


class Stage(Protocol):
    @property
    def loaded(self) -> Any: ...

    def submit(self, tensors: dict[str, Any], reply: TritonReply) -> None: ...

    def close(self) -> None: ...


def stage_model(
    pb_utils: Any, name: str, make_stage: Callable[[ModelSettings], Stage], inputs: tuple[str, ...]
) -> type:
    """A `TritonPythonModel` class: execute() hands each request to the stage (its stream
    threads answer later) and returns at once, so one instance serves every stream."""

    class TritonPythonModel:
        def initialize(self, args: dict[str, Any]) -> None:
            self.stage = make_stage(ModelSettings.from_env())
            loaded = self.stage.loaded
            tiny = " (RANDOM TINY weights)" if loaded.settings.omni_weights is None else ""
            pb_utils.Logger.log_info(f"{name}: {loaded.path}{tiny} loaded in {loaded.load_s:.2f} s")

        def execute(self, requests: list[Any]) -> None:
            for request in requests:
                tensors = {}
                for tensor_name in inputs:
                    tensor = pb_utils.get_input_tensor_by_name(request, tensor_name)
                    if tensor is not None:
                        tensors[tensor_name] = tensor.as_numpy()
                self.stage.submit(tensors, TritonReply(pb_utils, request))

        def finalize(self) -> None:
            self.stage.close()

    return TritonPythonModel

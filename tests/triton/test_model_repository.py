"""The model repository's wiring, read statically (no server): every `config.pbtxt` parsed with
Triton's own schema, each ensemble's steps checked against the configs of the models they run,
and each decoupled model's `model.py` against the inputs its config declares.

What this catches before a server is started: a tensor an ensemble step maps that its model does
not declare (Triton then refuses to load the ensemble), an ensemble output that does not reach
the client, an end reason (contract.py `END_REASON`) that a stage drops on the way, and an
optional input a stage never reads (execute() hands a service only the inputs it names, so a
new pass-through input missing there is silently empty).
"""

from __future__ import annotations

import runpy
import sys
import types
from functools import cache
from typing import Any

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from tests.conftest import REPO_ROOT
from turntaker_models import triton_adapter

REPOSITORY = REPO_ROOT / "model_repository"
ENSEMBLES = ("cascade", "qwen3_omni")
# The contract's outputs (turntaker_models/contract.py), the same in both ensembles.
CONTRACT_OUTPUTS = {"TEXT_DELTA", "AUDIO_CHUNK", "TOOL_CALL", "END_REASON"}
# The stage that knows why an answer was cut short: the one that counts its tokens.
END_REASON_ORIGIN = {"cascade": "llm", "qwen3_omni": "thinker"}


@cache
def config(model: str) -> Any:
    path = REPOSITORY / model / "config.pbtxt"
    return text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())


def inputs(model: str) -> dict[str, bool]:
    """The model's input names, each with whether it is optional."""
    return {i.name: bool(i.optional) for i in config(model).input}


def outputs(model: str) -> set[str]:
    return {o.name for o in config(model).output}


@pytest.mark.parametrize("ensemble", ENSEMBLES)
def test_every_step_maps_only_what_its_model_declares_and_reads_only_what_came_before(
    ensemble: str,
) -> None:
    made = set(inputs(ensemble))  # tensors that exist so far: the ensemble's inputs, then steps'
    for step in config(ensemble).ensemble_scheduling.step:
        declared = inputs(step.model_name)
        assert set(step.input_map) <= set(declared), (step.model_name, step.input_map)
        required = {name for name, optional in declared.items() if not optional}
        assert required <= set(step.input_map), f"{step.model_name}: {required} not all mapped"
        assert set(step.input_map.values()) <= made, (step.model_name, step.input_map)
        assert set(step.output_map) <= outputs(step.model_name), (step.model_name, step.output_map)
        made |= set(step.output_map.values())


@pytest.mark.parametrize("ensemble", ENSEMBLES)
def test_the_contract_outputs_all_come_from_the_last_step(ensemble: str) -> None:
    # Triton refuses an ensemble whose outputs come from different decoupled steps.
    assert outputs(ensemble) == CONTRACT_OUTPUTS
    *_, last = config(ensemble).ensemble_scheduling.step
    assert set(last.output_map.values()) == CONTRACT_OUTPUTS
    assert set(last.output_map) <= outputs(last.model_name)


@pytest.mark.parametrize("ensemble", ENSEMBLES)
def test_the_end_reason_travels_from_the_stage_that_counts_tokens_to_the_client(
    ensemble: str,
) -> None:
    # Walk back from the ensemble's END_REASON: each step that sends one must have received one
    # from the step before it, up to the stage that knows why the answer was cut short.
    steps = config(ensemble).ensemble_scheduling.step
    producers = {tensor: step for step in steps for tensor in step.output_map.values()}
    tensor = "END_REASON"
    hops = []
    while tensor in producers:
        step = producers[tensor]
        hops.append(step.model_name)
        received = [v for k, v in step.input_map.items() if k.endswith("END_REASON")]
        if not received:
            break
        [tensor] = received
    assert hops[-1] == END_REASON_ORIGIN[ensemble], hops
    assert hops == [s.model_name for s in reversed(steps) if s.model_name != "asr"], hops


def _decoupled_models() -> list[str]:
    return sorted(
        path.parent.parent.name
        for path in REPOSITORY.glob("*/1/model.py")
        if "decoupled_model(" in path.read_text()
    )


def test_the_pipeline_stages_are_decoupled_models_of_the_shared_adapter() -> None:
    assert {"llm", "tts", "thinker", "talker", "code2wav"} <= set(_decoupled_models())


@pytest.mark.parametrize("model", _decoupled_models())
def test_a_decoupled_model_reads_every_optional_input_of_its_config(
    model: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The inputs model.py binds the adapter to (execute() reads only those), found by running
    # model.py with the adapter's factory recorded and a stand-in for Triton's stub module.
    bound: list[tuple[str, ...]] = []

    def recording(pb_utils: Any, name: str, make_service: Any, names: tuple[str, ...]) -> type:
        bound.append(tuple(names))
        return type("TritonPythonModel", (), {})

    monkeypatch.setattr(triton_adapter, "decoupled_model", recording)
    stub = types.ModuleType("triton_python_backend_utils")
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", stub)
    runpy.run_path(str(REPOSITORY / model / "1" / "model.py"))
    [read] = bound
    declared = inputs(model)
    assert set(read) <= set(declared), f"{model} reads inputs its config lacks"
    optional = {name for name, is_optional in declared.items() if is_optional}
    assert optional <= set(read), f"{model} never reads {optional - set(read)}"

"""The one Triton adapter of the decoupled models: `tts`, `null`, `llm` and Qwen3-Omni's
`thinker`, `talker` and `code2wav`. Each model.py binds it to its service in one statement.

Rules:
- execute() only hands over: for each request it reads the model's named inputs into numpy
  arrays (an absent optional input is left out), wraps the request's response sender in a
  `TritonReply`, passes both to the service's `submit` and returns at once. The service's own
  threads answer later, so one model instance serves every stream.
- A request ends exactly once: `close()` (the final flag alone), `send(..., final=True)` (the
  last data response carries it) or `fail(message)`: one response carrying the error and the
  final flag together, because an ensemble or BLS caller stops at the error and would never
  read a separate final flag. Whatever comes after the end is dropped, never sent.
- A request the service refuses by raising (a sender already gone, a bug) is failed with the
  reason, if it still can be, and logged: a request is never left without an answer.
- `pb_utils` (triton_python_backend_utils) only exists inside a stub process, so it is passed
  in, never imported here: everything else is importable and tested without a server.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from turntaker_models.settings import ModelSettings


class Reply(Protocol):
    """Where a service answers one request; the request is done after `close`, `fail` or a
    `send` with `final`."""

    def send(self, outputs: Mapping[str, npt.NDArray[Any]], final: bool = False) -> None: ...

    def close(self) -> None: ...

    def fail(self, message: str) -> None: ...

    def is_cancelled(self) -> bool: ...


class Service(Protocol):
    """A model's logic behind the adapter: takes requests, answers them on its own threads."""

    def submit(self, tensors: dict[str, npt.NDArray[Any]], reply: Reply) -> None: ...

    def close(self) -> None: ...


class Logger(Protocol):
    def log_info(self, message: str) -> None: ...

    def log_warn(self, message: str) -> None: ...

    def log_verbose(self, message: str) -> None: ...


@dataclass(frozen=True)
class ModelContext:
    """What a service is built from: the model's name, its settings, the string parameters of
    its config.pbtxt, and Triton's log."""

    name: str
    settings: ModelSettings
    parameters: Mapping[str, str]
    log: Logger

    def integer(self, key: str, default: int) -> int:
        """A whole-number parameter; `default` when absent or empty."""
        raw = self.parameters.get(key, "").strip()
        return int(raw) if raw else default


def config_parameters(model_config: str) -> dict[str, str]:
    """The string parameters of a model config (`args["model_config"]`, JSON)."""
    config = json.loads(model_config or "{}")
    return {
        key: str(value.get("string_value", ""))
        for key, value in config.get("parameters", {}).items()
    }


def first_bytes(value: npt.NDArray[Any] | None) -> bytes:
    """The first element of a STRING tensor as bytes; b"" when absent or empty."""
    if value is None or value.size == 0:
        return b""
    item = value.reshape(-1)[0]
    return item if isinstance(item, bytes) else str(item).encode()


def strings(value: npt.NDArray[Any] | None) -> list[str]:
    """Every element of a STRING tensor, decoded; [] when absent."""
    if value is None:
        return []
    return [v.decode() if isinstance(v, bytes) else str(v) for v in value.reshape(-1)]


def text_tensor(value: str | bytes) -> npt.NDArray[np.object_]:
    raw = value.encode() if isinstance(value, str) else value
    return np.array([raw], dtype=np.object_)


NO_AUDIO: npt.NDArray[np.float32] = np.zeros(0, np.float32)


def pipeline_outputs(
    text: str | bytes,
    audio: npt.NDArray[np.float32] = NO_AUDIO,
    tool_call: str | bytes | None = None,
    end_reason: str | bytes | None = None,
) -> dict[str, npt.NDArray[Any]]:
    """One response of the pipeline contract: a text delta and an audio chunk, both always
    present (either may be empty), as every stage that ends a pipeline sends them; and
    `TOOL_CALL` (JSON contract.ToolCallDelta, b"" for none) unless `tool_call` is None, and
    `END_REASON` (contract.EndReason, b"" for none) unless `end_reason` is None, for a stage
    whose config declares them (an ensemble pairs outputs by response: a stage that has an
    output sends it in every response)."""
    outputs = {
        "TEXT_DELTA": text_tensor(text),
        "AUDIO_CHUNK": np.ascontiguousarray(audio, dtype=np.float32),
    }
    if tool_call is not None:
        outputs["TOOL_CALL"] = text_tensor(tool_call)
    if end_reason is not None:
        outputs["END_REASON"] = text_tensor(end_reason)
    return outputs


class PipelineSink:
    """One request's `Reply`, speaking the pipeline contract's outputs (`null`, `tts`);
    `tool_calls` / `end_reasons`: the model has the TOOL_CALL / END_REASON output, in every
    response (b"" for none)."""

    def __init__(self, reply: Reply, tool_calls: bool = False, end_reasons: bool = False) -> None:
        self.reply = reply
        self.tool_calls = tool_calls
        self.end_reasons = end_reasons

    def send(
        self,
        text: bytes,
        audio: npt.NDArray[np.float32] = NO_AUDIO,
        final: bool = False,
        tool_call: bytes = b"",
        end_reason: bytes = b"",
    ) -> None:
        if tool_call and not self.tool_calls:
            raise ValueError("this model has no TOOL_CALL output")
        if end_reason and not self.end_reasons:
            raise ValueError("this model has no END_REASON output")
        call = tool_call if self.tool_calls else None
        reason = end_reason if self.end_reasons else None
        self.reply.send(pipeline_outputs(text, audio, call, reason), final=final)

    def error(self, message: str) -> None:
        self.reply.fail(message)

    def final(self) -> None:
        self.reply.close()

    def cancelled(self) -> bool:
        return self.reply.is_cancelled()


class TritonReply:
    """`Reply` over a decoupled Python-backend request; `pb` is triton_python_backend_utils."""

    def __init__(self, pb: Any, request: Any) -> None:
        self._pb = pb
        self._sender = request.get_response_sender()
        self._done = False

    def send(self, outputs: Mapping[str, npt.NDArray[Any]], final: bool = False) -> None:
        if self._done:
            return
        tensors = [self._pb.Tensor(name, value) for name, value in outputs.items()]
        response = self._pb.InferenceResponse(output_tensors=tensors)
        if final:
            self._done = True
            self._sender.send(response, flags=self._pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        else:
            self._sender.send(response)

    def close(self) -> None:
        if not self._done:
            self._done = True
            self._sender.send(flags=self._pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def fail(self, message: str) -> None:
        if not self._done:
            self._done = True
            response = self._pb.InferenceResponse(error=self._pb.TritonError(message))
            self._sender.send(response, flags=self._pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def is_cancelled(self) -> bool:
        return bool(self._sender.is_cancelled())


def decoupled_model(
    pb_utils: Any,
    name: str,
    make_service: Callable[[ModelContext], Service],
    inputs: tuple[str, ...],
) -> type:
    """A `TritonPythonModel` class for a decoupled model whose logic is `make_service`'s."""

    class TritonPythonModel:
        def initialize(self, args: dict[str, Any]) -> None:
            context = ModelContext(
                name=name,
                settings=ModelSettings.from_env(),
                parameters=config_parameters(args.get("model_config", "{}")),
                log=pb_utils.Logger,
            )
            self.service = make_service(context)

        def execute(self, requests: list[Any]) -> None:
            for request in requests:
                reply = TritonReply(pb_utils, request)
                try:
                    tensors: dict[str, npt.NDArray[Any]] = {}
                    for tensor_name in inputs:
                        tensor = pb_utils.get_input_tensor_by_name(request, tensor_name)
                        if tensor is not None:
                            tensors[tensor_name] = tensor.as_numpy()
                    self.service.submit(tensors, reply)
                except Exception as error:
                    pb_utils.Logger.log_warn(f"{name}: request not taken: {error}")
                    try:
                        reply.fail(f"{name}: request not taken: {type(error).__name__}: {error}")
                    except Exception:
                        pass  # the stream is gone: nobody is left to tell
            return None

        def finalize(self) -> None:
            self.service.close()

    TritonPythonModel.__qualname__ = f"TritonPythonModel[{name}]"
    return TritonPythonModel

"""The shared decoupled adapter (turntaker_models/triton_adapter.py) on a fake pb_utils: what
execute() hands a service, that every request ends exactly once, and the Sinks of `tts` and
`null` over a Reply (both outputs on every data response)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from turntaker_models import null
from turntaker_models.cascade import tts
from turntaker_models.triton_adapter import (
    ModelContext,
    Reply,
    TritonReply,
    config_parameters,
    decoupled_model,
    first_bytes,
    strings,
)

FINAL = 1


class FakeSender:
    def __init__(self, cancelled: bool = False, broken: bool = False) -> None:
        self.sent: list[tuple[Any, int]] = []
        self.cancelled = cancelled
        self.broken = broken

    def send(self, response: Any = None, flags: int = 0) -> None:
        if self.broken:
            raise RuntimeError("stream gone")
        self.sent.append((response, flags))

    def is_cancelled(self) -> bool:
        return self.cancelled


class FakeTensor:
    def __init__(self, name: str, value: Any) -> None:
        self.name = name
        self.value = value

    def as_numpy(self) -> Any:
        return self.value


class FakeResponse:
    def __init__(self, output_tensors: list[FakeTensor] | None = None, error: Any = None) -> None:
        self.outputs = {t.name: t.value for t in output_tensors or []}
        self.error = error


class FakeRequest:
    def __init__(self, inputs: dict[str, Any], sender: FakeSender | None = None) -> None:
        self.inputs = inputs
        self.sender = sender or FakeSender()

    def get_response_sender(self) -> FakeSender:
        return self.sender


class FakeLogger:
    lines: list[str] = []

    @classmethod
    def log_info(cls, message: str) -> None:
        cls.lines.append(message)

    log_warn = log_info
    log_verbose = log_info


class FakePb:
    TRITONSERVER_RESPONSE_COMPLETE_FINAL = FINAL
    Tensor = FakeTensor
    InferenceResponse = FakeResponse
    Logger = FakeLogger

    @staticmethod
    def TritonError(message: str) -> str:  # pb_utils' own name
        return message

    @staticmethod
    def get_input_tensor_by_name(request: FakeRequest, name: str) -> FakeTensor | None:
        value = request.inputs.get(name)
        return None if value is None else FakeTensor(name, value)


class RecordingService:
    def __init__(self, context: ModelContext, refuse: bool = False) -> None:
        self.context = context
        self.taken: list[dict[str, npt.NDArray[Any]]] = []
        self.refuse = refuse
        self.closed = False

    def submit(self, tensors: dict[str, npt.NDArray[Any]], reply: Reply) -> None:
        if self.refuse:
            raise RuntimeError("no thanks")
        self.taken.append(tensors)
        reply.send({"OUT": np.array([1], np.int32)}, final=True)

    def close(self) -> None:
        self.closed = True


def _model(refuse: bool = False) -> Any:
    made: list[RecordingService] = []

    def make(context: ModelContext) -> RecordingService:
        made.append(RecordingService(context, refuse))
        return made[-1]

    cls = decoupled_model(FakePb, "demo", make, ("A", "B"))
    model = cls()
    config = {"parameters": {"workers": {"string_value": "3"}, "empty": {"string_value": ""}}}
    model.initialize({"model_config": json.dumps(config)})
    return model, made[0]


def test_execute_hands_the_named_inputs_over_and_returns_at_once() -> None:
    model, service = _model()
    request = FakeRequest({"A": np.array([b"x"], object), "C": np.array([1])})
    assert model.execute([request]) is None
    assert list(service.taken[0]) == ["A"], "absent inputs left out, unnamed ones ignored"
    assert service.context.integer("workers", 2) == 3
    assert service.context.integer("empty", 2) == 2
    assert service.context.integer("missing", 7) == 7
    model.finalize()
    assert service.closed


def test_a_refused_request_is_failed_once_with_the_reason() -> None:
    model, _ = _model(refuse=True)
    request = FakeRequest({"A": np.array([b"x"], object)})
    model.execute([request])
    ((response, flags),) = request.sender.sent
    assert flags == FINAL and "demo: request not taken" in response.error
    # A sender that is gone too: execute() still returns, nothing raises.
    model.execute([FakeRequest({}, FakeSender(broken=True))])


def test_a_request_ends_exactly_once() -> None:
    """Rule: after close, fail or a final send, nothing more is sent."""
    for end in ("close", "fail", "final"):
        request = FakeRequest({})
        reply = TritonReply(FakePb, request)
        if end == "close":
            reply.close()
        elif end == "fail":
            reply.fail("bad")
        else:
            reply.send({"OUT": np.zeros(1)}, final=True)
        reply.close()
        reply.fail("again")
        reply.send({"OUT": np.zeros(1)})
        assert [flags for _, flags in request.sender.sent] == [FINAL], end
    assert TritonReply(FakePb, FakeRequest({}, FakeSender(cancelled=True))).is_cancelled()


class RecordingReply:
    def __init__(self) -> None:
        self.sent: list[tuple[dict[str, Any], bool]] = []
        self.ended: list[str] = []

    def send(self, outputs: Mapping[str, npt.NDArray[Any]], final: bool = False) -> None:
        self.sent.append((dict(outputs), final))

    def close(self) -> None:
        self.ended.append("close")

    def fail(self, message: str) -> None:
        self.ended.append(f"fail: {message}")

    def is_cancelled(self) -> bool:
        return False


@pytest.mark.parametrize("which", ["tts", "null"])
def test_every_data_response_carries_both_outputs(which: str) -> None:
    """An ensemble holds back a response with one output missing: both always go."""
    reply = RecordingReply()
    audio = np.ones(4, np.float32)
    if which == "tts":
        sink = tts.ReplySink(reply)
        sink.text(b"hi", final=True)
        sink.chunk(audio, b"word")
        sink.chunk(audio)
    else:
        null.ReplySink(reply).chunk(b"tok0 ", audio)
    for outputs, _ in reply.sent:
        assert set(outputs) == {"TEXT_DELTA", "AUDIO_CHUNK"}
        assert outputs["AUDIO_CHUNK"].dtype == np.float32
    if which == "tts":
        texts = [first_bytes(o["TEXT_DELTA"]) for o, _ in reply.sent]
        assert texts == [b"hi", b"word", b""]
        assert [o["AUDIO_CHUNK"].size for o, _ in reply.sent] == [0, 4, 4]
        assert [final for _, final in reply.sent] == [True, False, False]


def test_tensor_readers() -> None:
    assert first_bytes(None) == b"" and first_bytes(np.array([], object)) == b""
    assert first_bytes(np.array([b"a", b"b"], object)) == b"a"
    assert strings(None) == [] and strings(np.array([[b"a"], [b"b"]], object)) == ["a", "b"]
    assert config_parameters("") == {}

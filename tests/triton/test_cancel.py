"""The `cancel` model: the control path that reaches every step of an ensemble."""

from __future__ import annotations

import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from orchestrator.triton import TritonServer
from orchestrator.triton.pipeline_client import cancel_on_board


def test_cancel_model_writes_every_id_on_the_servers_board(triton_server: TritonServer) -> None:
    client = grpcclient.InferenceServerClient(triton_server.grpc_url)
    before = time.monotonic_ns()
    at = cancel_on_board(client, ["cancel-test-a", "cancel-test-b"])
    with triton_server.board() as board:
        assert board.cancelled("cancel-test-a") and board.cancelled("cancel-test-b")
        assert not board.cancelled("cancel-test-c")
        written = board.cancelled_at("cancel-test-b")
    assert written is not None and before <= written <= at


def test_cancel_without_an_id_is_a_clear_error(triton_server: TritonServer) -> None:
    client = grpcclient.InferenceServerClient(triton_server.grpc_url)
    tensor = grpcclient.InferInput("REQUEST_ID", [1], "BYTES")
    tensor.set_data_from_numpy(np.array([b""], dtype=np.object_))
    with pytest.raises(InferenceServerException, match="non-empty id"):
        client.infer("cancel", [tensor])

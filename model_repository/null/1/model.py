"""Triton Python-backend model `null`: a thin decoupled adapter over turntaker_models.null."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

from turntaker_models.cancel_board import CancelBoard
from turntaker_models.null import Audio, NullStreams, Pacing, max_streams_from_config
from turntaker_models.settings import ModelSettings

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def _first_bytes(request: Any, name: str) -> bytes:
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return b""
    values = tensor.as_numpy().reshape(-1)
    if values.size == 0:
        return b""
    value = values[0]
    return value if isinstance(value, bytes) else str(value).encode()


class _Sink:
    """One request's response sender, seen through the Sink protocol of turntaker_models.null."""

    def __init__(self, sender: Any) -> None:
        self.sender = sender

    def chunk(self, text: bytes, audio: Audio) -> None:
        outputs = [
            pb_utils.Tensor("TEXT_DELTA", np.array([text], dtype=np.object_)),
            pb_utils.Tensor("AUDIO_CHUNK", audio),
        ]
        self.sender.send(pb_utils.InferenceResponse(output_tensors=outputs))

    def error(self, message: str) -> None:
        # One response, error and final flag together, as every other model does.
        error = pb_utils.TritonError(message)
        self.sender.send(pb_utils.InferenceResponse(error=error), flags=FINAL)

    def final(self) -> None:
        self.sender.send(flags=FINAL)

    def cancelled(self) -> bool:
        return bool(self.sender.is_cancelled())


class TritonPythonModel:
    def initialize(self, args: dict[str, Any]) -> None:
        config = json.loads(args["model_config"])
        parameters = {
            key: str(value.get("string_value", ""))
            for key, value in config.get("parameters", {}).items()
        }
        settings = ModelSettings.from_env()
        pacing = Pacing.from_config(parameters, speed=settings.null_speed)
        max_streams = max_streams_from_config(parameters)
        self.board = CancelBoard.open(settings.board_path)
        self.streams = NullStreams(self.board, pacing, max_streams=max_streams)
        self.streams.start()
        pb_utils.Logger.log_info(
            f"null: first chunk after {pacing.first_delay_s * 1e3:.3f} ms, then "
            f"{pacing.chunk_samples} samples every {pacing.interval_s * 1e3:.3f} ms "
            f"(speed {pacing.speed:g}), at most {max_streams} streams"
        )

    def execute(self, requests: list[Any]) -> None:
        for request in requests:
            sender = request.get_response_sender()
            try:
                self.streams.submit(
                    # Lenient decoding: an undecodable id still keys the board consistently.
                    _first_bytes(request, "REQUEST_ID").decode(errors="replace"),
                    _first_bytes(request, "PARAMETERS"),
                    _Sink(sender),
                )
            except Exception as error:
                # The sender failed (a stream gone): end the request if it still can be.
                pb_utils.Logger.log_warn(f"null: request not taken: {error}")
                try:
                    sender.send(flags=FINAL)
                except Exception:
                    pass
        return None

    def finalize(self) -> None:
        self.streams.close()
        self.board.close()

"""Triton Python-backend model `tts`: a thin decoupled adapter over turntaker_models.tts."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

from turntaker_models.cancel_board import CancelBoard
from turntaker_models.settings import ModelSettings
from turntaker_models.tts import Audio, Speaker, SpeechJob

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
_NO_AUDIO = np.zeros(0, np.float32)


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
    """One request's response sender, seen through the Sink protocol of turntaker_models.tts.

    Every data response carries both outputs (an empty TEXT_DELTA or a zero-size AUDIO_CHUNK):
    an ensemble only forms a response when all its requested outputs have a tensor of the same
    iteration, so a response with one output missing would be held back and misalign the rest.
    """

    def __init__(self, sender: Any) -> None:
        self.sender = sender

    def _send(self, text: bytes, audio: Audio, flags: int = 0) -> None:
        outputs = [
            pb_utils.Tensor("TEXT_DELTA", np.array([text], dtype=np.object_)),
            pb_utils.Tensor("AUDIO_CHUNK", np.ascontiguousarray(audio, dtype=np.float32)),
        ]
        self.sender.send(pb_utils.InferenceResponse(output_tensors=outputs), flags=flags)

    def text(self, text: bytes, final: bool) -> None:
        self._send(text, _NO_AUDIO, FINAL if final else 0)

    def chunk(self, audio: Audio) -> None:
        self._send(b"", audio)

    def error(self, message: str) -> None:
        # One response, error and final flag together (a separate final flag after an error
        # is never read by an ensemble or a BLS caller).
        error = pb_utils.TritonError(message)
        self.sender.send(pb_utils.InferenceResponse(error=error), flags=FINAL)

    def final(self) -> None:
        self.sender.send(flags=FINAL)

    def cancelled(self) -> bool:
        return bool(self.sender.is_cancelled())


class TritonPythonModel:
    def initialize(self, args: dict[str, Any]) -> None:
        config = json.loads(args["model_config"])
        workers = config.get("parameters", {}).get("WORKERS", {}).get("string_value", "2")
        self.board = CancelBoard.open(ModelSettings.from_env().board_path)
        self.speaker = Speaker(self.board, workers=int(workers))

    def execute(self, requests: list[Any]) -> None:
        for request in requests:
            sender = request.get_response_sender()
            # Decoding the id is left lenient here; the worker checks it and answers in order.
            job = SpeechJob(
                request_id=_first_bytes(request, "REQUEST_ID").decode(errors="replace"),
                sentence=_first_bytes(request, "SENTENCE"),
                parameters=_first_bytes(request, "PARAMETERS"),
                text=_first_bytes(request, "TEXT_DELTA"),
            )
            try:
                # Passes the text on now (in arrival order), and queues the sentence, if any.
                self.speaker.submit(job, _Sink(sender))
            except Exception as error:
                # The sender failed (a stream gone): end the request if it still can be.
                pb_utils.Logger.log_warn(f"tts: request not taken: {error}")
                try:
                    sender.send(flags=FINAL)
                except Exception:
                    pass
        return None

    def finalize(self) -> None:
        self.speaker.close()
        self.board.close()

"""The tensors between the Qwen3-Omni stages, and the Triton reply they travel on.

Inside an ensemble each response of a decoupled step becomes one request to the next step, so
every message carries the stream's REQUEST_ID and a per-stream SEQ (the receiver processes them
in SEQ order) and a KIND:

Text reaches the client through the whole chain (Triton refuses an ensemble whose outputs come
from different decoupled steps): the talker and code2wav pass a non-empty text delta on at once,
from execute(), ahead of their queued work; text messages carry no SEQ (-1).

thinker -> talker (every response carries all of these):
  T_TEXT        STRING [1]      the next piece of the assistant's text (may be "")
  T_REQUEST_ID  STRING [1]      the stream
  T_PARAMETERS  STRING [1]      the request's PARAMETERS JSON (audio flag, voice, sampling)
  T_KIND        INT32  [1]      START: conditioning + first token; TOKEN: one more text token;
                                END: the thinker is done (its final token -> tts_eos);
                                ABORT: cancelled or failed upstream, drop the stream
  T_SEQ         INT32  [1]      0, 1, 2, ... per stream
  T_EMBEDS      FP32   [-1, H]  START: `TalkerStart.rows` (see thinker.py); TOKEN: the token's
                                embedding [1, H]; END/ABORT: [0, H]
  T_MM          BOOL   [-1]     START: rows that take `hidden_projection`; else all False
talker -> code2wav:
  C_TEXT        STRING [1]      TEXT: the text delta to pass on; else ""
  C_REQUEST_ID  STRING [1]
  C_KIND        INT32  [1]      FRAME: one codec frame; END: flush and finish; ABORT: drop;
                                TEXT: text only, answered at once
  C_SEQ         INT32  [1]      0, 1, 2, ... per stream
  C_CODES       INT64  [-1]     FRAME: the frame's G codes (codebook 0 first); else [0]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

START = 0
TOKEN = 1
END = 2
ABORT = 3
FRAME = 1
TEXT = 4


class Reply(Protocol):
    """Where a stage answers one request; the request is done after `close` or `fail`."""

    def send(self, outputs: Mapping[str, npt.NDArray[Any]]) -> None: ...

    def close(self) -> None: ...

    def fail(self, message: str) -> None: ...

    def is_cancelled(self) -> bool: ...


def text_tensor(value: str | bytes) -> npt.NDArray[np.object_]:
    raw = value.encode() if isinstance(value, str) else value
    return np.array([raw], dtype=np.object_)


def int_tensor(value: int) -> npt.NDArray[np.int32]:
    return np.array([value], dtype=np.int32)


def read_text(value: npt.NDArray[Any] | None) -> bytes:
    if value is None or value.size == 0:
        return b""
    item = value.reshape(-1)[0]
    return item if isinstance(item, bytes) else str(item).encode()


def read_int(value: npt.NDArray[Any] | None, default: int = 0) -> int:
    if value is None or value.size == 0:
        return default
    return int(value.reshape(-1)[0])


class TritonReply:
    """`Reply` over a decoupled Python-backend request; `pb` is triton_python_backend_utils."""

    def __init__(self, pb: Any, request: Any) -> None:
        self._pb = pb
        self._sender = request.get_response_sender()
        self._done = False

    def send(self, outputs: Mapping[str, npt.NDArray[Any]]) -> None:
        tensors = [self._pb.Tensor(name, value) for name, value in outputs.items()]
        self._sender.send(self._pb.InferenceResponse(output_tensors=tensors))

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

"""The tensors between the Qwen3-Omni stages, and the Triton reply they travel on.

Inside an ensemble each response of a decoupled step becomes one request to the next step, so
every message carries the stream's REQUEST_ID and a per-stream SEQ (the receiver processes them
in SEQ order) and a KIND:

Text reaches the client through the whole chain (Triton refuses an ensemble whose outputs come
from different decoupled steps): the talker and code2wav pass a non-empty text delta on at once,
from execute(), ahead of their queued work; text messages carry no SEQ (-1).

A function call's deltas travel the same way, as TOOL_CALL, never as a token to speak; and
so does an end reason (the contract's END_REASON: the thinker's on its END when max_tokens cut
the answer, the talker's on a TEXT message of its own when its slot ran out of room).

thinker -> talker (every response carries all of these):
  T_TEXT        STRING [1]      the next piece of the assistant's spoken text (may be "")
  T_TOOL_CALL   STRING [1]      TEXT: the next delta of the function call (JSON
                                contract.ToolCallDelta); else ""
  T_END_REASON  STRING [1]      END: "max_output_tokens" when max_tokens (or the context left)
                                ended the answer, not the model; else "" (contract.EndReason)
  T_REQUEST_ID  STRING [1]      the stream
  T_PARAMETERS  STRING [1]      the request's PARAMETERS JSON (audio flag, voice, sampling)
  T_KIND        INT32  [1]      START: conditioning + the first token spoken; TOKEN: one more
                                spoken text token; TEXT: text or a call delta, nothing to
                                speak (the talker only closes it); END: the thinker is done
                                (its final token -> tts_eos); ABORT: cancelled or failed
                                upstream, drop the stream
  T_SEQ         INT32  [1]      0, 1, 2, ... per stream
  T_EMBEDS      FP32   [-1, H]  START: `TalkerStart.rows` (see thinker.py); TOKEN: the token's
                                embedding [1, H]; TEXT/END/ABORT: [0, H]
  T_MM          BOOL   [-1]     START: rows that take `hidden_projection`; else all False
  T_IDS         INT64  [-1]     START: the token ids of the user rows (`TalkerStart.ids`), for the
                                talker's mRoPE positions; else [0]
  T_IMAGE_GRIDS INT64  [-1, 3]  START: (t, h, w) of each image in the user rows, in order; else
                                [0, 3]
  T_AUDIO_LENGTHS INT64 [-1]    START: mel frames of each audio in the user rows, in order; else [0]
talker -> code2wav:
  C_TEXT        STRING [1]      TEXT: the text delta to pass on; else ""
  C_TOOL_CALL   STRING [1]      TEXT: the call delta to pass on (TOOL_CALL); else ""
  C_END_REASON  STRING [1]      TEXT: the end reason to pass on (END_REASON): the thinker's,
                                or the talker's own ("max_output_tokens" when its KV slot
                                ran out of room and it ended the audio there); else ""
  C_REQUEST_ID  STRING [1]
  C_KIND        INT32  [1]      FRAME: one codec frame; END: flush and finish; ABORT: drop;
                                TEXT: text, a call delta and/or an end reason only,
                                answered at once
  C_SEQ         INT32  [1]      0, 1, 2, ... per stream
  C_CODES       INT64  [-1]     FRAME: the frame's G codes (codebook 0 first); else [0]
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from turntaker_models.omni.thinker import TalkerStart

# The Reply a stage answers on, and the Triton one, are the shared adapter's (one for every
# decoupled model); re-exported so that the stages keep writing `wire.Reply`.
from turntaker_models.triton_adapter import Reply as Reply
from turntaker_models.triton_adapter import TritonReply as TritonReply
from turntaker_models.triton_adapter import first_bytes
from turntaker_models.triton_adapter import text_tensor as text_tensor

START = 0
TOKEN = 1
END = 2
ABORT = 3
FRAME = 1
# Both hops: text, a call delta and/or an end reason, nothing to speak or decode.
TEXT = 4

# The same reading as every decoupled model's (an absent or empty tensor reads as b"").
read_text = first_bytes


def int_tensor(value: int) -> npt.NDArray[np.int32]:
    return np.array([value], dtype=np.int32)


def read_int(value: npt.NDArray[Any] | None, default: int = 0) -> int:
    if value is None or value.size == 0:
        return default
    return int(value.reshape(-1)[0])


def talker_start_tensors(start: TalkerStart | None) -> dict[str, npt.NDArray[Any]]:
    """T_IDS, T_IMAGE_GRIDS and T_AUDIO_LENGTHS of a message (empty unless START)."""
    if start is None:
        return {
            "T_IDS": np.zeros(0, np.int64),
            "T_IMAGE_GRIDS": np.zeros((0, 3), np.int64),
            "T_AUDIO_LENGTHS": np.zeros(0, np.int64),
        }
    return {
        "T_IDS": np.ascontiguousarray(start.ids.numpy(), np.int64),
        "T_IMAGE_GRIDS": np.ascontiguousarray(start.image_grids.numpy(), np.int64).reshape(-1, 3),
        "T_AUDIO_LENGTHS": np.ascontiguousarray(start.audio_lengths.numpy(), np.int64),
    }


def read_talker_start(tensors: dict[str, Any]) -> TalkerStart:
    """The thinker's START conditioning as the talker receives it."""

    def longs(name: str, shape: tuple[int, ...]) -> torch.Tensor:
        value = tensors.get(name)
        if value is None:
            return torch.zeros(shape, dtype=torch.long)
        return torch.from_numpy(np.array(value, np.int64)).reshape(-1, *shape[1:])

    return TalkerStart(
        rows=torch.from_numpy(np.asarray(tensors["T_EMBEDS"], np.float32)),
        mm=torch.from_numpy(np.asarray(tensors["T_MM"], bool)),
        ids=longs("T_IDS", (0,)),
        image_grids=longs("T_IMAGE_GRIDS", (0, 3)),
        audio_lengths=longs("T_AUDIO_LENGTHS", (0,)),
    )

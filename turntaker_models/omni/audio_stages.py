"""The talker and code2wav Triton stages: per-REQUEST_ID state across many requests.

The thinker's every response is one talker request, and the talker's every response one
code2wav request (see wire.py). Each stage keeps a stream's session between its requests, keyed
by REQUEST_ID, in a `StreamWorkers` thread that handles them in SEQ order, and frees it at END,
ABORT, a cancel, an error or the idle timeout.

Text and function calls pass through both stages at once, from execute(), ahead of the queued
codec work: a thinker message with T_TEXT or T_TOOL_CALL becomes a talker TEXT response with
C_TEXT / C_TOOL_CALL, answered by code2wav with TEXT_DELTA / TOOL_CALL (and an empty chunk).
Neither stage ever speaks a call: the thinker sends its deltas on TEXT messages, which carry
no token for the talker (it only closes them in their SEQ turn).

End reasons (contract END_REASON) pass the same way: the thinker's T_END_REASON (on its END)
goes on at once as C_END_REASON of a TEXT response, answered by code2wav as END_REASON; and
a talker stream whose slot ran out of room (talker_engine.py rule 3) sends its own,
"max_output_tokens", on a TEXT response just before its END: the audio stopped short of the
codec's EOS, and the client is told so.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch

from turntaker_models.contract import decode_parameters
from turntaker_models.omni import wire
from turntaker_models.omni.code2wav import (
    BatchedDecoder,
    Code2WavStream,
    Decoder,
    WindowPlan,
    trim_samples,
    warm_up,
)
from turntaker_models.omni.sampling import Cancelled
from turntaker_models.omni.stages import (
    CODEC_TOKENS_PER_TEXT_TOKEN,
    CODEC_TOKENS_SLACK,
    MAX_CODEC_TOKENS,
    load,
)
from turntaker_models.omni.streams import Message, StreamHandler, StreamLimits, StreamWorkers
from turntaker_models.omni.talker import TalkerSession
from turntaker_models.omni.talker_engine import TalkerEngine
from turntaker_models.omni.thinker import TALKER_FIXED_ROWS, TalkerStart
from turntaker_models.settings import ModelSettings
from turntaker_models.triton_adapter import pipeline_outputs

log = logging.getLogger("turntaker.omni")


def _message(tensors: dict[str, Any], prefix: str, reply: wire.Reply) -> Message:
    request_id = wire.read_text(tensors.get(f"{prefix}REQUEST_ID")).decode(errors="replace")
    return Message(
        request_id=request_id,
        seq=wire.read_int(tensors.get(f"{prefix}SEQ")),
        kind=wire.read_int(tensors.get(f"{prefix}KIND"), wire.ABORT),
        tensors=tensors,
        reply=reply,
    )


def _codec_message(
    request_id: str,
    kind: int,
    seq: int,
    codes: list[int] | None = None,
    text: bytes = b"",
    tool_call: bytes = b"",
    end_reason: bytes = b"",
) -> dict[str, np.ndarray[Any, Any]]:
    # Every response carries every output: the ensemble pairs code2wav's inputs by response.
    return {
        "C_TEXT": wire.text_tensor(text),
        "C_TOOL_CALL": wire.text_tensor(tool_call),
        "C_END_REASON": wire.text_tensor(end_reason),
        "C_REQUEST_ID": wire.text_tensor(request_id),
        "C_KIND": wire.int_tensor(kind),
        "C_SEQ": wire.int_tensor(seq),
        "C_CODES": np.array(codes or [], np.int64),
    }


class TalkerStage:
    def __init__(self, settings: ModelSettings, limits: StreamLimits | None = None) -> None:
        self.loaded = load("talker", settings)
        limits = limits or StreamLimits(settings.omni_max_streams)
        # Batched: every stream's forwards run in the engine (talker_engine.py).
        self.engine: TalkerEngine | None = None
        if settings.omni_batching:
            self.engine = TalkerEngine(
                self.loaded.model, limits.max_streams, settings.omni_max_positions
            )
        self.workers = StreamWorkers("talker", self._handler, limits)
        self.warm_up()

    def warm_up(self) -> None:
        """A prefill and two frames from neutral conditioning (first calls set things up)."""
        config = self.loaded.config
        hidden = int(config.talker_config.thinker_hidden_size)
        start = TalkerStart(
            rows=torch.zeros(TALKER_FIXED_ROWS + 1, hidden),
            mm=torch.zeros(TALKER_FIXED_ROWS + 1, dtype=torch.bool),
        )
        session = TalkerSession(
            self.loaded.model, config, True, 0, 3, lambda: False, engine=self.engine
        )
        try:
            if session.start(start, "default") is not None:
                session.step(None)
        finally:
            session.close()

    def submit(self, tensors: dict[str, Any], reply: wire.Reply) -> None:
        message = _message(tensors, "T_", reply)
        text = wire.read_text(tensors.get("T_TEXT"))
        call = wire.read_text(tensors.get("T_TOOL_CALL"))
        reason = wire.read_text(tensors.get("T_END_REASON"))
        if text or call or reason:
            # Text (a call, an end reason) must not wait behind the codec frames queued.
            reply.send(
                _codec_message(
                    message.request_id, wire.TEXT, -1, text=text, tool_call=call, end_reason=reason
                )
            )
        self.workers.submit(message)

    def _handler(self, request_id: str) -> StreamHandler:
        return _TalkerStream(self, request_id)

    def close(self) -> None:
        self.workers.stop()
        if self.engine is not None:
            self.engine.shutdown()
        self.loaded.board.close()


class _TalkerStream:
    def __init__(self, stage: TalkerStage, request_id: str) -> None:
        self.stage = stage
        self.request_id = request_id
        self.session: TalkerSession | None = None
        self.reply: wire.Reply | None = None
        self.seq = 0  # downstream SEQ
        self.text_tokens = 0
        self.silent = False  # finished, cancelled or text-only: later messages just close

    def _cancelled(self) -> bool:
        reply = self.reply
        board = self.stage.loaded.board
        return (reply is not None and reply.is_cancelled()) or board.cancelled(self.request_id)

    def _send(self, reply: wire.Reply, kind: int, codes: list[int] | None = None) -> None:
        reply.send(_codec_message(self.request_id, kind, self.seq, codes))
        self.seq += 1

    def _free(self) -> None:
        if self.session is not None:
            self.session.close()
            self.session = None

    def abandon(self, reason: str) -> None:
        self._free()

    def handle(self, message: Message) -> bool:
        reply = message.reply
        self.reply = reply
        end = message.kind in (wire.END, wire.ABORT)
        try:
            self._handle(message)
            reply.close()
        except Cancelled:
            self.stage.loaded.board.record_stop(self.request_id, "talker")
            self._free()
            self.silent = True
            self._send(reply, wire.ABORT)
            reply.close()
        except Exception as error:
            log.exception("talker: %s failed", self.request_id)
            had_session = self.session is not None
            self._free()
            self.silent = True
            if had_session:
                # code2wav frees the stream now instead of at its idle timeout.
                self._send(reply, wire.ABORT)
            reply.fail(f"talker: {error}")
        return end

    def _handle(self, message: Message) -> None:
        reply = message.reply
        kind = message.kind
        if self.silent:
            return
        if message.kind == wire.START:
            params = decode_parameters(wire.read_text(message.tensors.get("T_PARAMETERS")))
            if not params.audio:
                self.silent = True
                return
            self._start(message, params.temperature <= 0, params.seed, params.voice)
            return
        if self.session is None or kind == wire.TEXT:
            # Text-only, the thinker ended before speaking a token, or text and call deltas
            # (passed on from submit()): nothing to say.
            return
        if kind == wire.ABORT:
            if self._cancelled():
                self.stage.loaded.board.record_stop(self.request_id, "talker")
            self._free()
            self._send(reply, wire.ABORT)
            return
        if kind == wire.TOKEN:
            self.text_tokens += 1
            row = torch.from_numpy(np.asarray(message.tensors["T_EMBEDS"], np.float32))[0]
            self._frame(reply, self.session.step(row))
            return
        # END: speak the rest (tts_eos, then tts_pad) until codec EOS or the cap.
        session = self.session
        cap = CODEC_TOKENS_PER_TEXT_TOKEN * self.text_tokens + CODEC_TOKENS_SLACK
        session.max_codec_tokens = min(MAX_CODEC_TOKENS, max(len(session.codes0) + 1, cap))
        while self.session is not None:
            self._frame(reply, session.step(None))

    def _start(self, message: Message, greedy: bool, seed: int, voice: str) -> None:
        start = wire.read_talker_start(message.tensors)
        loaded = self.stage.loaded
        self.session = TalkerSession(
            loaded.model,
            loaded.config,
            greedy,
            seed,
            MAX_CODEC_TOKENS,
            self._cancelled,
            engine=self.stage.engine,
        )
        self.text_tokens = 1
        self._frame(message.reply, self.session.start(start, voice))

    def _frame(self, reply: wire.Reply, codes: list[int] | None) -> None:
        if codes is not None:
            self._send(reply, wire.FRAME, codes)
            return
        if self.session is not None and self.session.slot_full:
            # The slot ran out of room before the codec's EOS: the audio ends short, and the
            # client hears why (the model's output budget, its slot, ran out).
            reason = b"max_output_tokens"
            reply.send(_codec_message(self.request_id, wire.TEXT, -1, end_reason=reason))
        # Codec EOS (or the cap, or the slot's room): code2wav flushes; later text tokens are
        # not spoken.
        self._free()
        self.silent = True
        self._send(reply, wire.END)


class Code2WavStage:
    def __init__(
        self,
        settings: ModelSettings,
        plan: WindowPlan | None = None,
        limits: StreamLimits | None = None,
    ) -> None:
        self.loaded = load("code2wav", settings)
        self.plan = plan or WindowPlan()
        self.trim = trim_samples(self.loaded.model)
        warm_up(self.loaded.model, self.plan)
        # Batching on: every stream's windows meet here (code2wav.py, rules 1-4); off: each
        # stream runs its own forwards.
        self.batched = (
            BatchedDecoder(self.loaded.model, settings.omni_max_streams)
            if settings.omni_batching
            else None
        )
        self.workers = StreamWorkers("code2wav", self._handler, limits or StreamLimits())

    def submit(self, tensors: dict[str, Any], reply: wire.Reply) -> None:
        message = _message(tensors, "C_", reply)
        if message.kind == wire.TEXT:
            # Answered from execute(), in arrival order: text deltas keep their order.
            text = wire.read_text(tensors.get("C_TEXT"))
            call = wire.read_text(tensors.get("C_TOOL_CALL"))
            reason = wire.read_text(tensors.get("C_END_REASON"))
            reply.send(pipeline_outputs(text, tool_call=call, end_reason=reason))
            reply.close()
            return
        self.workers.submit(message)

    def _handler(self, request_id: str) -> StreamHandler:
        return _Code2WavStream(self, request_id)

    def decoder(self, member: _Code2WavStream) -> Decoder | None:
        """The stream's decoder: the batcher's when batching, else None (its own forwards)."""
        return None if self.batched is None else self.batched.decoder(member)

    def leave(self, member: _Code2WavStream) -> None:
        if self.batched is not None:
            self.batched.leave(member)

    def close(self) -> None:
        # Streams first: a stream's thread may be waiting for a round of the batcher.
        self.workers.stop()
        if self.batched is not None:
            self.batched.close()
        self.loaded.board.close()


class _Code2WavStream:
    def __init__(self, stage: Code2WavStage, request_id: str) -> None:
        self.stage = stage
        self.request_id = request_id
        self.stream: Code2WavStream | None = None
        self.reply: wire.Reply | None = None
        self.stopped = False

    def _cancelled(self) -> bool:
        reply = self.reply
        board = self.stage.loaded.board
        return (reply is not None and reply.is_cancelled()) or board.cancelled(self.request_id)

    def abandon(self, reason: str) -> None:
        self._free()

    def _free(self) -> None:
        # Every end (END, ABORT, cancel, error, idle, shutdown) comes here: no round of the
        # batcher waits for this stream any more.
        self.stage.leave(self)
        if self.stream is not None:
            self.stream.close()
            self.stream = None

    def handle(self, message: Message) -> bool:
        reply = message.reply
        self.reply = reply
        end = message.kind in (wire.END, wire.ABORT)
        try:
            audio = self._handle(message)
            if audio is not None and audio.size:
                reply.send(pipeline_outputs(b"", audio, tool_call=b"", end_reason=b""))
            reply.close()
        except Cancelled:
            self.stage.loaded.board.record_stop(self.request_id, "code2wav")
            self._free()
            self.stopped = True
            reply.close()
        except Exception as error:
            log.exception("code2wav: %s failed", self.request_id)
            self._free()
            self.stopped = True
            reply.fail(f"code2wav: {error}")
        if end:
            self._free()
        return end

    def _handle(self, message: Message) -> np.ndarray[Any, Any] | None:
        if self.stopped:
            return None
        if message.kind == wire.FRAME:
            if self.stream is None:
                if self._cancelled():
                    self.stopped = True
                    return None
                self.stream = Code2WavStream(
                    self.stage.loaded.model,
                    self.stage.plan,
                    self.stage.trim,
                    self._cancelled,
                    self.stage.decoder(self),
                )
            return self.stream.push(np.asarray(message.tensors["C_CODES"], np.int64))
        if self.stream is None:
            return None
        if message.kind == wire.END:
            return self.stream.flush()
        # ABORT
        if self._cancelled():
            self.stage.loaded.board.record_stop(self.request_id, "code2wav")
        return None

"""The three Triton stages of `qwen3_omni` (thinker, talker, code2wav) without Triton itself.

Each `model.py` only turns requests into tensors and a `Reply` and hands them to one of these.
Message layout: see wire.py. Cancellation: every stage checks its request's own cancel flag and
the cancel board at each cancellation point, records one stop on the board, frees the stream's
state and ends its request(s) with the final flag; upstream stages tell downstream ones with an
ABORT message so nothing waits for the idle timeout.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import torch

from turntaker_models.cancel_board import CancelBoard
from turntaker_models.contract import (
    ContractError,
    Conversation,
    GenerationParameters,
    ImagePart,
    Part,
    TextPart,
    decode_conversation,
    decode_parameters,
    split_audio,
)
from turntaker_models.contract import Message as ContractMessage
from turntaker_models.omni import wire
from turntaker_models.omni.images import gray_png_url
from turntaker_models.omni.loader import (
    Placement,
    load_config,
    load_stage,
    weights_dir,
)
from turntaker_models.omni.prompt import Prompt, PromptBuilder
from turntaker_models.omni.prompt_journal import PromptJournal
from turntaker_models.omni.sampling import Cancelled, SamplingConfig
from turntaker_models.omni.streams import Message, StreamHandler, StreamLimits, StreamWorkers
from turntaker_models.omni.thinker import TalkerStart, ThinkerSession
from turntaker_models.settings import ModelSettings

log = logging.getLogger("turntaker.omni")

# The talker speaks until codec EOS; random or confused weights may never emit it, so its length
# is capped relative to the text (real speech: ~4 codec frames per text token).
MAX_CODEC_TOKENS = 4096
CODEC_TOKENS_PER_TEXT_TOKEN = 5
CODEC_TOKENS_SLACK = 25


@dataclass
class Loaded:
    settings: ModelSettings
    path: Path
    board: CancelBoard
    config: Any
    model: Any
    load_s: float


def load(stage: str, settings: ModelSettings) -> Loaded:
    began = time.monotonic()
    torch.set_num_threads(settings.threads)
    path = weights_dir(settings)
    placement = Placement.auto()
    config = load_config(path)
    model = load_stage(path, stage, placement)  # type: ignore[arg-type]
    board = CancelBoard.open(settings.board_path)
    return Loaded(settings, path, board, config, model, time.monotonic() - began)


class Detokenizer:
    """Text deltas from token ids, in O(1) per token.

    Byte-level BPE (Qwen's tokenizer) decodes each token's bytes independently, so once the
    pending tokens decode to whole characters they can be emitted and forgotten. A token that
    ends inside a UTF-8 sequence is held back, at most `MAX_HELD` tokens (random weights may
    never complete one).
    """

    MAX_HELD = 8

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.pending: list[int] = []

    def add(self, token: int, final: bool) -> str:
        self.pending.append(token)
        text: str = self.tokenizer.decode(self.pending, skip_special_tokens=True)
        if text.endswith("\ufffd") and not final and len(self.pending) < self.MAX_HELD:
            return ""
        self.pending.clear()
        return text


class ThinkerStage:
    def __init__(self, settings: ModelSettings, limits: StreamLimits | None = None) -> None:
        self.loaded = load("thinker", settings)
        path = self.loaded.path
        self.prompts = PromptBuilder.load(path, self.loaded.config.thinker_config)
        self.tokenizer = self.prompts.tokenizer
        self.journal = PromptJournal(settings.prompt_log) if settings.prompt_log else None
        text_config = self.loaded.config.thinker_config.text_config
        self.hidden = int(text_config.hidden_size)
        self.max_positions = int(text_config.max_position_embeddings)
        self.workers = StreamWorkers("thinker", self._handler, limits or StreamLimits(16))
        self._keys = itertools.count()
        # REQUEST_IDs generating now: the talker and code2wav key their state by it, so two
        # live generations with one id would mix their audio.
        self._live: set[str] = set()
        self._live_lock = threading.Lock()
        self.warm_up()

    def claim(self, request_id: str) -> bool:
        with self._live_lock:
            if request_id in self._live:
                return False
            self._live.add(request_id)
            return True

    def release(self, request_id: str) -> None:
        with self._live_lock:
            self._live.discard(request_id)

    def warm_up(self) -> TalkerStart | None:
        """One short generation, so that the first request does not pay for lazy set-up (with an
        image when the checkpoint takes images: the vision tower's first call is slow too)."""
        parts: list[Part] = [TextPart("Hello")]
        if self.prompts.image_processor is not None:
            parts.insert(0, ImagePart(gray_png_url(64, 64)))
        conversation = Conversation([ContractMessage("user", parts)])
        prompt = self.prompts.build(conversation, [])
        session = ThinkerSession(
            self.loaded.model, self.loaded.config, prompt, SamplingConfig(), 0, lambda: False
        )
        try:
            token, start = session.prefill(want_talker=True)
            for _ in range(2):
                token = session.step(token)
            return start
        finally:
            session.close()

    def submit(self, tensors: dict[str, Any], reply: wire.Reply) -> None:
        # Keyed per request, not per REQUEST_ID: one thread runs one whole generation.
        request_id = wire.read_text(tensors.get("REQUEST_ID")).decode(errors="replace")
        key = f"{request_id}#{next(self._keys)}"
        self.workers.submit(Message(key, 0, wire.START, tensors, reply))

    def _handler(self, key: str) -> StreamHandler:
        return _ThinkerRun(self)

    def close(self) -> None:
        self.workers.stop()
        self.loaded.board.close()


class _ThinkerRun:
    def __init__(self, stage: ThinkerStage) -> None:
        self.stage = stage

    def abandon(self, reason: str) -> None:
        pass

    def handle(self, message: Message) -> bool:
        stage = self.stage
        reply = message.reply
        t = message.tensors
        request_id = wire.read_text(t.get("REQUEST_ID")).decode(errors="replace")
        raw_parameters = wire.read_text(t.get("PARAMETERS"))
        try:
            if not request_id:
                raise ContractError("REQUEST_ID is empty")
            conversation = decode_conversation(wire.read_text(t.get("CONVERSATION")))
            params = decode_parameters(raw_parameters)
            audio = split_audio(
                t.get("AUDIO", np.zeros(0, np.float32)),
                t.get("AUDIO_LENGTHS", np.zeros(0, np.int32)),
                conversation,
            )
            prompt = stage.prompts.build(conversation, audio)
            room = stage.max_positions - prompt.input_ids.shape[1]
            if room < 1:
                raise ContractError(
                    f"the conversation is {prompt.input_ids.shape[1]} tokens, the model's "
                    f"context is {stage.max_positions}"
                )
            # The KV cache grows with every token: never past the model's context.
            params = msgspec.structs.replace(params, max_tokens=min(params.max_tokens, room))
        except ContractError as error:
            reply.fail(f"qwen3_omni: {error}")
            return True
        if not stage.claim(request_id):
            reply.fail(f"qwen3_omni: REQUEST_ID {request_id} is already generating")
            return True
        if stage.journal is not None:
            try:
                stage.journal.write(request_id, prompt)
            except OSError:
                # The journal is for inspection; a full disk must not fail the conversation.
                log.exception("thinker: prompt journal %s", stage.journal.path)
        try:
            self._run(request_id, prompt, params, raw_parameters, reply)
        finally:
            stage.release(request_id)
        return True

    def _run(
        self,
        request_id: str,
        prompt: Prompt,
        params: GenerationParameters,
        raw_parameters: bytes,
        reply: wire.Reply,
    ) -> None:
        stage = self.stage
        board = stage.loaded.board
        session = ThinkerSession(
            stage.loaded.model,
            stage.loaded.config,
            prompt,
            SamplingConfig(temperature=params.temperature, top_p=params.top_p),
            params.seed,
            lambda: reply.is_cancelled() or board.cancelled(request_id),
        )
        sender = _ThinkerSender(reply, request_id, raw_parameters, stage.hidden)
        try:
            self._generate(session, params, sender)
            reply.close()
        except Cancelled:
            board.record_stop(request_id, "thinker")
            sender.emit(wire.ABORT, "")
            reply.close()
        except Exception as error:
            log.exception("thinker: %s failed", request_id)
            try:
                sender.emit(wire.ABORT, "")
            finally:
                reply.fail(f"thinker: {error}")
        finally:
            session.close()

    def _generate(
        self, session: ThinkerSession, params: GenerationParameters, sender: _ThinkerSender
    ) -> None:
        detok = Detokenizer(self.stage.tokenizer)
        token, start = session.prefill(want_talker=params.audio)
        count = 1

        def final(token: int) -> bool:
            return token in session.eos_ids or count >= params.max_tokens

        text = detok.add(token, final(token))
        if final(token):
            sender.emit(wire.END, text)
            return
        sender.emit(wire.START, text, start)
        while True:
            token = session.step(token)
            count += 1
            done = final(token)
            text = detok.add(token, done)
            if done:
                sender.emit(wire.END, text)
                return
            row = session.embed(token)[None] if params.audio else None
            sender.emit(wire.TOKEN, text, row)


class _ThinkerSender:
    def __init__(self, reply: wire.Reply, request_id: str, parameters: bytes, hidden: int) -> None:
        self.reply = reply
        self.request_id = wire.text_tensor(request_id)
        self.parameters = wire.text_tensor(parameters)
        self.hidden = hidden
        self.seq = 0

    def emit(self, kind: int, text: str, rows: TalkerStart | torch.Tensor | None = None) -> None:
        if isinstance(rows, TalkerStart):
            embeds = rows.rows.numpy()
            mm = rows.mm.numpy()
        elif rows is not None:
            embeds = rows.float().numpy()
            mm = np.zeros(embeds.shape[0], bool)
        else:
            embeds = np.zeros((0, self.hidden), np.float32)
            mm = np.zeros(0, bool)
        self.reply.send(
            {
                "T_TEXT": wire.text_tensor(text),
                "T_REQUEST_ID": self.request_id,
                "T_PARAMETERS": self.parameters,
                "T_KIND": wire.int_tensor(kind),
                "T_SEQ": wire.int_tensor(self.seq),
                "T_EMBEDS": np.ascontiguousarray(embeds, np.float32),
                "T_MM": np.ascontiguousarray(mm, bool),
                **wire.talker_start_tensors(rows if isinstance(rows, TalkerStart) else None),
            }
        )
        self.seq += 1

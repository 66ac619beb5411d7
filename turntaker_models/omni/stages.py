"""The three Triton stages of `qwen3_omni` (thinker, talker, code2wav) without Triton itself.

Each `model.py` only turns requests into tensors and a `Reply` and hands them to one of these.
Message layout: see wire.py. Cancellation: every stage checks its request's own cancel flag and
the cancel board at each cancellation point, records one stop on the board, frees the stream's
state and ends its request(s) with the final flag; upstream stages tell downstream ones with an
ABORT message so nothing waits for the idle timeout.

Function calling in the thinker (contract `GenerationParameters.tools`):
- The tools shown (turntaker_models/answers.py rule 1: all of them unless tool_choice is
  "none") go into the prompt as the checkpoint's chat template lays them out (prompt.py).
- Every generation's tokens go through an `Answer` (turntaker_models/answers.py: detokenizing,
  the `ToolCallStream` of turntaker_models/tool_calls.py, the offered functions, the
  tokens whose text was spoken): the spoken text is T_TEXT as before; each call delta goes
  out as its own TEXT message with T_TOOL_CALL (JSON `ToolCallDelta`) and nothing to speak.
  A call to a function the request does not offer, or any call under "none", is dropped and
  ends the generation; so does a malformed one, and a call ends it once its arguments close
  (at most one call per generation, nothing spoken after it).
- The talker only ever gets the tokens whose text was spoken: a token whose text is held
  back (it may begin `<tool_call>`) waits, and once a call began no token reaches the talker
  again. START goes with the first spoken token, so an answer that is a call alone never
  starts the talker (no audio at all). The final token, as before, is not spoken; the
  tokens before it whose text was decided only at the end (held back as an unclosed
  `<tool_response>`'s, tool_calls.py) reach the talker then, before END.
- With no tool offered the same holds (the stream is the same): a call the model writes
  anyway is dropped and ends the generation, as under tool_choice "none".
- "required" and "function" decode under a `CallConstraint` on the thinker's logits (the
  checkpoint's tokenizer; its llguidance view is built once per stage), so the generation is
  exactly one call whose arguments validate against the function's schema; the tokens the
  grammar forces are fed several per forward pass. max_tokens still holds.

The end reason (contract END_REASON): a generation that max_tokens ended (the request's, or
the context left in the stage's slot) goes out with T_END_REASON "max_output_tokens" on its
END, unless it ended on its own at that very token (a turn token, the call's grammar done,
the answer over: a call closed or dropped). The talker passes it on at once.

Nothing of the chat template is ever spoken, sent as text or given to the talker (random
weights write any token; a real model may echo its prompt): the decode skips special tokens,
the turn tokens (`stop_ids`: `<|im_end|>`, and `<|im_start|>` and `<|endoftext|>`, after
which comes another turn) end the generation, the `ToolCallStream` drops the markup that is
text (`<tool_response>` blocks, stray tags: tool_calls.py), and a token goes to the talker
only if some of its text was spoken (never a special token, never a dropped one).
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

from turntaker_models.answers import Answer, shown_tools, turn_ids
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
    encode,
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
from turntaker_models.omni.thinker_engine import ThinkerEngine
from turntaker_models.settings import ModelSettings
from turntaker_models.tool_grammar import CallConstraint, call_constraint, ll_tokenizer

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


class ThinkerStage:
    def __init__(self, settings: ModelSettings, limits: StreamLimits | None = None) -> None:
        self.loaded = load("thinker", settings)
        path = self.loaded.path
        self.prompts = PromptBuilder.load(path, self.loaded.config.thinker_config)
        self.tokenizer = self.prompts.tokenizer
        self.stop_ids = stop_ids(self.tokenizer, self.loaded.config)
        # llguidance's view of the tokenizer, for constrained calls (built once: ~0.3 s).
        self.grammar_tokenizer = ll_tokenizer(self.tokenizer)
        self.journal = PromptJournal(settings.prompt_log) if settings.prompt_log else None
        text_config = self.loaded.config.thinker_config.text_config
        self.hidden = int(text_config.hidden_size)
        self.max_positions = int(text_config.max_position_embeddings)
        limits = limits or StreamLimits(settings.omni_max_streams)
        # Batched: every stream's prefill and steps run in the engine (thinker_engine.py), its
        # KV cache a slot of it; a stream's prompt and answer must fit its slot.
        self.engine: ThinkerEngine | None = None
        if settings.omni_batching:
            self.engine = ThinkerEngine(
                self.loaded.model, limits.max_streams, settings.omni_max_positions
            )
            self.max_positions = self.engine.max_len
        self.workers = StreamWorkers("thinker", self._handler, limits)
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
            self.loaded.model,
            self.loaded.config,
            prompt,
            SamplingConfig(),
            0,
            lambda: False,
            engine=self.engine,
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
        if self.engine is not None:
            self.engine.shutdown()
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
            tools = shown_tools(params, conversation)
            prompt = stage.prompts.build(conversation, audio, tools=tools)
            constraint = call_constraint(stage.grammar_tokenizer, params)
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
            offered = [t.name for t in tools]
            self._run(request_id, prompt, params, raw_parameters, reply, offered, constraint)
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
        offered: list[str],
        constraint: CallConstraint | None = None,
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
            constraint,
            engine=stage.engine,
        )
        sender = _ThinkerSender(reply, request_id, raw_parameters, stage.hidden)
        try:
            self._generate(session, params, offered, sender)
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
        self,
        session: ThinkerSession,
        params: GenerationParameters,
        offered: list[str],
        sender: _ThinkerSender,
    ) -> None:
        stage = self.stage
        answer = Answer(stage.tokenizer, offered)
        # A forced call says nothing: no talker conditioning to compute.
        want_talker = params.audio and session.constraint is None
        token, start = session.prefill(want_talker=want_talker)
        emitter = _Emitter(answer, session, start if want_talker else None, sender)
        fresh = [token, *session.forced()]
        count = 0
        while True:
            for index, token in enumerate(fresh):
                count += 1
                constrained_done = session.constraint is not None and session.constraint.done
                ended = token in stage.stop_ids or (index == len(fresh) - 1 and constrained_done)
                # The budget, not the model, ended it: the answer is cut short.
                cut = count >= params.max_tokens and not ended
                if emitter.push(token, ended or cut, cut):
                    return
            room = params.max_tokens - count - 1
            token = session.step(*fresh)
            fresh = [token, *session.forced()[: max(0, room)]]


def stop_ids(tokenizer: Any, config: Any) -> frozenset[int]:
    """The tokens that end a generation: the end of the assistant's turn and the turn markers
    the vocabulary holds (see the module docstring)."""
    ids = {int(config.im_end_token_id), int(config.im_start_token_id)}
    return frozenset(ids) | turn_ids(tokenizer)


class _Emitter:
    """One generation's tokens in, the thinker's messages out, in stream order: the spoken
    text with START (the talker's conditioning, with the first token spoken) or TOKEN for each
    token whose text was spoken (TEXT when none was), then each call delta on its own TEXT
    message, then END (with the last step's text if nothing followed it, and the end reason
    when the budget cut the answer)."""

    def __init__(
        self,
        answer: Answer,
        session: ThinkerSession,
        start: TalkerStart | None,
        sender: _ThinkerSender,
    ) -> None:
        self.answer = answer
        self.session = session
        # None: nothing is spoken (audio=false, a forced call): START and TOKEN carry no rows.
        self.start = start
        self.sender = sender
        self.started = False

    def push(self, token: int, final: bool, cut: bool = False) -> bool:
        """Sends what `token` (the generation's last if `final`; `cut`: the budget ended the
        generation there) gives; True after END."""
        said = self.answer.push(token, final)
        spoken, released, calls = said.text, said.tokens, said.calls
        done = final or self.answer.over
        # An answer over at this token ended on its own (a call closed, or dropped).
        reason = "max_output_tokens" if cut and not self.answer.over else ""
        if done and released and released[-1] == token:
            # The token that ends the generation is not spoken (the talker goes on to
            # tts_eos); the tokens held back before it are (text decided only at the end).
            released = released[:-1]
        if done and not calls and not released:
            self.sender.emit(wire.END, spoken, end_reason=reason)
            return True
        self._speak(spoken, released)
        for delta in calls:
            self.sender.emit(wire.TEXT, "", tool_call=encode(delta))
        if done:
            self.sender.emit(wire.END, "", end_reason=reason)
        return done

    def _speak(self, text: str, tokens: tuple[int, ...]) -> None:
        for token in tokens:
            if not self.started:
                self.started = True
                start = self.start
                if start is not None:
                    start = start.with_first(self.session.embed(token))
                self.sender.emit(wire.START, text, start)
            else:
                row = self.session.embed(token)[None] if self.start is not None else None
                self.sender.emit(wire.TOKEN, text, row)
            text = ""
        if text:
            self.sender.emit(wire.TEXT, text)


class _ThinkerSender:
    def __init__(self, reply: wire.Reply, request_id: str, parameters: bytes, hidden: int) -> None:
        self.reply = reply
        self.request_id = wire.text_tensor(request_id)
        self.parameters = wire.text_tensor(parameters)
        self.hidden = hidden
        self.seq = 0

    def emit(
        self,
        kind: int,
        text: str,
        rows: TalkerStart | torch.Tensor | None = None,
        tool_call: bytes = b"",
        end_reason: str = "",
    ) -> None:
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
                "T_TOOL_CALL": wire.text_tensor(tool_call),
                "T_END_REASON": wire.text_tensor(end_reason),
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

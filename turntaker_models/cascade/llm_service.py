"""The `llm` model behind the Triton adapter: SmolLM2's answer streamed as text deltas and
sentences, on a bounded pool of worker threads.

Rules:
- submit() (Triton's execute()) only queues: a bounded queue (`max_queued`), and a request
  beyond it is refused at once with an error ("busy"), never left waiting unanswered.
- `workers` generations run at once; each checks the stream cancel and the cancel board before
  every token (llm.Decoder), frees its KV cache as soon as it stops, and records its stop on
  the board when cancelled.
- Every response carries every output (see `_outputs`); the stream ends with the final flag,
  or with one response carrying the error and the final flag.
- `TOOL_CALL` (STRING [1]) is the function-call hook: "" on a response with no piece of a call,
  else the JSON of one contract `ToolCallDelta` (the first names the function). A response
  carrying one has "" in TEXT_DELTA and SENTENCE, so a call's text never reaches tts; at most
  one call per request, after any spoken text, and the stream ends soon after the call's
  arguments close (llm.py says how calls are decoded).
- `END_REASON` (STRING [1], contract.EndReason) is "" on every response but one: a generation
  that max_tokens (or the context left) ended, not the model ("length"), and that made no
  call (a call is whole when sent: the reply is complete), ends with one more
  response of its own carrying "max_output_tokens" (and "" in every other output), after all
  of its text; tts passes it on after the audio of everything before it.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from turntaker_models.cancel_board import CancelBoard
from turntaker_models.cascade import smollm
from turntaker_models.cascade.llm import Decoder, GenerationStats, Step
from turntaker_models.cascade.prefix_cache import PrefixCache
from turntaker_models.contract import (
    ContractError,
    Conversation,
    EndReason,
    GenerationParameters,
    decode_conversation,
    decode_parameters,
    encode,
)
from turntaker_models.triton_adapter import Logger, ModelContext, Reply, strings, text_tensor

STAGE = "llm"
INPUTS = ("REQUEST_ID", "CONVERSATION", "TRANSCRIPTS", "PARAMETERS")


def _one_string(tensors: Mapping[str, npt.NDArray[Any]], name: str) -> str:
    values = strings(tensors.get(name))
    if len(values) != 1:
        raise ContractError(f"{name} must hold exactly one string, got {len(values)}")
    return values[0]


def _outputs(
    step: Step, request_id: str, parameters: str, end_reason: EndReason | None = None
) -> dict[str, npt.NDArray[np.object_]]:
    # Every response carries every output: inside `cascade` each one becomes a tts request, and
    # the ensemble only starts a step when all its inputs have a tensor of the same iteration
    # (the ensemble's own inputs exist for the first iteration only, hence PASS_*).
    return {
        "TEXT_DELTA": text_tensor(step.text),
        "SENTENCE": text_tensor(step.sentence),
        "TOOL_CALL": text_tensor(encode(step.tool_call) if step.tool_call is not None else b""),
        "END_REASON": text_tensor(end_reason or ""),
        "PASS_REQUEST_ID": text_tensor(request_id),
        "PASS_PARAMETERS": text_tensor(parameters),
    }


class LlmService:
    """Generations of one Decoder on `workers` threads, fed from a bounded queue."""

    INPUTS = INPUTS

    def __init__(
        self,
        decoder: Decoder,
        board: CancelBoard,
        log: Logger,
        workers: int = 2,
        max_queued: int = 16,
    ) -> None:
        self.decoder = decoder
        self.board = board
        self.log = log
        self.jobs: queue.Queue[tuple[dict[str, npt.NDArray[Any]], Reply]] = queue.Queue(
            maxsize=max_queued
        )
        self.stopping = threading.Event()
        self.workers = [
            threading.Thread(target=self._work, name=f"llm-worker-{i}", daemon=True)
            for i in range(workers)
        ]
        for worker in self.workers:
            worker.start()

    def submit(self, tensors: dict[str, npt.NDArray[Any]], reply: Reply) -> None:
        try:
            self.jobs.put_nowait((tensors, reply))
        except queue.Full:
            reply.fail(f"llm: busy, {self.jobs.maxsize} requests already waiting; try again later")

    def _work(self) -> None:
        while not self.stopping.is_set():
            try:
                tensors, reply = self.jobs.get(timeout=0.2)
            except queue.Empty:
                continue
            self.serve(tensors, reply)
            # A request (and its response sender) held here would keep the server from
            # unloading this model until the next request replaced it.
            del tensors, reply

    def serve(self, tensors: Mapping[str, npt.NDArray[Any]], reply: Reply) -> None:
        """One generation, start to end, on the calling thread."""
        try:
            request_id = _one_string(tensors, "REQUEST_ID")
            conversation: Conversation = decode_conversation(
                _one_string(tensors, "CONVERSATION").encode()
            )
            raw_params = _one_string(tensors, "PARAMETERS")
            params = decode_parameters(raw_params.encode())
            transcripts = strings(tensors.get("TRANSCRIPTS"))
            stats = GenerationStats()

            def should_stop() -> bool:
                return reply.is_cancelled() or self.board.cancelled(request_id)

            steps = self.decoder.generate(conversation, transcripts, params, should_stop, stats)
            try:
                for step in steps:
                    try:
                        reply.send(_outputs(step, request_id, raw_params))
                    except Exception:
                        # A send racing a stream cancel may fail; that is a cancel, not a bug.
                        if not should_stop():
                            raise
                        stats.finish_reason = "cancelled"
                        break
            finally:
                # Frees the KV cache now if the loop above left the generator unfinished.
                steps.close()
            if stats.finish_reason == "length" and not stats.tool_call:
                # The budget, not the model, ended the answer: the client is told so. A call
                # is sent only once its arguments are whole, so a reply that made one is
                # complete, whatever the budget did after it (OpenAI's call is `completed`).
                try:
                    reply.send(_outputs(Step(""), request_id, raw_params, "max_output_tokens"))
                except Exception:
                    if not should_stop():  # as above: a send racing a cancel is a cancel
                        raise
            if stats.finish_reason == "cancelled":
                self.board.record_stop(request_id, STAGE)
            called = f", called {stats.tool_call}" if stats.tool_call else ""
            self.log.log_info(
                f"llm {request_id}: {stats.finish_reason}{called}, {stats.prompt_tokens} prompt "
                f"tokens, {stats.new_tokens} new at {stats.tokens_per_s:.1f} tokens/s"
            )
        except ContractError as error:
            self._fail(reply, f"llm: {error}")
            return
        except Exception as error:
            self._fail(reply, f"llm: internal error: {type(error).__name__}: {error}")
            return
        try:
            reply.close()
        except Exception as error:
            # The client may be gone (a cancelled stream); there is nobody left to tell.
            self.log.log_verbose(f"llm: final flag not sent: {error}")

    def _fail(self, reply: Reply, message: str) -> None:
        try:
            reply.fail(message)
        except Exception as error:
            self.log.log_warn(f"{message} (and could not tell the client: {error})")

    def close(self) -> None:
        self.stopping.set()
        for worker in self.workers:
            worker.join(timeout=5.0)
        self.board.close()


def make_service(context: ModelContext) -> LlmService:
    """Loads SmolLM2 (and warms it up) and starts `workers` threads (config parameters
    `workers`, default 2, and `max_queued`, default 16)."""
    settings = context.settings
    board = CancelBoard.open(settings.board_path)
    loaded = smollm.load(settings.cache_dir)
    # Each turn's prompt starts with the last one's: only the new part is prefilled.
    decoder = Decoder(loaded.model, loaded.tokenizer, settings.threads, prefixes=PrefixCache())
    # One tiny generation now, so that the first real request does not pay torch's warm-up.
    warm = decode_conversation(b'{"messages":[{"role":"user","content":[]}]}')
    list(decoder.generate(warm, [], GenerationParameters(max_tokens=2), lambda: False))
    converted = "" if loaded.convert_s is None else f", GGUF converted in {loaded.convert_s:.1f} s"
    context.log.log_info(f"llm: loaded {loaded.folder} in {loaded.load_s:.2f} s{converted}")
    return LlmService(
        decoder,
        board,
        context.log,
        workers=context.integer("workers", 2),
        max_queued=context.integer("max_queued", 16),
    )

"""Triton Python-backend model `llm`: streams SmolLM2's answer as text deltas and sentences."""

from __future__ import annotations

import json
import queue
import threading
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

from turntaker_models import smollm
from turntaker_models.cancel_board import CancelBoard
from turntaker_models.contract import (
    ContractError,
    Conversation,
    GenerationParameters,
    decode_conversation,
    decode_parameters,
)
from turntaker_models.llm import Decoder, GenerationStats, Step
from turntaker_models.settings import ModelSettings

STAGE = "llm"
FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def _parameter(args: dict[str, Any], key: str, default: int) -> int:
    params = json.loads(args.get("model_config", "{}")).get("parameters", {})
    value = params.get(key, {}).get("string_value")
    return int(value) if value else default


def _strings(request: Any, name: str) -> list[str]:
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return []
    values = tensor.as_numpy().reshape(-1)
    return [v.decode() if isinstance(v, bytes) else str(v) for v in values]


def _one_string(request: Any, name: str) -> str:
    values = _strings(request, name)
    if len(values) != 1:
        raise ContractError(f"{name} must hold exactly one string, got {len(values)}")
    return values[0]


def _one(value: str) -> Any:
    return np.array([value.encode()], dtype=np.object_)


def _response(step: Step, request_id: str, parameters: str) -> Any:
    # Every response carries every output: inside `cascade` each one becomes a tts request, and
    # the ensemble only starts a step when all its inputs have a tensor of the same iteration
    # (the ensemble's own inputs exist for the first iteration only, hence PASS_*).
    return pb_utils.InferenceResponse(
        output_tensors=[
            pb_utils.Tensor("TEXT_DELTA", _one(step.text)),
            pb_utils.Tensor("SENTENCE", _one(step.sentence)),
            pb_utils.Tensor("PASS_REQUEST_ID", _one(request_id)),
            pb_utils.Tensor("PASS_PARAMETERS", _one(parameters)),
        ]
    )


class TritonPythonModel:
    def initialize(self, args: dict[str, Any]) -> None:
        self.logger = pb_utils.Logger
        settings = ModelSettings.from_env()
        self.board = CancelBoard.open(settings.board_path)
        loaded = smollm.load(settings.cache_dir)
        self.decoder = Decoder(loaded.model, loaded.tokenizer, settings.threads)
        # One tiny generation now, so that the first real request does not pay torch's warm-up.
        warm = decode_conversation(b'{"messages":[{"role":"user","content":[]}]}')
        list(self.decoder.generate(warm, [], GenerationParameters(max_tokens=2), lambda: False))
        converted = (
            "" if loaded.convert_s is None else f", GGUF converted in {loaded.convert_s:.1f} s"
        )
        self.logger.log_info(f"llm: loaded {loaded.folder} in {loaded.load_s:.2f} s{converted}")
        self.workers_n = _parameter(args, "workers", 2)
        # Bounded: a flood of requests is refused at once instead of piling up unanswered.
        self.jobs: queue.Queue[Any] = queue.Queue(maxsize=_parameter(args, "max_queued", 16))
        self.stopping = threading.Event()
        self.workers = [
            threading.Thread(target=self._work, name=f"llm-worker-{i}", daemon=True)
            for i in range(self.workers_n)
        ]
        for worker in self.workers:
            worker.start()

    def execute(self, requests: list[Any]) -> None:
        for request in requests:
            try:
                self.jobs.put_nowait(request)
            except queue.Full:
                sender = request.get_response_sender()
                busy = pb_utils.TritonError(
                    f"llm: busy, {self.jobs.maxsize} requests already waiting; try again later"
                )
                sender.send(pb_utils.InferenceResponse(error=busy), flags=FINAL)
        return None

    def _work(self) -> None:
        while not self.stopping.is_set():
            try:
                request = self.jobs.get(timeout=0.2)
            except queue.Empty:
                continue
            self._serve(request)
            # A request (and its response sender) held here would keep the server from
            # unloading this model until the next request replaced it.
            del request

    def _serve(self, request: Any) -> None:
        sender = request.get_response_sender()
        try:
            request_id = _one_string(request, "REQUEST_ID")
            conversation: Conversation = decode_conversation(
                _one_string(request, "CONVERSATION").encode()
            )
            raw_params = _one_string(request, "PARAMETERS")
            params = decode_parameters(raw_params.encode())
            transcripts = _strings(request, "TRANSCRIPTS")
            stats = GenerationStats()

            def should_stop() -> bool:
                return bool(sender.is_cancelled()) or self.board.cancelled(request_id)

            steps = self.decoder.generate(conversation, transcripts, params, should_stop, stats)
            try:
                for step in steps:
                    try:
                        sender.send(_response(step, request_id, raw_params))
                    except Exception:
                        # A send racing a stream cancel may fail; that is a cancel, not a bug.
                        if not should_stop():
                            raise
                        stats.finish_reason = "cancelled"
                        break
            finally:
                # Frees the KV cache now if the loop above left the generator unfinished.
                steps.close()
            if stats.finish_reason == "cancelled":
                self.board.record_stop(request_id, STAGE)
            self.logger.log_info(
                f"llm {request_id}: {stats.finish_reason}, {stats.prompt_tokens} prompt tokens, "
                f"{stats.new_tokens} new at {stats.tokens_per_s:.1f} tokens/s"
            )
        except ContractError as error:
            self._fail(sender, f"llm: {error}")
            return
        except Exception as error:
            self._fail(sender, f"llm: internal error: {type(error).__name__}: {error}")
            return
        try:
            sender.send(flags=FINAL)
        except Exception as error:
            # The client may be gone (a cancelled stream); there is nobody left to tell.
            self.logger.log_verbose(f"llm: final flag not sent: {error}")

    def _fail(self, sender: Any, message: str) -> None:
        try:
            # One response, error and final flag together: an ensemble or BLS caller stops
            # at the error and would never read a separate final flag.
            error = pb_utils.TritonError(message)
            sender.send(pb_utils.InferenceResponse(error=error), flags=FINAL)
        except Exception as error:
            self.logger.log_warn(f"{message} (and could not tell the client: {error})")

    def finalize(self) -> None:
        self.stopping.set()
        for worker in self.workers:
            worker.join(timeout=5.0)
        self.board.close()

"""The models' code: what the Triton Python-backend models in `model_repository/` run.

Each model's `model.py` is a thin Triton adapter; the work (loading, stepping, cancelling)
lives here, so it is typed, linted and tested without a server. Nothing here imports the
orchestrator: this code runs inside Triton's Python-backend stubs.

- `contract`: the pipeline contract that `cascade` and `qwen3_omni` share (its requests and
  replies; model_repository/README.md); `triton_adapter`: the one adapter of the decoupled
  models; `settings`: `ModelSettings`, where the models find their board, caches and weights.
- `cancel_board`: `CancelBoard`, the shared-memory board that carries a stream's cancel to
  every step of an ensemble.
- `answers`: what both generators share: the tools a prompt shows, the detokenizer and the
  answer's bookkeeping; `tool_calls`: function calls in streamed text; `tool_grammar`:
  constrained decoding of one call.
- `cascade/`: the CPU pipeline's models (`asr`, `llm`, `tts`).
- `omni/`: Qwen3-Omni's three stages (`thinker`, `talker`, `code2wav`).
- `turn`, `turn_window`: the `turn` model (Smart Turn v3.2) and the audio window it judges;
  `null`: the `null` pipeline (the contract with no compute, for benchmarks).

The package re-exports nothing: each name is imported from the module that defines it.
"""

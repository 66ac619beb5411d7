"""The `qwen3_omni` pipeline's models: Qwen3-Omni's `thinker` -> `talker` -> `code2wav`.

- `stages`: the three stages without Triton; `triton_model`: behind the shared Triton adapter;
  `audio_stages`: the talker and code2wav stages' per-request state; `streams`: per-stream
  worker threads; `wire`: the tensors between the stages.
- `thinker`, `talker`, `code2wav`: each model, one step at a time; `sampling`: token choice.
- Batching across streams (`ModelSettings.omni_batching`, on by default): `batcher` (the
  streams' threads meet there for one forward), `slots` (a static KV cache, a slot per
  stream), `thinker_engine` and `talker_engine` (each stage's batched forwards); Code2Wav's
  `BatchedDecoder` is in `code2wav`.
- `prompt`: a conversation as the thinker's prompt, as Qwen's own processor lays it out;
  `images`: image parts decoded and checked; `prompt_journal`: what each request's prompt held.
- `loader`: one stage from a checkpoint folder; `checkpoint_dir`: writing one atomically;
  `tiny`: tiny random weights (`turntaker make-tiny-omni`); `real_size`: a real-size
  checkpoint of random values (`make bench-gpu`).
"""

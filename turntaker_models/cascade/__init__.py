"""The `cascade` pipeline's models: `asr` -> `llm` -> `tts`, the CPU pipeline that really talks.

- `asr`: speech to text (faster-whisper, Whisper-base int8); `whisper_assets`: its weights,
  reassembled from the two packages that ship them.
- `llm`: the `llm` step (a contract `Conversation` in, text deltas, sentences and a function
  call out); `llm_service`: the model behind the Triton adapter; `smollm`: SmolLM2-135M's
  weights (the tool prompt, calls and grammar are turntaker_models' own, shared with omni/).
- `tts`: text to speech (24 kHz) with `speech` (one clause in, audio and word ends out),
  `voices` (which engine speaks a voice name), `piper` (the default voice, Piper's CC0 `joe`
  under onnxruntime, phonemes from the espeak-ng binary), `flite` (the C library, flite's
  voices by name) and `held_text` (which text goes out with which chunk: docs/protocol.md
  rule 5).
"""

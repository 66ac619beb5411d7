"""The Triton models as the service calls them, over `orchestrator.triton`'s Trio bridge.

- `endpoints`: `EndpointPool`, health-checked Triton endpoints, the least busy chosen.
- `response_actor`: `ResponseActor`, one task per response that owns its pipeline stream;
  `requests`: the core's `InferenceRequest` as the pipelines' contract request.
- `vad_batcher`: `VadBatcher`, one `vad` request per tick for every session's chunk.
- `transcriber`: `TritonTranscriber` (`asr`); `turn_predictor`: `TritonTurnPredictor`
  (`turn`, Smart Turn v3.2).
"""

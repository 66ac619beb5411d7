"""Running the Triton Inference Server that serves `model_repository/`, and calling it.

- `launcher`: start, watch and stop the `tritonserver` binary (`TritonServer`).
- `cli`: `turntaker triton`, the server in the foreground.
- `pipeline_client`: a blocking client for one pipeline stream and its cancel path.
- `trio_bridge`: `TritonUnary` and `TritonStream`, the blocking gRPC client called from Trio.

Public names: what a caller needs to run a server (the tests, the benchmarks, `serve`):
`TritonConfig`, `TritonServer` and the `TritonStartError` its start raises.
"""

from orchestrator.triton.launcher import TritonConfig, TritonServer, TritonStartError

__all__ = ["TritonConfig", "TritonServer", "TritonStartError"]

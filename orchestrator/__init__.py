"""The realtime server: a pure session core, the protocol it speaks, and the I/O around them.

Pure (no I/O, no clock; tests/test_architecture.py, rule 1), with `statecharts/`:
- `protocol/`: the Realtime protocol's typed events, decoded and encoded once at the edge.
- `session/`: `SessionCore`, the sans-IO session: inputs and the caller's clock in, server
  events and typed actions out.

I/O, which carries out what the core decides:
- `service/`: the Trio service: the HTTP and WebSocket edge, the session actors
  (`service/sessions/`) and the clients of the Triton models (`service/backends/`).
- `supervisor/`: `turntaker serve --workers N`: worker processes behind one nginx.
- `triton/`: the local Triton server's launcher and the Trio bridge to its gRPC client.
- `cli`: the `turntaker` command.

Subpackages re-export nothing unless their docstring says so (`triton` does).
"""

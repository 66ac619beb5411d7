"""The Trio service: it carries out what the pure core decides, and decides nothing itself.

- `serve`: `turntaker serve`, the local Triton (unless `--triton-url`) and the server;
  `config`: `ServiceConfig`, its one typed configuration object.
- `app`: the ASGI app on hypercorn's Trio worker (`/v1/realtime`, `/healthz`, `/readyz`,
  `/metrics`); `ws_transport`: its WebSocket message limit and close codes; `access`: who
  may open a session and how much audio a key may send.
- `sessions/`: a session's tasks: the actor that feeds its core, its connection and outbox,
  its timers, its VAD feeder, and the process's host of sessions.
- `backends/`: the clients of the Triton models: endpoints, one actor per response, the
  VAD batcher, the transcriber and the turn predictor.
- `metrics`, `loop_lag`: Prometheus metrics and the event loop's lag.

Subpackages re-export nothing: each name is imported from the module that defines it.
"""

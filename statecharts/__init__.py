"""The statecharts: what a session, a response, a reply's playback and a connection may do next.

python-statemachine charts on its sync engine (an error raises). Pure: a chart takes events and
emits typed effects; it does no I/O, reads no clock and knows nothing of the orchestrator that
carries its effects out (tests/test_architecture.py, rules 1 and 2).

- `base`: `Chart`, what every chart shares (the engine's settings, the effects outbox).
- `session`: `SessionChart`, one realtime session: its input and output regions in parallel.
- `response`: `ResponseChart`, one response, from `response.created` to its last heard ms.
- `playback`: `PlaybackChart`, what the user heard of one reply (rule 5: streaming, heard in
  full, cut, and by whom; the two bases).
- `connection`: `ConnectionChart`, a session's hold on its connection (attached, detached in
  its resume grace, ended).
- `session_events`, `response_events`, `playback_events`, `connection_events`: each chart's
  typed events (a chart is fed these, never a name).
- `effects`: the typed effects the charts emit.
- `diagrams`: every chart as Mermaid and SVG (`turntaker diagrams`, docs/statecharts/).

The package re-exports nothing: each name is imported from the module that defines it.
"""

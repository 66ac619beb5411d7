"""The Realtime protocol, sans-IO: typed client and server events, parsed once at the edge.

What `docs/protocol.md` describes, as types. Nothing here does I/O, reads a clock or keeps
module-level state (tests/test_architecture.py, rule 1); the only state is the event-id counter
inside a `ServerEventEncoder`.

- `codec`: the edge. `decode_client_event` turns a WebSocket message into a `ClientEvent` or a
  `ProtocolError`; `ServerEventEncoder` turns `ServerEvent`s into JSON; `error_event`.
- `client`: the client events (`ClientEvent`, `CLIENT_EVENT_TYPES`) as the rest of the server
  sees them; `server`: the server events (`ServerEvent`, `SERVER_EVENT_TYPES`).
- `items`: conversation items and their content parts (both directions); `response`: the
  `realtime.response` object; `session_config`: `SessionConfig`, `SessionPatch` and their
  parts; `tools`: function tools and tool choice; `errors`: `ProtocolError` and its codes.
- `client_wire`, `session_wire`: the wire spellings (beta included) that `codec` decodes and
  normalizes. Nothing past the codec uses them.

The package re-exports nothing: each name is imported from the module that defines it
(`from orchestrator.protocol import client as ce`, `from orchestrator.protocol.codec import
decode_client_event`), so every name has one import path.
"""

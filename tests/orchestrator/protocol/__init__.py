"""The Realtime protocol's types, codec and errors (orchestrator/protocol/), sans-IO."""

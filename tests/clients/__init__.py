"""The realtime client libraries developers build on, each driven against the real server."""

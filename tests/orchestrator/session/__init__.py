"""The pure session core (orchestrator/session/): `SessionCore` and its parts, in memory."""

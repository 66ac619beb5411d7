"""Turn taking's rules (orchestrator/session/turns/)."""

"""History, playback ledger, playout and fencing (orchestrator/session/history/)."""

"""The `--workers` supervisor's policies (orchestrator/supervisor/)."""

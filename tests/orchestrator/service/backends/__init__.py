"""The service's Triton clients (orchestrator/service/backends/)."""

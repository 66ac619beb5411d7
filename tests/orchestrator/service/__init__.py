"""The Trio service (orchestrator/service/) without a Triton server."""

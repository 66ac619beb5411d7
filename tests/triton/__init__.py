"""The Triton models and `orchestrator/triton/` against one real tritonserver."""

"""Running the Triton Inference Server that serves `model_repository/`."""

from orchestrator.triton.launcher import (
    TritonConfig,
    TritonServer,
    TritonStartError,
    remove_stale_shm_regions,
)

__all__ = ["TritonConfig", "TritonServer", "TritonStartError", "remove_stale_shm_regions"]

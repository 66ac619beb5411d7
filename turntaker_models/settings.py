"""Where the models find their board, caches and weights: one typed object, read from the env.

The launcher (`turntaker triton`) sets these variables for the server; every stub process
inherits them. In the GPU image they have fixed defaults (see Dockerfile.triton).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

BOARD_ENV = "TURNTAKER_CANCEL_BOARD"
CACHE_ENV = "TURNTAKER_CACHE_DIR"
OMNI_WEIGHTS_ENV = "TURNTAKER_OMNI_WEIGHTS"
THREADS_ENV = "TURNTAKER_MODEL_THREADS"
DEFAULT_BOARD = Path("/dev/shm/turntaker-cancel-board")


def default_cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "turntaker"


@dataclass(frozen=True)
class ModelSettings:
    board_path: Path
    cache_dir: Path
    omni_weights: Path | None
    threads: int

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> ModelSettings:
        e = dict(os.environ if env is None else env)
        omni = e.get(OMNI_WEIGHTS_ENV)
        return cls(
            board_path=Path(e.get(BOARD_ENV) or DEFAULT_BOARD),
            cache_dir=Path(e.get(CACHE_ENV) or default_cache_dir()),
            omni_weights=Path(omni) if omni else None,
            threads=max(1, int(e.get(THREADS_ENV) or 1)),
        )

    def environment(self) -> dict[str, str]:
        """The variables that hand these settings to a server's stub processes."""
        env = {
            BOARD_ENV: str(self.board_path),
            CACHE_ENV: str(self.cache_dir),
            THREADS_ENV: str(self.threads),
        }
        if self.omni_weights is not None:
            env[OMNI_WEIGHTS_ENV] = str(self.omni_weights)
        return env

"""The `triton_server` fixture lives in tests/conftest.py; names kept for existing imports."""

from __future__ import annotations

from tests.conftest import REPO_ROOT, free_port

_free_port = free_port

__all__ = ["REPO_ROOT", "_free_port"]

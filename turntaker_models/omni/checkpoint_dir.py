"""Writing a checkpoint folder so that nobody ever sees half of one.

Rules: the folder is written in a sibling temporary folder and renamed into place, so a reader
(or a second builder racing this one) sees either nothing or a complete checkpoint; an existing
folder is left as it is; a lost race is fine when the winner's folder is complete (it holds
`complete_file`).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path


def build_in_place(out_dir: Path, write: Callable[[Path], None], complete_file: str) -> Path:
    """`out_dir`, written by `write(folder)` unless it exists already."""
    out_dir = Path(out_dir)
    if out_dir.exists():
        return out_dir
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}-", dir=out_dir.parent))
    try:
        write(building)
        try:
            building.rename(out_dir)
        except OSError:
            if not (out_dir / complete_file).exists():
                raise
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return out_dir

"""A checkpoint folder is whole or absent (turntaker_models/omni/checkpoint_dir.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from turntaker_models.omni.checkpoint_dir import build_in_place


def test_folder_appears_whole_and_is_not_rebuilt(tmp_path: Path) -> None:
    calls: list[Path] = []

    def write(folder: Path) -> None:
        calls.append(folder)
        assert not (tmp_path / "ckpt").exists(), "readers must not see a half-written folder"
        (folder / "config.json").write_text("{}")

    out = build_in_place(tmp_path / "ckpt", write, "config.json")
    assert (out / "config.json").read_text() == "{}"
    build_in_place(tmp_path / "ckpt", write, "config.json")
    assert len(calls) == 1, "an existing checkpoint folder must be left as it is"


def test_failed_write_leaves_nothing_behind(tmp_path: Path) -> None:
    def write(folder: Path) -> None:
        (folder / "half").write_text("x")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        build_in_place(tmp_path / "ckpt", write, "config.json")
    assert list(tmp_path.iterdir()) == [], "a failed build must leave no folder, not even aside"
